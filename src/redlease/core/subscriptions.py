"""Bookkeeping for the one pub/sub connection a client shares among all its waiters."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from redlease.compat import NoPermissionErrors
from redlease.core.protocol import Handoff

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


def handoff_of(push: Push, received_at: float) -> Handoff | None:
    """The hand-off a wake-up message carries: ``<fence>[:<server ms>]``."""
    fence, _, server_ms = push.payload.partition(":")
    try:
        return Handoff(int(fence), int(server_ms) if server_ms else None, received_at)
    except ValueError:
        return None


class ChannelBook(Generic[W]):
    """Which waiters listen on which channel; subscribe on the first, unsubscribe after the last."""

    def __init__(self) -> None:
        self._waiters: dict[str, list[W]] = {}

    def add(self, channel: str, waiter: W) -> bool:
        """Add a waiter; True when the channel must now be subscribed."""
        waiters = self._waiters.setdefault(channel, [])
        waiters.append(waiter)
        return len(waiters) == 1

    def remove(self, channel: str, waiter: W) -> bool:
        """Remove a waiter; True when the channel must now be unsubscribed."""
        waiters = self._waiters.get(channel)
        if not waiters or waiter not in waiters:
            return False
        waiters.remove(waiter)
        if waiters:
            return False
        del self._waiters[channel]
        return True

    def waiters(self, channel: str) -> list[W]:
        return list(self._waiters.get(channel, ()))

    def channels(self) -> list[str]:
        return list(self._waiters)

    def everyone(self) -> Iterator[W]:
        for waiters in list(self._waiters.values()):
            yield from waiters

    def __len__(self) -> int:
        return len(self._waiters)
