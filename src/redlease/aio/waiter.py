"""One wait for a hand-off, on the notifier's connection that carries its channel."""

from __future__ import annotations

from typing import Protocol

from redlease.aio._flavor import Wakeup
from redlease.core.ops import Claim
from redlease.core.protocol import Clock, Handoff
from redlease.core.subscriptions import refusal
from redlease.errors import InvalidArgument, ServerRefused


def closed_while_waiting() -> InvalidArgument:
    return InvalidArgument("the client was closed while this acquire waited: it takes no new lease")


class _Notifying(Protocol):
    """What a waiter asks of its notifier (:class:`redlease.aio.notify.AsyncNotifier`)."""

    clock: Clock

    def looks_every(self, channel: str) -> float: ...

    async def read_for(self, waiter: AsyncWaiter, seconds: float) -> float: ...

    async def look_at_link(self, channel: str) -> None: ...

    async def leave(self, waiter: AsyncWaiter, settled: bool = False) -> None: ...


class AsyncWaiter:
    """One wait: for the hand-off to ``claim``'s token on the client's channel, or (no claim)
    for any message on a broadcast channel."""

    def __init__(self, notifier: _Notifying, channel: str, claim: Claim | None) -> None:
        self.notifier = notifier
        self.channel = channel
        self.claim = claim
        self.wakeup = Wakeup()
        self.handoff: Handoff | None = None
        self.failure: Exception | None = None
        """Why no hand-off can come any more: its channel, subscribed again after a drop,
        was refused, or its client closed."""

    def refuse(self, error: Exception) -> None:
        """Wake this waiter to say its channel was refused (a permission revoked)."""
        failure = ServerRefused(refusal(self.channel, error))
        failure.__cause__ = error
        self.end(failure)

    def end(self, failure: Exception | None = None) -> None:
        """Wake this waiter to raise ``failure`` from its wait; by default, its client
        closed (a closed client takes no new lease)."""
        self.failure = failure or closed_while_waiting()
        self.wakeup.set()

    async def wait(self, seconds: float) -> Handoff | None:
        """Sleep until a hand-off arrives or ``seconds`` pass; the hand-off, if any. On a
        cluster the waiter looks at its connection's pulse every second meanwhile. A
        refused channel raises :class:`~redlease.errors.ServerRefused`, a closed client
        :class:`~redlease.errors.InvalidArgument`: no hand-off can come."""
        clock = self.notifier.clock
        ends = clock() + seconds
        while True:
            step = min(ends - clock(), self.notifier.looks_every(self.channel))
            left = await self.notifier.read_for(self, step)
            woken = await self.wakeup.wait(left) if left > 0 else self.wakeup.is_set()
            self.wakeup.clear()
            if self.failure is not None:
                raise self.failure
            if woken or clock() >= ends:
                return self.handoff
            await self.notifier.look_at_link(self.channel)

    async def close(self, settled: bool = False) -> None:
        """Stop waiting; ``settled``: the wait ended with the lock, so no hand-off can
        still come for it."""
        await self.notifier.leave(self, settled)
