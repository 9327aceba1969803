"""The one renewal worker of an asyncio client: a task that renews every held lease."""

from __future__ import annotations

from typing import TYPE_CHECKING

from redlease.aio._flavor import Wakeup, Worker, fire

if TYPE_CHECKING:
    from redlease.aio.lock import AsyncLocks
    from redlease.aio.redlock import AsyncRedlock


class AsyncRenewer:
    """Started with the first renewing lease; sleeps until the schedule says something is due."""

    def __init__(self, locks: AsyncLocks | AsyncRedlock) -> None:
        self._locks = locks
        self._wakeup = Wakeup()
        self._worker: Worker | None = None
        self._stopping = False
        self.round_trips = 0

    def wake(self) -> None:
        if self._worker is None or not self._worker.alive():
            self._worker = Worker(self._run, "redlease-renewer")
        self._wakeup.set()

    def running(self) -> bool:
        return self._worker is not None and self._worker.alive()

    async def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
        if self._worker is not None:
            await self._worker.stop()
            self._worker = None
        self._stopping = False

    async def _run(self) -> None:
        schedule, clock = self._locks.renewals, self._locks.clock
        while not self._stopping:
            wake_at = schedule.next_wakeup(clock())
            if wake_at > clock():
                await self._wakeup.wait(wake_at - clock())
                continue
            due = schedule.take_due(clock())
            sent_at = clock()
            answers = await self._locks.renew_batch(due)
            self.round_trips += 1
            lost = schedule.settle(due, answers, sent_at, clock())
            for lease, callbacks in lost:
                fire(lease, callbacks)
            self._locks.hooks.renewed(sum(1 for answer in answers if answer), len(lost))
