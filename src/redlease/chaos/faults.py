"""Faults: small classes with ``inject`` and ``heal``, each of bounded duration.

The harness calls ``inject`` while a worker is inside its critical section (between its
reads and its writes), waits ``duration(settings)`` seconds, then calls ``heal``. Faults
whose ``needs_server`` is true control the lock server, so they run only on the private
servers the harness starts itself.
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import suppress
from typing import TYPE_CHECKING, Any, ClassVar

import redis

if TYPE_CHECKING:
    from redlease.chaos.harness import Run


class Fault:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    needs_server: ClassVar[bool] = False
    expect_unfenced_violations: ClassVar[bool] = False

    def duration(self, run: Run) -> float:
        return 0.0

    def inject(self, run: Run, holder: str) -> None:
        raise NotImplementedError

    def heal(self, run: Run) -> None:
        """Undo the fault (nothing to undo by default)."""


class Kill(Fault):
    name = "kill"
    summary = "kill -9 the holder inside its critical section; a fresh worker replaces it"

    def inject(self, run: Run, holder: str) -> None:
        run.kill_worker(holder)
        run.spawn()


class Pause(Fault):
    name = "sigstop"
    summary = "SIGSTOP the holder between its read and its write for 2 x TTL, then SIGCONT"
    expect_unfenced_violations = True

    def __init__(self) -> None:
        self.paused: int | None = None

    def duration(self, run: Run) -> float:
        return 2 * run.settings.ttl + run.settings.hold

    def inject(self, run: Run, holder: str) -> None:
        self.paused = run.pid_of(holder)
        os.kill(self.paused, signal.SIGSTOP)

    def heal(self, run: Run) -> None:
        if self.paused is not None:
            with suppress(ProcessLookupError):
                os.kill(self.paused, signal.SIGCONT)
            self.paused = None


class Expire(Fault):
    name = "pexpire"
    summary = "PEXPIRE the held lease to 1 ms behind the holder's back (a server clock jump)"
    expect_unfenced_violations = True

    def inject(self, run: Run, holder: str) -> None:
        with run.lock_client() as client:
            client.pexpire(run.lease_key, 1)

    def duration(self, run: Run) -> float:
        return 0.0


class Stall(Fault):
    name = "stall"
    summary = "DEBUG SLEEP the lock server for 2 x TTL (every lock command hangs, then resumes)"
    needs_server = True

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None

    def duration(self, run: Run) -> float:
        return 2 * run.settings.ttl

    def inject(self, run: Run, holder: str) -> None:
        seconds = self.duration(run)

        def sleep_server() -> None:
            with run.lock_client(timeout=seconds + 5) as client, suppress(redis.RedisError):
                untyped: Any = client  # redis-py leaves execute_command untyped
                untyped.execute_command("DEBUG", "SLEEP", f"{seconds:.3f}")

        self.thread = threading.Thread(target=sleep_server, name="chaos-stall", daemon=True)
        self.thread.start()

    def heal(self, run: Run) -> None:
        if self.thread is not None:
            self.thread.join(self.duration(run) + 10)
            self.thread = None


class Restart(Fault):
    name = "restart"
    summary = "kill -9 the lock server and restart it at once with no persistence (empty)"
    needs_server = True
    expect_unfenced_violations = True

    def inject(self, run: Run, holder: str) -> None:
        server = run.target.lock_server
        assert server is not None
        server.kill()
        server.start()


FAULTS: dict[str, type[Fault]] = {
    fault.name: fault for fault in (Pause, Expire, Kill, Stall, Restart)
}
