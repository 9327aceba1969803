"""The one renewal worker of an asyncio client: a task that renews every held lease."""

from __future__ import annotations

import threading
from collections.abc import Awaitable

from redlease.aio._flavor import Bounded, Wakeup, Worker, finish_aside, fire_aside
from redlease.core.lease import Lease, LostCallback
from redlease.core.renewal import RenewalHost


class AsyncRenewer:
    """Started with the first lease; sleeps until the schedule says something is due.

    A renewal round never runs past the soonest local deadline of the leases it watches,
    so a lease whose renewal cannot be confirmed is reported lost on time.
    """

    def __init__(self, locks: RenewalHost[Awaitable[list[bool | None]]]) -> None:
        self._locks = locks
        self._wakeup = Wakeup()
        self._worker: Worker | None = None
        self._starting = threading.Lock()
        self._rounds = Bounded()
        self._stops = 0
        """How many times the worker was stopped (the client closed): a worker started before
        ends (a sync one left waiting on a silent server ends when its round does), and none
        starts again."""
        self._aside: list[threading.Thread] = []
        """Lost-lease callbacks still running beside the worker (sync only)."""
        self.round_trips = 0

    def wake(self) -> None:
        with self._starting:  # threads taking a client's first leases at once start one worker
            if not self._stops and (self._worker is None or not self._worker.alive()):
                stops = self._stops
                self._worker = Worker(lambda: self._run(stops), "redlease-renewer")
        self._wakeup.set()

    def running(self) -> bool:
        return self._worker is not None and self._worker.alive()

    async def stop(self, within: float | None = None) -> None:
        """Stop the worker, waiting ``within`` seconds at most for a round in flight."""
        with self._starting:
            self._stops += 1
        self._wakeup.set()
        if self._worker is not None:
            await self._worker.stop(within=within)
            self._worker = None
        await finish_aside(self._aside)
        self._rounds.close()

    async def _run(self, stops: int) -> None:
        schedule, clock = self._locks._renewals, self._locks._clock
        while stops == self._stops:
            expired = schedule.expire(clock())
            for lease, callbacks in expired:
                self._fire(lease, callbacks)
            if expired:  # no renewal was confirmed before their deadline: lost by the worker
                self._locks._hooks.renewed(0, len(expired))
            wake_at = schedule.next_wakeup(clock())
            if wake_at > clock():
                await self._wakeup.wait(wake_at - clock())
                continue
            due = schedule.take_due(clock())
            if not due:
                continue
            sent_at = clock()
            answers = await self._renew(due, schedule.earliest_deadline() - sent_at)
            self.round_trips += 1
            lost = schedule.settle(due, answers, sent_at, clock())
            for lease, callbacks in lost:
                self._fire(lease, callbacks)
            self._locks._hooks.renewed(sum(1 for answer in answers if answer), len(lost))

    def _fire(self, lease: Lease, callbacks: list[LostCallback]) -> None:
        aside = fire_aside(lease, callbacks)
        if aside is not None:
            self._aside = [thread for thread in self._aside if thread.is_alive()] + [aside]

    async def _renew(self, due: list[Lease], timeout: float) -> list[bool | None]:
        """One round's answers; no answer at all when it could not end within ``timeout``."""
        try:
            return await self._rounds.run(lambda: self._locks._renew_batch(due), timeout)
        except TimeoutError:
            return [None] * len(due)
