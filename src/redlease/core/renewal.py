"""When each held lease is renewed, how renewals batch, and what a failed one means.

One schedule per client; its driver (a thread or a task) asks :meth:`RenewalSchedule.take_due`
for everything worth renewing now, sends it in as few round trips as it can (a round that
cannot end before the soonest local deadline is cut short), and hands the answers back to
:meth:`RenewalSchedule.settle`; leases whose deadline came are given up by
:meth:`RenewalSchedule.expire`. Leases are renewed at a third of their TTL;
anything due within the next sixth is taken along, so leases taken at nearby moments
share round trips instead of each costing its own.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Protocol, TypeVar

from redis.crc import key_slot

from redlease.core.hooks import Hooks
from redlease.core.lease import PAST_DEADLINE, Lease, LostCallback, local_deadline
from redlease.core.ops import RunScript
from redlease.core.protocol import Clock
from redlease.scripts import ScriptName

RETRY_AFTER_ERROR_S = 0.2
EARLY_FRACTION = 0.02
EARLY_LIMIT_S = 0.025


def told_at(lease: Lease) -> float:
    """When the worker reports a lease whose renewal was not confirmed: a little before its
    local deadline (2 % of the TTL, at most 25 ms), so that a worker woken late on a busy
    machine still tells the holder before the deadline, and before the server's expiry."""
    return lease.expires_at - min(lease.ttl * EARLY_FRACTION, EARLY_LIMIT_S)


IDLE_LOOK_S = 1.0
BATCH_SIZE = 500
"""Leases per renewal script call; several calls go out in one pipeline."""


class RenewalSchedule:
    """The leases a client holds: when each renewing one is renewed, and when any is over.

    Every held lease is watched for its local deadline (``Lease.expires_at``), renewed or
    not, so its holder is told by that moment: a lease whose renewal was not confirmed by
    then is lost, whatever the socket timeouts say. Thread-safe, clock-agnostic.
    """

    def __init__(self) -> None:
        self._due: dict[Lease, float] = {}
        """Each watched lease and when it is next renewed (``inf``: never, only watched)."""
        self._guard = threading.Lock()
        self._planned = math.inf

    def __len__(self) -> int:
        return len(self._due)

    def register(self, lease: Lease) -> bool:
        """Watch a lease (and renew it if it renews); True when the worker must wake sooner."""
        return self.reschedule(lease, lease.acquired_at, add=True)

    def reschedule(self, lease: Lease, sent_at: float, *, add: bool = False) -> bool:
        """After a grant or an ``extend`` sent at ``sent_at``: when to renew, when it is over.

        True when the worker must be woken to keep the new times.
        """
        with self._guard:
            if not add and lease not in self._due:
                return False
            due = self._due[lease] = sent_at + lease.ttl / 3 if lease._renewing else math.inf
            return min(due, told_at(lease)) < self._planned

    def leases(self) -> list[Lease]:
        """Every lease watched now."""
        with self._guard:
            return list(self._due)

    def unregister(self, lease: Lease) -> None:
        """Stop watching at once; a renewal already in flight is ignored when it lands."""
        with self._guard:
            self._due.pop(lease, None)

    def next_wakeup(self, now: float) -> float:
        """When the worker should next look; it remembers this to know when to be woken.

        It looks at least every :data:`IDLE_LOOK_S`, so a lease registered later whose
        renewal and deadline both fall after that needs no wake-up: a short-lived lease
        (taken and released within a second, the common case) costs the worker nothing.
        """
        with self._guard:
            soonest = min(
                (min(due, told_at(lease)) for lease, due in self._due.items()),
                default=math.inf,
            )
            self._planned = min(soonest, now + IDLE_LOOK_S)
            return self._planned

    def earliest_deadline(self) -> float:
        """When the soonest watched lease is reported lost unless renewed: a renewal round
        must end by then."""
        with self._guard:
            return min((told_at(lease) for lease in self._due), default=math.inf)

    def take_due(self, now: float) -> list[Lease]:
        with self._guard:
            return [
                lease
                for lease, due in self._due.items()
                if due - lease.ttl / 6 <= now < told_at(lease)
            ]

    def expire(self, now: float) -> list[tuple[Lease, list[LostCallback]]]:
        """Leases whose local deadline has come (see :func:`told_at`): no longer watched,
        marked lost."""
        with self._guard:
            over = [lease for lease in self._due if told_at(lease) <= now]
            for lease in over:
                del self._due[lease]
            return [(lease, lease._mark_lost(PAST_DEADLINE)) for lease in over]

    def settle(
        self, batch: Sequence[Lease], answers: Sequence[bool | None], sent_at: float, now: float
    ) -> list[tuple[Lease, list[LostCallback]]]:
        """Apply renewal answers (``None`` = no answer); return the callbacks of lost leases.

        A renewal confirmed after the lease's local deadline does not revive it: from that
        deadline on the holder was already told the lease is lost.
        """
        lost: list[tuple[Lease, list[LostCallback]]] = []
        with self._guard:
            for lease, answer in zip(batch, answers, strict=True):
                if lease not in self._due:
                    continue
                in_time = now < told_at(lease)
                if answer and in_time:
                    lease.expires_at = local_deadline(sent_at, lease.ttl_ms)
                    lease.renewals += 1
                    self._due[lease] = sent_at + lease.ttl / 3
                    continue
                if answer is None and in_time:
                    self._due[lease] = now + min(RETRY_AFTER_ERROR_S, lease.ttl / 10)
                    continue
                if answer is False:
                    reason = "renewal found the lease gone or owned by another"
                elif answer:
                    reason = PAST_DEADLINE
                else:
                    reason = "the server could not be reached before the lease's local deadline"
                del self._due[lease]
                lost.append((lease, lease._mark_lost(reason)))
        return lost


