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

from redlease.core.ops import Operation, RunScript, Subscribe, Wait
from redlease.errors import FenceExhausted, ServerUnavailable, WrongKeyType
from redlease.keys import LockKeys
from redlease.scripts import ScriptName

Clock = Callable[[], float]
Flow = Generator[Operation, Any, Any]

NETWORK_ERRORS = (RedisConnectionError, RedisTimeoutError)
EXPIRY_SLACK_S = 0.002
"""Added to a holder's remaining TTL when waiting on it, so the retry finds it expired."""

RELEASE_ATTEMPTS = 3
RELEASE_LATCH_MS = 60_000
"""How long a release remembers its answer for a retry (the latch key's own TTL)."""


@dataclass(frozen=True)
class AcquireRequest:
    keys: LockKeys
    token: str
    ttl_ms: int
    blocking: bool
    timeout: float | None
    """Seconds to keep trying; ``None`` waits as long as it takes."""


@dataclass(frozen=True)
class Grant:
    token: str
    fence: int
    sent_at: float
    """Monotonic time the granting request left: the lease ends no earlier than this + TTL."""


def unavailable(keys: LockKeys, action: str, exc: BaseException) -> ServerUnavailable:
    return ServerUnavailable(f"could not {action} lock {keys.name!r}: server unreachable ({exc})")


def acquire_flow(request: AcquireRequest, clock: Clock) -> Flow:
    """Try at once; if blocking, subscribe, try again, then wait for a wake-up or expiry.

    Subscribing *before* the second try closes the lost wake-up gap: a release that
    lands between the first failed try and the subscription is seen by the second try.
    Every wait is capped by the holder's remaining TTL, so an expiry (which publishes
    nothing) still wakes the waiter on time.
    """
    keys = request.keys
    deadline = math.inf if request.timeout is None else clock() + request.timeout
    check_foreign = True
    subscribed = False
    while True:
        sent_at = clock()
        try:
            reply = yield RunScript(
                ScriptName.ACQUIRE,
                (keys.lease, keys.fence),
                (request.token, request.ttl_ms, "1" if check_foreign else "0"),
            )
        except NETWORK_ERRORS as exc:
            raise unavailable(keys, "acquire", exc) from exc
        status, value = int(reply[0]), reply[1]
        if status == 1:
            return Grant(request.token, int(value), sent_at)
        if status == -1:
            raise WrongKeyType(keys.lease, _text(value), "string with an expiry (a lease)")
        if status == -2:
            raise _fence_error(keys, _text(value))
        pttl_ms = int(value)
        check_foreign = pttl_ms < 0
        remaining = deadline - clock()
        if not request.blocking or remaining <= 0:
            return None
        if not subscribed:
            yield Subscribe(keys.channel)
            subscribed = True
            continue
        yield Wait(min(remaining, max(pttl_ms, 1) / 1000 + EXPIRY_SLACK_S))


def release_flow(keys: LockKeys, token: str, publish_command: str) -> Flow:
    """Release once, retrying (with the same token) only when the reply was lost.

    Returns the script's code: 1 released, -1 expired, -2 taken over.
    """
    for attempt in range(1, RELEASE_ATTEMPTS + 1):
        try:
            reply = yield RunScript(
                ScriptName.RELEASE,
                (keys.lease, keys.latch(token), keys.channel),
                (token, RELEASE_LATCH_MS, publish_command),
            )
        except NETWORK_ERRORS as exc:
            if attempt == RELEASE_ATTEMPTS:
                raise unavailable(keys, "release", exc) from exc
            continue
        return int(reply)
    raise AssertionError("unreachable")  # pragma: no cover


def extend_flow(keys: LockKeys, token: str, ttl_ms: int, clock: Clock) -> Flow:
    """Extend one lease if still ours. Returns ``(extended, sent_at)``."""
    sent_at = clock()
    try:
        reply = yield RunScript(ScriptName.RENEW, (keys.lease,), (token, ttl_ms))
    except NETWORK_ERRORS as exc:
        raise unavailable(keys, "extend", exc) from exc
    return int(reply[0]) == 1, sent_at


def release_reason(code: int) -> str | None:
    """Why a release found nothing to release (``None`` when it did release)."""
    if code == 1:
        return None
    if code == -2:
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
