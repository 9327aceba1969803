"""What to send for acquire, release and extend, and what each reply means.

Each flow is a generator: it yields :mod:`operations <redlease.core.ops>`, receives
their results (or has the driver's Redis error thrown into it), and returns the
outcome. The drivers in :mod:`redlease.sync` and :mod:`redlease.aio` run the same
flows, so both flavours take the same decisions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, replace
from typing import Any

from redlease.compat import (
    ClusterErrors,
    ConnectionErrors,
    TimeoutErrors,
)
from redlease.core.failures import unavailable
from redlease.core.lease import local_deadline
from redlease.core.ops import Claim, Operation, RunScript, Subscribe, Wait
from redlease.core.replies import fence_error, foreign_value, script_answer, text_of
from redlease.errors import (
    LockError,
    ServerUnavailable,
)
from redlease.keys import LockKeys
from redlease.scripts import ScriptName

Clock = Callable[[], float]
Flow = Generator[Operation, Any, Any]

NETWORK_ERRORS: tuple[type[Exception], ...] = (*ConnectionErrors, *TimeoutErrors, *ClusterErrors)
"""No answer from the server; redis-py's cluster client says so with RedisClusterException
(no node answers, or the nodes disagree on the slots), which is no ConnectionError."""
EXPIRY_SLACK_S = 0.002
"""Added to a holder's remaining TTL when waiting on it, so the retry finds it expired."""

NOT_QUEUED, JOIN_QUEUE, QUEUED = "0", "1", "2"
"""How an acquire attempt treats the waiter queue (see ``acquire.lua``): not at all, join
it, or be in it again if a fault dropped the entry."""
SUBSCRIBE_TIMEOUT_S = 10.0
"""The longest a waiter waits for the server to confirm its subscription."""

RELEASE_ATTEMPTS = 3
RELEASED, HANDED_OVER, EXPIRED, TAKEN_OVER = 1, 2, -1, -2
"""Release script answers."""


@dataclass(frozen=True)
class AcquireRequest:
    claim: Claim
    blocking: bool
    timeout: float | None
    """Seconds to keep trying; ``None`` waits as long as it takes."""
    contended: bool = False
    """This client just handed the lock to a waiter: queue up at once instead of barging."""
    started_at: float = 0.0
    observation: Any = None
    """What the client's hooks returned when the acquisition began."""
    withdraws_itself: bool = True
    """Whether a waiter whose time ran out withdraws from the queue within the flow; a
    client's own acquisition gets :data:`LEFT_QUEUED` instead, and withdraws in a way that
    a stopped server cannot hold up past a bound (a multi-lock's steps withdraw here)."""


LEFT_QUEUED: Any = object()
"""What :func:`acquire_flow` returns for a request that does not withdraw itself when its
time ran out while it was queued: the caller withdraws it, then reports the timeout."""


@dataclass(frozen=True)
class Handoff:
    """A release handed the lock to this waiter; what its wake-up message carried."""

    fence: int
    server_ms: int | None
    """The server's clock when it granted the lease."""
    received_at: float
    """When the message reached this client: the lease's TTL started no later."""


@dataclass
class ServerAnchor:
    """A local moment known to be no later than a reading of the server's clock.

    A waiter takes one from each refused attempt (the request left at ``sent_at``; the
    server read ``server_ms`` after that). A hand-off stamped with the server's clock then
    dates the grant locally without trusting when the message was *read*: a waiter that
    was paused while its lease ran would otherwise believe the lease had just begun.
    """

    sent_at: float = 0.0
    server_ms: int | None = None

    def grant_time(self, handoff: Handoff) -> float:
        """The earliest local time the handed-over lease can have started."""
        if handoff.server_ms is None or self.server_ms is None:
            return handoff.received_at
        elapsed = max(handoff.server_ms - self.server_ms, 0) / 1000
        return min(self.sent_at + elapsed, handoff.received_at)


@dataclass(frozen=True)
class Grant:
    claim: Claim
    fence: int
    sent_at: float
    """Monotonic time the granting request left: the lease ends no earlier than this + TTL."""
    contended: bool = False
    """Another owner held the lock when this acquisition began (it waited, or was refused)."""


@dataclass(frozen=True)
class Refusal:
    """Another owner holds the lock: how long to wait at most, and the server's clock."""

    wait_s: float
    anchor: ServerAnchor


