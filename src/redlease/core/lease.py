"""The held lease: what a holder knows about its grant, and the lost-lease signal."""

from __future__ import annotations

import enum
import inspect
import logging
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from redlease.core.ops import Claim
from redlease.errors import InvalidArgument

logger = logging.getLogger("redlease")

LostCallback = Callable[["Lease"], object]

DRIFT_FACTOR = 0.01
DRIFT_FLOOR_MS = 2
PAST_DEADLINE = "the lease reached its local deadline without a confirmed renewal"


def drift_ms(ttl_ms: int) -> float:
    """How much earlier than the server a client counts a lease as over: the two clocks
    may run at slightly different rates (1 % of the TTL, plus 2 ms)."""
    return ttl_ms * DRIFT_FACTOR + DRIFT_FLOOR_MS


def local_deadline(sent_at: float, ttl_ms: int) -> float:
    """When a lease granted or renewed by a request sent at ``sent_at`` must count as over.

    The server starts the TTL when the request arrives, which is after ``sent_at``; minus
    the drift allowance, no other client can hold the lock before this moment.
    """
    return sent_at + (ttl_ms - drift_ms(ttl_ms)) / 1000


class ReleaseOutcome(enum.Enum):
    """What a release found.

    ``EXPIRED`` is not an error: the lease had already ended (expired, deleted or taken
    over), nothing was removed, and the lease is marked lost so the holder can tell.
    ``STILL_HELD``: a re-entered hold was released and an outer one remains (nothing is
    sent); such an inner release says ``EXPIRED`` instead once the lease is known lost.
    """

    RELEASED = "released"
    STILL_HELD = "still_held"
    EXPIRED = "expired"


def _run_now(lease: Lease, callbacks: list[LostCallback]) -> None:
    run_callbacks(callbacks, lease)


@dataclass(eq=False)
class Lease:
    """One grant of one lock to one owner.

    ``fence`` is the fencing token: strictly greater than every token handed out for
    this lock before. Send it with every write to the protected resource and let the
    resource refuse smaller ones; that keeps a holder whose lease ended (paused, slow,
    partitioned) from doing harm.

    ``expires_at`` is a conservative local deadline on the monotonic clock: the time the
    grant (or the last renewal) was *sent* plus the TTL, minus a drift allowance (1 % of
    the TTL plus 2 ms). The server forgets the lease no earlier than that, and from that
    moment on the lease counts as lost (``lost`` is true) unless a renewal sent before it
    was confirmed in time.
    """

    name: str
    token: str
    fence: int
    ttl_ms: int
    _owner: Hashable
    _claim: Claim = field(repr=False)
    acquired_at: float
    expires_at: float
    _renewing: bool
    _count: int = 1
    renewals: int = 0
    _clock: Callable[[], float] = field(default=time.monotonic, repr=False)
    _reason: str | None = field(default=None, init=False)
    _callbacks: list[LostCallback] = field(default_factory=list, repr=False)
    _fire: Callable[[Lease, list[LostCallback]], None] = field(default=_run_now, repr=False)
    """How the client runs lost callbacks (the asyncio flavour schedules coroutines)."""
    _asyncio: bool = field(default=False, repr=False)
    """Whether the client runs ``async def`` callbacks (the asyncio flavour's does)."""
    _held_since: float | None = field(default=None, repr=False)
    """When its holder began to hold it, if not at ``acquired_at``: a read lease a
    downgrade made keeps the write grant's timing but is held from the downgrade."""

    @property
    def lost(self) -> bool:
        """True once the lease was found lost, or its local deadline passed unconfirmed."""
        return self._reason is not None or self._clock() >= self.expires_at

    @property
    def lost_reason(self) -> str | None:
        if self._reason is not None:
            return self._reason
        return PAST_DEADLINE if self._clock() >= self.expires_at else None

    @property
    def ttl(self) -> float:
        return self.ttl_ms / 1000

    def _held_for(self) -> float:
        """Seconds since its holder began to hold it (what the hooks report at release)."""
        since = self.acquired_at if self._held_since is None else self._held_since
        return self._clock() - since

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback(lease)`` once when the lease is found lost (at once if it is)."""
        self._check_callback(callback)
        if self._reason is None and not self.lost:
            self._callbacks.append(callback)
            return
        self._fire(self, [*self._mark_lost(PAST_DEADLINE), callback])

    def _check_callback(self, callback: LostCallback) -> None:
        """The sync flavour calls callbacks and drops what they return: an ``async def``
        one would never run, and the holder never be told."""
        call = getattr(callback, "__call__", None)  # noqa: B004 - an object's async __call__
        if not self._asyncio and any(
            inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)
            for function in (callback, call)
        ):
            raise InvalidArgument(
                f"on_lost got {callback!r}, an async def function, for a lease of the sync "
                "Locks, which would never await it: give a plain function (or use AsyncLocks)"
            )

    def _mark_lost(self, reason: str) -> list[LostCallback]:
        """Record the loss once; return the callbacks the caller must now run.

        A loss first seen at the local deadline takes the more telling reason found later
        (the release saw another owner), without running the callbacks again.
        """
        if self._reason is not None:
            if self._reason == PAST_DEADLINE:
                self._reason = reason
            return []
        self._reason = reason
        logger.warning("lease on lock %r lost: %s (fence %d)", self.name, reason, self.fence)
        callbacks, self._callbacks = self._callbacks, []
        return callbacks


def _call_safely(callback: LostCallback, lease: Lease) -> object:
    try:
        return callback(lease)
    except Exception:
        logger.exception("on_lost callback of lock %r raised", lease.name)
        return None


def run_callbacks(callbacks: list[LostCallback], lease: Lease) -> list[object]:
    """Run lost-lease callbacks, logging (not raising) their errors; return their results."""
    return [_call_safely(callback, lease) for callback in callbacks]


@dataclass(eq=False)
class MultiLease:
    """The leases of a multi-lock, one per name, in name order."""

    leases: list[Lease]

    @property
    def fences(self) -> dict[str, int]:
        return {lease.name: lease.fence for lease in self.leases}

    @property
    def lost(self) -> bool:
        return any(lease.lost for lease in self.leases)

    @property
    def lost_reason(self) -> str | None:
        return next((lease.lost_reason for lease in self.leases if lease.lost), None)

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback(lease)`` once, with the first part lease found lost: losing one
        part loses the multi-lock, and a later part's loss tells the holder nothing new."""
        for lease in self.leases:
            lease._check_callback(callback)
        told = threading.Lock()

        def first_loss(lease: Lease) -> object:
            if not told.acquire(blocking=False):
                return None
            return callback(lease)

        for lease in self.leases:
            lease.on_lost(first_loss)
