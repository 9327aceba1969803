# Generated from redlease/aio/renewer.py by tools/unasync.py; edit that file instead.
"""The one renewal worker of an sync client: a thread that renews every held lease."""

from __future__ import annotations

from typing import TYPE_CHECKING

from redlease.sync._flavor import Wakeup, Worker, fire

if TYPE_CHECKING:
    from redlease.sync.lock import Locks
    from redlease.sync.redlock import Redlock


class Renewer:
    """Started with the first renewing lease; sleeps until the schedule says something is due."""

    def __init__(self, locks: Locks | Redlock) -> None:
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

    def stop(self) -> None:
        self._stopping = True
        self._wakeup.set()
        if self._worker is not None:
            self._worker.stop()
            self._worker = None
        self._stopping = False

    def _run(self) -> None:
        schedule, clock = self._locks.renewals, self._locks.clock
        while not self._stopping:
            wake_at = schedule.next_wakeup(clock())
            if wake_at > clock():
                self._wakeup.wait(wake_at - clock())
                continue
            due = schedule.take_due(clock())
            sent_at = clock()
            answers = self._locks.renew_batch(due)
            self.round_trips += 1
            lost = schedule.settle(due, answers, sent_at, clock())
            for lease, callbacks in lost:
                fire(lease, callbacks)
            self._locks.hooks.renewed(sum(1 for answer in answers if answer), len(lost))