def acquire_flow(request: AcquireRequest, clock: Clock) -> Flow:
    """Try at once; if blocking, subscribe, try again (now queued), then wait for a hand-off.

    The waiter's client listens on its channel *before* the waiter joins the queue, so a
    release that picks it always finds it listening, and a release that lands between the
    first try and the queueing is seen by the second try (a client that met contention on
    this name lately listens first and joins with its first try). A hand-off message means
    the lease is already ours (the release granted it to our token); every wait is capped by the
    time the current lease can end, since an expiry hands nothing to anybody, and every
    retry puts the waiter back in the queue if a fault dropped it there. A grant is only
    returned while it is alive by its local deadline (a waiter paused while its lease ran
    gives it back and keeps waiting), and, with ``replicas=N``, once N replicas confirmed
    it: a hand-off included. A waiter that gives up withdraws from the queue, and passes
    on whatever was handed to it meanwhile.
    """
    claim = request.claim
    deadline = math.inf if request.timeout is None else clock() + request.timeout
    anchor: ServerAnchor | None = None
    queue = NOT_QUEUED
    if request.contended and request.blocking:
        if not (yield from _subscribe(claim, deadline, clock)):
            return None
        queue = JOIN_QUEUE
    while True:
        attempt = yield from _attempt(claim, queue, clock)
        if isinstance(attempt, Grant):
            return replace(attempt, contended=anchor is not None)
        if attempt is not None:
            anchor = attempt.anchor
        remaining = deadline - clock()
        if not request.blocking or remaining <= 0:
            return (yield from _give_up(request, queue))
        if queue == NOT_QUEUED:
            if not (yield from _subscribe(claim, deadline, clock)):
                return None
            queue = JOIN_QUEUE
            continue
        queue = QUEUED
        if attempt is None:
            continue  # a grant that was over on arrival was given back: ask again
        handoff = yield Wait(min(remaining, attempt.wait_s))
        if handoff is not None:
            grant = yield from _take_handoff(claim, handoff, anchor, clock)
            if grant is not None:
                return replace(grant, contended=True)
        elif clock() >= deadline:  # no last try: on a stopped server it would outlast the time
            return (yield from _give_up(request, queue))


def _give_up(request: AcquireRequest, queue: str) -> Flow:
    """The end of an acquisition whose time ran out: ``None``, once a queued waiter
    withdrew (or :data:`LEFT_QUEUED`, for a caller that withdraws it)."""
    if queue == NOT_QUEUED:
        return None
    if not request.withdraws_itself:
        return LEFT_QUEUED
    yield from release_flow(request.claim.without_acks(), withdraw=True)
    return None


def _attempt(claim: Claim, queue: str, clock: Clock) -> Flow:
    """One acquire script call: a live :class:`Grant`, a :class:`Refusal`, or ``None`` when
    the grant was already over on arrival (it was given back).

    The call goes without WAIT: the replicas confirm a grant (see :func:`_confirmed`), and a
    try that finds the lock held must not wait for them, as ``timeout`` bounds the wait.
    """
    sent_at = clock()
    operation = claim.without_acks().acquire_op(queue)
    try:
        reply = yield operation
    except NETWORK_ERRORS as exc:
        raise unavailable(claim.keys, "acquire", exc) from exc
    status, value = int(reply[0]), reply[1]
    if status == 1:
        return (yield from _confirmed(Grant(claim, int(value), sent_at), clock))
    if status == -1:
        raise foreign_value(operation, reply)
    if status == -2:
        raise fence_error(claim.keys, text_of(value))
    return Refusal(int(value) / 1000 + EXPIRY_SLACK_S, ServerAnchor(sent_at, int(reply[2])))


def _take_handoff(
    claim: Claim, handoff: Handoff, anchor: ServerAnchor | None, clock: Clock
) -> Flow:
    """The grant a hand-off message carried, once confirmed alive; ``None`` to keep waiting."""
    granted = handoff.received_at if anchor is None else anchor.grant_time(handoff)
    return (yield from _confirmed(Grant(claim, handoff.fence, granted), clock))


def _confirmed(grant: Grant, clock: Clock) -> Flow:
    """``grant`` once alive by its local deadline and, with ``replicas=N``, confirmed by N
    replicas; ``None`` (keep waiting) when it ended first, given back if it was ours."""
    claim = grant.claim
    if claim.acks is not None:
        confirmed = yield from confirm_replicas(claim, clock)
        if confirmed is None:
            return None  # the lease ended before the replicas could confirm it
        grant = replace(grant, sent_at=max(grant.sent_at, confirmed))
    if alive(grant, clock()):
        return grant
    yield from give_back(claim)
    return None


def alive(grant: Grant, now: float) -> bool:
    """Whether a grant is still alive by its local deadline (see :func:`local_deadline`)."""
    return now < local_deadline(grant.sent_at, grant.claim.ttl_ms)


def _subscribe(claim: Claim, deadline: float, clock: Clock) -> Flow:
    """Listen on the waiter's channel; False when the caller's time ran out first."""
    remaining = deadline - clock()
    try:
        confirmed = yield Subscribe(claim.channel, min(remaining, SUBSCRIBE_TIMEOUT_S), claim)
    except NETWORK_ERRORS as exc:
        raise unavailable(claim.keys, "wait for", exc) from exc
    if confirmed:
        return True
    if clock() >= deadline:
        return False
    raise ServerUnavailable(
        f"could not wait for lock {claim.keys.name!r}: the server did not confirm the "
        f"subscription to its wake-up channel within {SUBSCRIBE_TIMEOUT_S:g} s"
    )


