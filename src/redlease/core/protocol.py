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

from redlease.core.lease import Lease
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
    token: str
    fence: int
    sent_at: float
    """Monotonic time the granting request left: the lease ends no earlier than this + TTL."""


def unavailable(keys: LockKeys, action: str, exc: BaseException) -> ServerUnavailable:
    return ServerUnavailable(f"could not {action} lock {keys.name!r}: server unreachable ({exc})")


def acquire_flow(request: AcquireRequest, clock: Clock, publish_command: str) -> Flow:
    """Try at once; if blocking, subscribe, try again (now queued), then wait for a hand-off.

    The waiter subscribes to its own channel *before* it joins the queue, so a release
    that picks it always finds it listening, and a release that lands between the first
    try and the queueing is seen by the second try. A hand-off message means the lock is
    already ours (the release set it to our token); every wait is also capped by the
    holder's remaining TTL, since an expiry hands nothing to anybody. A waiter that gives
    up withdraws from the queue, and gives the lock back if it was handed over meanwhile.
    """
    keys = request.keys
    deadline = math.inf if request.timeout is None else clock() + request.timeout
    queue = NOT_QUEUED
    if request.contended and request.blocking:
        yield Subscribe(keys.waiter_channel(request.token))
        queue = JOIN_QUEUE
    while True:
        sent_at = clock()
        try:
            reply = yield RunScript(
                ScriptName.ACQUIRE,
                (keys.lease, keys.fence, keys.queue),
                (request.token, request.ttl_ms, queue),
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
        remaining = deadline - clock()
        if not request.blocking or remaining <= 0:
            if queue != NOT_QUEUED:
                yield from release_flow(keys, request, publish_command, withdraw=True)
            return None
        if queue == NOT_QUEUED:
            yield Subscribe(keys.waiter_channel(request.token))
            queue = JOIN_QUEUE
            continue
        queue = IN_QUEUE
        handoff = yield Wait(min(remaining, pttl_ms / 1000 + EXPIRY_SLACK_S))
        if handoff is not None:
            return Grant(request.token, handoff.fence, handoff.received_at)


def release_flow(
    keys: LockKeys, lease: AcquireRequest | Lease, publish_command: str, *, withdraw: bool = False
) -> Flow:
    """Release (handing the lock to the first live waiter), retrying only a lost reply.

    With ``withdraw`` the caller is a waiter giving up: it leaves the queue first, and
    whatever was handed to it meanwhile is passed on. Returns the script's code: 1
    released, 2 handed to a waiter, -1 expired, -2 taken over.
    """
    member = queue_member(lease.ttl_ms, lease.token) if withdraw else ""
    for attempt in range(1, RELEASE_ATTEMPTS + 1):
        try:
            reply = yield RunScript(
                ScriptName.RELEASE,
                (keys.lease, keys.latch(lease.token), keys.queue, keys.fence),
                (lease.token, RELEASE_LATCH_MS, publish_command, keys.wake_prefix, member),
            )
        except NETWORK_ERRORS as exc:
            if attempt == RELEASE_ATTEMPTS:
                raise unavailable(keys, "release", exc) from exc
            continue
        return int(reply)
    raise AssertionError("unreachable")  # pragma: no cover


def queue_member(ttl_ms: int, token: str) -> str:
    """A waiter's queue entry: the release script hands over with this TTL to this token."""
    return f"{ttl_ms}:{token}"


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
    if code in (1, 2):
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