AnswersT_co = TypeVar("AnswersT_co", covariant=True)


class RenewalHost(Protocol[AnswersT_co]):
    """What a renewal worker needs from the client it serves (a ``Locks`` or a ``Redlock``):
    the schedule, the clock, where to report, and one round trip's renewal of due leases
    (``AnswersT_co`` is that call's result: the answers, or an awaitable of them)."""

    @property
    def _renewals(self) -> RenewalSchedule: ...

    @property
    def _clock(self) -> Clock: ...

    @property
    def _hooks(self) -> Hooks: ...

    def _renew_batch(self, due: list[Lease]) -> AnswersT_co:
        """Renew ``due`` leases; one answer per lease (True kept, False lost, None unknown)."""
        ...


Batch = tuple[list[Lease], RunScript]


def renewal_calls(due: Sequence[Lease], per_slot: bool = False) -> list[Batch]:
    """Group renewals into script calls of at most :data:`BATCH_SIZE` leases each.

    On a cluster (``per_slot``) a call holds only leases of one slot; the calls of one
    node still travel together in one pipeline.
    """
    if per_slot:
        by_slot: dict[int, list[Lease]] = {}
        for lease in due:
            by_slot.setdefault(key_slot(lease._claim.renew_key.encode()), []).append(lease)
        return [batch for group in by_slot.values() for batch in renewal_calls(group)]
    batches: list[Batch] = []
    for start in range(0, len(due), BATCH_SIZE):
        chunk = list(due[start : start + BATCH_SIZE])
        args: list[str | int] = []
        for lease in chunk:
            args += [lease._claim.renew_kind, lease.token, lease.ttl_ms]
        keys = [lease._claim.renew_key for lease in chunk]
        batches.append((chunk, RunScript(ScriptName.RENEW, keys, args)))
    return batches


def renewal_answers(
    due: Sequence[Lease], batches: Sequence[Batch], replies: Sequence[object]
) -> list[bool | None]:
    """One answer per lease of ``due``: True kept, False lost, None no answer (an error)."""
    answers: dict[Lease, bool | None] = {}
    for (leases, _), reply in zip(batches, replies, strict=True):
        flags = reply if isinstance(reply, list) else [None] * len(leases)
        for lease, flag in zip(leases, flags, strict=True):
            answers[lease] = None if flag is None else int(flag) == 1
    return [answers.get(lease) for lease in due]