def confirm_replicas(claim: Claim, clock: Clock) -> Flow:
    """With ``replicas=N``: make the granted lease a write of our own and wait for N replicas.

    WAIT counts one connection's writes, and a hand-off was the releaser's write (a grant
    may have gone out on another connection); refreshing the lease's TTL is a write whose
    acknowledgement covers everything before it. Returns
    when it was sent, or ``None`` when the lease was already gone. Too few confirmations
    raise :class:`ReplicaShortfall` (the caller gives the lease back: ``NotReplicated``).
    """
    sent_at = clock()
    try:
        reply = yield RunScript(
            ScriptName.RENEW,
            (claim.renew_key,),
            (claim.renew_kind, claim.token, claim.ttl_ms),
            acks=claim.acks,
        )
    except NETWORK_ERRORS as exc:
        raise unavailable(claim.keys, "acquire", exc) from exc
    return sent_at if int(reply[0]) == 1 else None


def give_back(claim: Claim) -> Flow:
    """Release a grant the caller will not use, leaving no latch: its token may be granted
    again on the next try. Best effort: a lost reply is retried, a failure ignored."""
    try:
        yield from release_flow(claim.without_acks(), latch=False)
    except LockError:
        return


def release_flow(
    claim: Claim,
    *,
    withdraw: bool = False,
    attempts: int = RELEASE_ATTEMPTS,
    latch: bool = True,
) -> Flow:
    """Release (handing on to the first live waiter), retrying only a lost reply: a broken
    connection is tried again at once, a server that did not answer within the socket
    timeout is not (the caller goes on from the background, see ``background.py``).

    With ``withdraw`` the caller is a waiter giving up: it leaves the queue first, and
    whatever was handed to it meanwhile is passed on. Returns the script's code:
    :data:`RELEASED`, :data:`HANDED_OVER`, :data:`EXPIRED` or :data:`TAKEN_OVER`.
    """
    for attempt in range(1, attempts + 1):
        operation = claim.release_op(withdraw, latch=latch)
        try:
            reply = yield operation
        except NETWORK_ERRORS as exc:
            if attempt == attempts or isinstance(exc, TimeoutErrors):
                action = "withdraw from the queue of" if withdraw else "release"
                raise unavailable(claim.keys, action, exc) from exc
            continue
        return int(reply)
    raise AssertionError("unreachable")  # pragma: no cover


def extend_flow(claim: Claim, ttl_ms: int, clock: Clock) -> Flow:
    """Extend one lease if still ours. Returns ``(extended, sent_at)``."""
    sent_at = clock()
    operation = RunScript(
        ScriptName.RENEW, (claim.renew_key,), (claim.renew_kind, claim.token, ttl_ms)
    )
    try:
        reply = yield operation
    except NETWORK_ERRORS as exc:
        raise unavailable(claim.keys, "extend", exc) from exc
    return int(reply[0]) == 1, sent_at


def call_flow(operation: RunScript, keys: LockKeys, action: str) -> Flow:
    """One script call whose reply is the answer (inspection, downgrade, count-down)."""
    try:
        reply = yield operation
    except NETWORK_ERRORS as exc:
        raise unavailable(keys, action, exc) from exc
    return script_answer(operation, reply)


def release_reason(code: int) -> str | None:
    """Why a release found nothing to release (``None`` when it did release)."""
    if code in (RELEASED, HANDED_OVER):
        return None
    if code == TAKEN_OVER:
        return "another owner holds the lock now (our lease expired and was taken over)"
    return "the lease had expired (or was deleted) before the release"


def latch_wait_flow(
    operation: RunScript, keys: LockKeys, timeout: float | None, clock: Clock
) -> Flow:
    """Wait until the latch's count is zero: check, subscribe, check again, wait, check."""
    deadline = math.inf if timeout is None else clock() + timeout
    subscribed = False
    channel = keys.broadcast
    while True:
        count = yield from call_flow(operation, keys, "wait for")
        if int(count) <= 0:
            return True
        remaining = deadline - clock()
        if remaining <= 0:
            return False
        if not subscribed:
            try:
                confirmed = yield Subscribe(channel, min(remaining, SUBSCRIBE_TIMEOUT_S))
            except NETWORK_ERRORS as exc:
                raise unavailable(keys, "wait for", exc) from exc
            if not confirmed:
                if clock() >= deadline:
                    return False
                raise ServerUnavailable(f"the subscription to {channel!r} was not confirmed")
            subscribed = True
            continue
        yield Wait(min(remaining, LATCH_RECHECK_S))


LATCH_RECHECK_S = 60.0
"""A latch waiter looks again at least this often (it is woken at once on zero)."""
