"""Bookkeeping for the one pub/sub connection a client shares among all its waiters."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

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


MESSAGE_KINDS = frozenset({b"message", b"smessage"})
CONFIRM_KINDS = frozenset({b"subscribe", b"ssubscribe"})


def classify(reply: object) -> tuple[str, str] | None:
    """``("message"|"confirm", channel)`` for a pub/sub push, ``None`` for anything else."""
    if not isinstance(reply, list) or len(reply) < 3:
        return None
    kind, channel = reply[0], reply[1]
    if isinstance(kind, str):
        kind = kind.encode()
    if isinstance(channel, bytes):
        channel = channel.decode()
    if kind in MESSAGE_KINDS:
        return "message", str(channel)
    if kind in CONFIRM_KINDS:
        return "confirm", str(channel)
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
