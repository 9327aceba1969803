"""Taking several exclusive locks all or none, without deadlock, on one server or across slots.

Claims come sorted by name: that is the global order every multi-lock follows. With
``atomic`` (one server, or every name in one cluster slot) a single script takes all of
them when all are free. Otherwise, or while some are busy, the flow blocks on the first
busy lock in order, holding only locks that come before it (it lets go of later ones
first), so two multi-locks can never wait on each other. The parts it holds while it
waits are renewed on their own schedule (a third of the TTL), and before returning every
part is confirmed in one last pass, so no part can have expired and gone to someone else
on the way. A timeout gives everything back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from redis.crc import key_slot

from redlease.core.failures import unavailable
from redlease.core.ops import Claim, RunScript
from redlease.core.protocol import (
    NETWORK_ERRORS,
    AcquireRequest,
    Clock,
    Flow,
    acquire_flow,
    confirm_replicas,
    extend_flow,
    give_back,
    release_flow,
)
from redlease.core.replies import fence_error, text_of
from redlease.errors import WrongKeyType
from redlease.keys import LockKeys
from redlease.scripts import ScriptName


def one_slot(keys: Sequence[LockKeys]) -> bool:
    """Whether every lock lands in one Redis Cluster slot (one script may then take all)."""
    return len({key_slot(lock.lease.encode()) for lock in keys}) == 1


MultiResult = tuple[list[int], float]
"""The fences in the claims' order, and when the grant of all of them was sent."""


def multi_acquire_flow(
    claims: list[Claim], atomic: bool, request: AcquireRequest, clock: Clock
) -> Flow:
    """Take every claim or none: a :data:`MultiResult`, or ``None`` when time ran out."""
    deadline = math.inf if request.timeout is None else clock() + request.timeout
    held = _Held(claims, clock)
    while True:
        if not (yield from held.keep_alive()):
            continue  # a part was lost while waiting: everything was given back, start over
        busy = held.first_missing()
        if atomic:
            result = yield from _take_all_at_once(claims, held)
            if isinstance(result, tuple):
                return result
            busy = result
        remaining = deadline - clock()
        if atomic and (not request.blocking or remaining <= 0):
            yield from held.give_back()
            return None
        yield from held.give_back(after=busy)
        step_timeout = min(remaining, held.renewal_due() - clock())
        step = AcquireRequest(
            claims[busy],
            blocking=request.blocking and remaining > 0,
            timeout=None if math.isinf(step_timeout) else max(step_timeout, 0.0),
        )
        grant = yield from acquire_flow(step, clock)
        if grant is None:
            if request.blocking and clock() < deadline:
                continue  # only the parts' renewal was due: renew them and wait on
            yield from held.give_back()
            return None
        held.add(busy, grant.fence, grant.sent_at)
        if not atomic and held.complete():
            confirmed = yield from held.confirm_all()
            if confirmed is not None:
                return confirmed


def _take_all_at_once(claims: list[Claim], held: _Held) -> Flow:
    """The one-script attempt: a :data:`MultiResult`, or the index of the first busy part."""
    sent_at = held.clock()
    keys: list[str] = []
    for claim in claims:
        keys += [claim.keys.lease, claim.keys.fence]
    operation = RunScript(ScriptName.MULTI_ACQUIRE, keys, (claims[0].token, claims[0].ttl_ms))
    try:
        reply = yield operation
    except NETWORK_ERRORS as exc:  # the caller withdraws every part
        raise unavailable(claims[0].keys, "acquire", exc) from exc
    status = int(reply[0])
    if status == 1:
        # replicas confirm the grant, not the try (a shortfall: the caller withdraws every
        # part, NotReplicated); one server's replicas that have a later write have it all
        fences = [held.fences.get(i) or int(f) for i, f in enumerate(reply[1:])]
        confirmed = claims[0].acks is None or (
            (yield from confirm_replicas(claims[0], held.clock)) is not None
        )
        if confirmed:
            return fences, sent_at
        for claim in claims:  # the first part ended before its replicas confirmed it
            yield from give_back(claim)
        return 0
    if status < 0:
        yield from held.give_back()
        index = int(reply[1]) - 1
        if status == -2:
            raise fence_error(claims[index].keys, text_of(reply[2]))
        raise WrongKeyType(claims[index].keys.lease, text_of(reply[2]), "lease string")
    return int(reply[1]) - 1


class _Held:
    """The parts a multi-lock acquisition holds so far, and when each was last granted."""

    def __init__(self, claims: list[Claim], clock: Clock) -> None:
        self.claims = claims
        self.clock = clock
        self.fences: dict[int, int] = {}
        self.since: dict[int, float] = {}
        """When each held part's lease was granted or last renewed (send time)."""

    def first_missing(self) -> int:
        return next((index for index in range(len(self.claims)) if index not in self.fences), 0)

    def complete(self) -> bool:
        return len(self.fences) == len(self.claims)

    def add(self, index: int, fence: int, sent_at: float) -> None:
        self.fences[index] = fence
        self.since[index] = sent_at

    def renewal_due(self) -> float:
        """When the earliest held part must be renewed (a third of its TTL after its grant)."""
        return min(
            (sent + self.claims[index].ttl_ms / 3000 for index, sent in self.since.items()),
            default=math.inf,
        )

    def keep_alive(self) -> Flow:
        """Renew the held parts when due; False when one was lost (all are given back)."""
        if self.renewal_due() > self.clock():
            return True
        alive = yield from self._renew(list(self.since))
        if alive is None:
            yield from self.give_back()
        return alive is not None

    def confirm_all(self) -> Flow:
        """Renew every part in one last pass: the result, or ``None`` after a loss (all are
        given back, and the caller starts over)."""
        sent_at = yield from self._renew(sorted(self.fences))
        if sent_at is None:
            yield from self.give_back()
            return None
        return [self.fences[index] for index in range(len(self.claims))], sent_at

    def _renew(self, indexes: list[int]) -> Flow:
        """Extend the given parts to a full TTL; the earliest send time, or ``None`` if any
        part was no longer ours."""
        earliest = math.inf
        for index in indexes:
            claim = self.claims[index]
            extended, sent_at = yield from extend_flow(claim, claim.ttl_ms, self.clock)
            if not extended:
                return None
            self.since[index] = sent_at
            earliest = min(earliest, sent_at)
        return earliest

    def give_back(self, after: int = -1) -> Flow:
        """Release the held parts (only those after index ``after``), last first."""
        for index in sorted(self.fences, reverse=True):
            if index > after:
                yield from release_flow(self.claims[index])
                del self.fences[index]
                self.since.pop(index, None)
