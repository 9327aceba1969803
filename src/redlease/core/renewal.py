"""When each held lease is renewed, how renewals batch, and what a failed one means.

One schedule per client; its driver (a thread or a task) asks :meth:`RenewalSchedule.take_due`
for everything worth renewing now, sends it in as few round trips as it can, and hands the
answers back to :meth:`RenewalSchedule.settle`. Leases are renewed at a third of their TTL;
anything due within the next sixth is taken along, so leases taken at nearby moments
share round trips instead of each costing its own.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

from redis.crc import key_slot

from redlease.core.lease import Lease, LostCallback
from redlease.core.ops import RunScript
from redlease.scripts import ScriptName

RETRY_AFTER_ERROR_S = 0.2
IDLE_LOOK_S = 1.0
BATCH_SIZE = 500
"""Leases per renewal script call; several calls go out in one pipeline."""


class RenewalSchedule:
    """The leases a client renews, and when each is due. Thread-safe, clock-agnostic."""

    def __init__(self) -> None:
        self._due: dict[Lease, float] = {}
        self._guard = threading.Lock()
        self._planned = math.inf

    def __len__(self) -> int:
        return len(self._due)

    def register(self, lease: Lease) -> bool:
        """Schedule a lease; True when it is due before the worker planned to wake."""
        with self._guard:
            due = self._due[lease] = lease.acquired_at + lease.ttl / 3
            return due < self._planned

    def unregister(self, lease: Lease) -> None:
        """Stop renewing at once; a renewal already in flight is ignored when it lands."""
        with self._guard:
            self._due.pop(lease, None)

    def next_wakeup(self, now: float) -> float:
        """When the worker should next look; it remembers this to know when to be woken.

        With nothing due it still looks every :data:`IDLE_LOOK_S`, so a lease registered
        later and due after that needs no wake-up: a short-lived default lease (taken and
        released within seconds, the common case) costs the worker nothing.
        """
        with self._guard:
            self._planned = min(self._due.values(), default=now + IDLE_LOOK_S)
            return self._planned

    def take_due(self, now: float) -> list[Lease]:
        with self._guard:
            return [lease for lease, due in self._due.items() if due - lease.ttl / 6 <= now]

    def settle(
        self, batch: Sequence[Lease], answers: Sequence[bool | None], sent_at: float, now: float
    ) -> list[tuple[Lease, list[LostCallback]]]:
        """Apply renewal answers (``None`` = no answer); return the callbacks of lost leases."""
        lost: list[tuple[Lease, list[LostCallback]]] = []
        with self._guard:
            for lease, answer in zip(batch, answers, strict=True):
                if lease not in self._due:
                    continue
                if answer:
                    lease.expires_at = sent_at + lease.ttl
                    lease.renewals += 1
                    self._due[lease] = sent_at + lease.ttl / 3
                    continue
                if answer is None and now < lease.expires_at:
                    self._due[lease] = now + min(RETRY_AFTER_ERROR_S, lease.ttl / 10)
                    continue
                reason = (
                    "renewal found the lease gone or owned by another"
                    if answer is False
                    else "the server could not be reached before the lease ran out"
                )
                del self._due[lease]
                lost.append((lease, lease.mark_lost(reason)))
        return lost


Batch = tuple[list[Lease], RunScript]


def renewal_calls(due: Sequence[Lease], per_slot: bool = False) -> list[Batch]:
    """Group renewals into script calls of at most :data:`BATCH_SIZE` leases each.

    On a cluster (``per_slot``) a call holds only leases of one slot; the calls of one
    node still travel together in one pipeline.
    """
    if per_slot:
        by_slot: dict[int, list[Lease]] = {}
        for lease in due:
            by_slot.setdefault(key_slot(lease.claim.renew_key.encode()), []).append(lease)
        return [batch for group in by_slot.values() for batch in renewal_calls(group)]
    batches: list[Batch] = []
    for start in range(0, len(due), BATCH_SIZE):
        chunk = list(due[start : start + BATCH_SIZE])
        args: list[str | int] = []
        for lease in chunk:
            args += [lease.claim.renew_kind, lease.token, lease.ttl_ms]
        keys = [lease.claim.renew_key for lease in chunk]
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
