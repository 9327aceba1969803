"""Who waits for what on a client's pub/sub connection; nothing here does I/O.

Two kinds of channel. A **client channel** (one per client and cluster slot) carries every
hand-off to the client's waiters on the locks of that slot; it stays subscribed for the
client's life, so a waiter costs no SUBSCRIBE/UNSUBSCRIBE, and a message names the
waiter's token. A **broadcast channel** (a count-down latch's) wakes everyone waiting on
it, and is subscribed only while someone waits.

A hand-off can reach a client after its waiter left (the waiter gave up just as the lock
was handed to it, and its withdrawal came too late): such a *stray* hand-off names a
token the book remembers as abandoned, with the claim that the client gives back.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from redlease.core.ops import Claim
from redlease.core.protocol import Handoff

ABANDONED_KEPT = 4096
"""Tokens of waiters that left, remembered to give back a hand-off that comes too late."""


class Waiting(Protocol):
    @property
    def channel(self) -> str: ...
    @property
    def claim(self) -> Claim | None: ...


W = TypeVar("W", bound=Waiting)


@dataclass(frozen=True)
class Delivery(Generic[W]):
    """What one message means: the waiters to wake (with the hand-off, if any) and a
    stray hand-off's claim to give back."""

    woken: list[W]
    handoff: Handoff | None = None
    stray: Claim | None = None


class WaiterBook(Generic[W]):
    def __init__(self) -> None:
        self._subscribed: set[str] = set()
        self._kept: set[str] = set()
        self._by_token: dict[str, W] = {}
        self._broadcast: dict[str, list[W]] = {}
        self._abandoned: OrderedDict[str, Claim] = OrderedDict()

    def channels(self) -> list[str]:
        """Every channel subscribed now (or being subscribed)."""
        return sorted(self._subscribed)

    def is_subscribed(self, channel: str) -> bool:
        return channel in self._subscribed

    def __len__(self) -> int:
        """How many waiters wait now."""
        return len(self._by_token) + sum(map(len, self._broadcast.values()))

    def add(self, waiter: W) -> bool:
        """Register a waiter; True when its channel must now be subscribed."""
        claim = waiter.claim
        if claim is not None:
            self._by_token[claim.token] = waiter
            self._abandoned.pop(claim.token, None)
            self._kept.add(waiter.channel)
        else:
            self._broadcast.setdefault(waiter.channel, []).append(waiter)
        if waiter.channel in self._subscribed:
            return False
        self._subscribed.add(waiter.channel)
        return True

    def remove(self, waiter: W, settled: bool = False) -> bool:
        """Unregister a waiter; True when its channel must now be unsubscribed (a broadcast
        channel nobody waits on any more).

        A waiter that left without the lock is remembered, to give back a hand-off that
        reaches it too late; one that ``settled`` holds the lease, so a hand-off naming it
        later is a copy of the one it took (a failover can deliver a message twice) and
        must not be given back: that would free a lease its holder is using.
        """
        claim = waiter.claim
        if claim is not None:
            if self._by_token.get(claim.token) is waiter:
                del self._by_token[claim.token]
                if settled:
                    return False
                self._abandoned[claim.token] = claim
                while len(self._abandoned) > ABANDONED_KEPT:
                    self._abandoned.popitem(last=False)
            return False
        waiters = self._broadcast.get(waiter.channel, [])
        if waiter in waiters:
            waiters.remove(waiter)
        if waiters or waiter.channel in self._kept:
            return False
        self._broadcast.pop(waiter.channel, None)
        self._subscribed.discard(waiter.channel)
        return True

    def forget(self, channel: str) -> None:
        """The channel could not be subscribed after all."""
        self._subscribed.discard(channel)
        self._kept.discard(channel)

    def deliver(self, channel: str, payload: str, received_at: float) -> Delivery[W]:
        """Who a message on ``channel`` wakes: a hand-off's waiter, or a broadcast's."""
        if channel not in self._kept:
            return Delivery(list(self._broadcast.get(channel, ())))
        handoff, token = handoff_of(payload, received_at)
        waiter = self._by_token.get(token)
        if waiter is not None:
            return Delivery([waiter], handoff)
        if handoff is not None and token in self._abandoned:
            return Delivery([], stray=self._abandoned.pop(token))
        return Delivery([])

    def on_channels(self, channels: set[str]) -> list[W]:
        """Every waiter listening on one of ``channels`` (to wake after a reconnect)."""
        found = [waiter for waiter in self._by_token.values() if waiter.channel in channels]
        for channel in channels:
            found += self._broadcast.get(channel, [])
        return found


def handoff_of(payload: str, received_at: float) -> tuple[Handoff | None, str]:
    """A client channel's message, ``<fence>:<server ms>:<token>``: the hand-off and the
    waiter's token. An empty fence (``:<ms>:<token>``) wakes the waiter without a grant, to
    try again (a release that could not hand over)."""
    fence, _, rest = payload.partition(":")
    server_ms, _, token = rest.partition(":")
    try:
        return Handoff(int(fence), int(server_ms) if server_ms else None, received_at), token
    except ValueError:
        return None, token
