"""What to send for acquire, release and extend, and what each reply means.

Each flow is a generator: it yields :mod:`operations <redlease.core.ops>`, receives
their results (or has the driver's Redis error thrown into it), and returns the
outcome. The drivers in :mod:`redlease.sync` and :mod:`redlease.aio` run the same
flows, so both flavours take the same decisions.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from redlease.core.claims import Claim
from redlease.core.ops import Operation, RunScript, Subscribe, Wait
from redlease.errors import FenceExhausted, ServerUnavailable, WrongKeyType
from redlease.keys import LockKeys
from redlease.scripts import ScriptName

Clock = Callable[[], float]
Flow = Generator[Operation, Any, Any]

NETWORK_ERRORS = (RedisConnectionError, RedisTimeoutError)
EXPIRY_SLACK_S = 0.002
"""Added to a holder's remaining TTL when waiting on it, so the retry finds it expired."""

NOT_QUEUED, JOIN_QUEUE, IN_QUEUE = "0", "1", "2"
"""How an acquire attempt treats the waiter queue (see ``acquire.lua``)."""

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


@dataclass(frozen=True)
class Handoff:
    """A release handed the lock to this waiter; what its wake-up message carried."""

    fence: int
    received_at: float
    """When the message reached this client: the lease's TTL started no later."""


@dataclass(frozen=True)
class Grant:
    claim: Claim
    fence: int
    sent_at: float
    """Monotonic time the granting request left: the lease ends no earlier than this + TTL."""


def unavailable(keys: LockKeys, action: str, exc: BaseException) -> ServerUnavailable:
    return ServerUnavailable(f"could not {action} lock {keys.name!r}: server unreachable ({exc})")


def acquire_flow(request: AcquireRequest, clock: Clock) -> Flow:
    """Try at once; if blocking, subscribe, try again (now queued), then wait for a hand-off.

    The waiter subscribes to its own channel *before* it joins the queue, so a release
    that picks it always finds it listening, and a release that lands between the first
    try and the queueing is seen by the second try. A hand-off message means the lease is
    already ours (the release granted it to our token); every wait is also capped by the
    blockers' remaining TTL, since an expiry hands nothing to anybody. A waiter that gives
    up withdraws from the queue, and passes on whatever was handed to it meanwhile.
    """
    claim = request.claim
    deadline = math.inf if request.timeout is None else clock() + request.timeout
    queue = NOT_QUEUED
    if request.contended and request.blocking:
        yield Subscribe(claim.channel)
        queue = JOIN_QUEUE
    while True:
        sent_at = clock()
        try:
            reply = yield claim.acquire_op(queue)
        except NETWORK_ERRORS as exc:
            raise unavailable(claim.keys, "acquire", exc) from exc
        status, value = int(reply[0]), reply[1]
        if status == 1:
            return Grant(claim, int(value), sent_at)
        if status == -1:
            raise WrongKeyType(claim.keys.lease, _text(value), "string with an expiry (a lease)")
        if status == -2:
            raise _fence_error(claim.keys, _text(value))
        wait_ms = int(value)
        remaining = deadline - clock()
        if not request.blocking or remaining <= 0:
            if queue != NOT_QUEUED:
                yield from release_flow(claim, withdraw=True)
            return None
        if queue == NOT_QUEUED:
            yield Subscribe(claim.channel)
            queue = JOIN_QUEUE
            continue
        queue = IN_QUEUE
        handoff = yield Wait(min(remaining, wait_ms / 1000 + EXPIRY_SLACK_S))
        if handoff is not None:
            return Grant(claim, handoff.fence, handoff.received_at)


def release_flow(claim: Claim, *, withdraw: bool = False) -> Flow:
    """Release (handing on to the first live waiter), retrying only a lost reply.

    With ``withdraw`` the caller is a waiter giving up: it leaves the queue first, and
    whatever was handed to it meanwhile is passed on. Returns the script's code:
    :data:`RELEASED`, :data:`HANDED_OVER`, :data:`EXPIRED` or :data:`TAKEN_OVER`.
    """
    operation = claim.release_op(withdraw)
    for attempt in range(1, RELEASE_ATTEMPTS + 1):
        try:
            reply = yield operation
        except NETWORK_ERRORS as exc:
            if attempt == RELEASE_ATTEMPTS:
                raise unavailable(claim.keys, "release", exc) from exc
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
        return (yield operation)
    except NETWORK_ERRORS as exc:
        raise unavailable(keys, action, exc) from exc


def release_reason(code: int) -> str | None:
    """Why a release found nothing to release (``None`` when it did release)."""
    if code in (RELEASED, HANDED_OVER):
        return None
    if code == TAKEN_OVER:
        return "another owner holds the lock now (our lease expired and was taken over)"
    return "the lease had expired (or was deleted) before the release"


def _fence_error(keys: LockKeys, message: str) -> Exception:
    if "overflow" in message:
        return FenceExhausted(
            f"fencing counter {keys.fence!r} of lock {keys.name!r} is at its maximum; "
            "no further grant can carry a larger token"
        )
    return WrongKeyType(keys.fence, message, "integer counter")


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
