"""Faults on the holder's process: stopped (SIGSTOP) or killed (``kill -9``).

Neither measures how soon the holder is told of its loss: a stopped or dead process
cannot be told anything.
"""

from __future__ import annotations

import os
import signal
from contextlib import suppress

from redlease.chaos.fault import Fault, Scene


class Kill(Fault):
    name = "kill"
    summary = "kill -9 the holder inside its critical section; a fresh worker replaces it"
    lesson = (
        "A crashed holder costs one TTL of unavailability and nothing else: its lease expires, "
        "the next worker takes over, and a section cut short wrote nothing."
    )

    def inject(self, run: Scene, holder: str) -> None:
        run.kill_worker(holder)
        run.spawn()


class Pause(Fault):
    name = "sigstop"
    summary = "SIGSTOP the holder between its read and its write for 2 x TTL, then SIGCONT"
    lesson = (
        "A paused holder wakes up believing it still holds the lock and writes: mutual "
        "exclusion by lease alone is broken by any pause longer than the TTL. Only the fencing "
        "token, checked by the resource, turns its late write into a refusal."
    )
    expect_unfenced_violations = True

    def __init__(self) -> None:
        super().__init__()
        self.paused: int | None = None

    def duration(self, run: Scene) -> float:
        return 2 * run.settings.ttl + run.settings.hold

    def inject(self, run: Scene, holder: str) -> None:
        self.paused = run.pid_of(holder)
        os.kill(self.paused, signal.SIGSTOP)

    def heal(self, run: Scene) -> None:
        if self.paused is not None:
            with suppress(ProcessLookupError):
                os.kill(self.paused, signal.SIGCONT)
            self.paused = None
