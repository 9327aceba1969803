"""The held lease: what a holder knows about its grant, and the lost-lease signal."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redlease.core.claims import Claim

logger = logging.getLogger("redlease")

LostCallback = Callable[["Lease"], object]


class ReleaseOutcome(enum.Enum):
    """What a release found.

    ``EXPIRED`` is not an error: the lease had already ended (expired, deleted or taken
    over), nothing was removed, and the lease is marked lost so the holder can tell.
    """

    RELEASED = "released"
    STILL_HELD = "still_held"
    EXPIRED = "expired"


@dataclass(eq=False)
class Lease:
    """One grant of one lock to one owner.

    ``fence`` is the fencing token: strictly greater than every token handed out for
    this lock before. Send it with every write to the protected resource and let the
    resource refuse smaller ones; that keeps a holder whose lease ended (paused, slow,
    partitioned) from doing harm.

    ``expires_at`` is a conservative local deadline on the monotonic clock: the time the
    grant (or the last renewal) was *sent* plus the TTL. The server forgets the lease no
    earlier than that.
    """

    name: str
    token: str
    fence: int
    ttl_ms: int
    owner: Hashable
    claim: Claim = field(repr=False)
    acquired_at: float
    expires_at: float
    renewing: bool
    count: int = 1
    lost_reason: str | None = None
    renewals: int = 0
    _callbacks: list[LostCallback] = field(default_factory=list, repr=False)

    @property
    def lost(self) -> bool:
        return self.lost_reason is not None

    @property
    def ttl(self) -> float:
        return self.ttl_ms / 1000

    def on_lost(self, callback: LostCallback) -> None:
        """Call ``callback(lease)`` once when the lease is found lost (at once if it is)."""
        if self.lost:
            _call_safely(callback, self)
        else:
            self._callbacks.append(callback)

    def mark_lost(self, reason: str) -> list[LostCallback]:
        """Record the loss once; return the callbacks the caller must now run."""
        if self.lost:
            return []
        self.lost_reason = reason
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
