"""Bookkeeping for the one pub/sub connection a client shares among all its waiters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

from redlease.compat import NoPermissionErrors

W = TypeVar("W")


@dataclass(frozen=True)
class PubSubCommands:
    """Sharded pub/sub (Redis 7+, Valkey) keeps wake-ups on the shard that owns the lock."""

    sharded: bool

    @property
    def publish(self) -> str:
        return "spublish" if self.sharded else "publish"

    @property
    def subscribe(self) -> str:
        return "SSUBSCRIBE" if self.sharded else "SUBSCRIBE"

    @property
    def unsubscribe(self) -> str:
        return "SUNSUBSCRIBE" if self.sharded else "UNSUBSCRIBE"


def is_denied(error: BaseException) -> bool:
    """Whether a server error is an ACL refusal (no permission), not a missing command."""
    return isinstance(error, NoPermissionErrors) or str(error).startswith("NOPERM")


def has_sharded_pubsub(info: dict[str, Any]) -> bool:
    """From ``INFO server``: Valkey, or Redis 7.0 and newer."""
    if "valkey_version" in info or str(info.get("server_name", "")).lower() == "valkey":
        return True
    major = str(info.get("redis_version", "0")).split(".")[0]
    return major.isdigit() and int(major) >= 7


def refusal(channel: str, error: BaseException) -> str:
    """What to tell a waiter whose subscription the server refused."""
    return (
        f"the server refused to subscribe to {channel!r}, which a waiting acquire needs "
        f"({error}); give the user pub/sub permission (e.g. ACL +@pubsub and channel access "
        "&<prefix>:*), or do not wait (timeout=0, try_acquire)"
    )


MESSAGE_KINDS = frozenset({b"message", b"smessage"})
CONFIRM_KINDS = frozenset({b"subscribe", b"ssubscribe"})
MOVED_KINDS = frozenset({b"sunsubscribe"})
"""A shard channel's unsubscribe: ours (the channel has no waiter left) or the server's,
when the channel's slot moved to another node."""


@dataclass(frozen=True)
class Push:
    """A pub/sub push: a ``message`` with its payload, a subscription ``confirm``, or a
    shard channel's unsubscribe (``moved``)."""

    kind: str
    channel: str
    payload: str


def classify(reply: object) -> Push | None:
    """What a reply read from the pub/sub connection is (``None``: not for us)."""
    if not isinstance(reply, list) or len(reply) < 3:
        return None
    kind, channel, payload = (
        item.decode() if isinstance(item, bytes) else str(item) for item in reply[:3]
    )
    if kind.encode() in MESSAGE_KINDS:
        return Push("message", channel, payload)
    if kind.encode() in CONFIRM_KINDS:
        return Push("confirm", channel, payload)
    if kind.encode() in MOVED_KINDS:
        return Push("moved", channel, payload)
    return None


PING_WHEN_QUIET_S = 1.0
"""A cluster link with waiters that heard nothing this long is sent a PING."""
ANSWER_WITHIN_S = 1.0
"""A PING unanswered this long marks the link silent: its node may be paused or cut off."""


class Pulse:
    """Whether a pub/sub link still answers, from when it last said anything.

    A node that crashes breaks its connections, and the reader learns of it. One that is
    paused or cut off keeps them open and silent, while the cluster may fail its slots over:
    the waiters would hear of no release until their wait ends. A waiter that wakes up
    to look asks :meth:`due` what to do.
    """

    def __init__(self, now: float) -> None:
        self._heard = now
        self._pinged: float | None = None

    def heard(self, now: float) -> None:
        self._heard = now
        self._pinged = None

    def due(self, now: float) -> str:
        """``"ping"`` (and it counts as sent), ``"silent"``, or ``""`` for nothing to do."""
        if self._pinged is None:
            if now - self._heard < PING_WHEN_QUIET_S:
                return ""
            self._pinged = now
            return "ping"
        return "silent" if now - self._pinged >= ANSWER_WITHIN_S else ""


def shorter(timeout: float | None, within: float | None) -> float | None:
    """The shorter of two timeouts, ``None`` being none."""
    if timeout is None or within is None:
        return within if timeout is None else timeout
    return min(timeout, within)
