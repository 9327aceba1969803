"""Faults on the lock server: a lease expired early, a stall, a pause, a restart.

Each needs a server the harness started itself, except ``pexpire`` (one command any
client may send). They record, for the detection measurement, when the server forgot the
holder's lease (``forgot_at``) and when it could answer anyone again (``serving_again_at``).
"""

from __future__ import annotations

import threading
import time
from contextlib import suppress
from typing import Any

import redis

from redlease.chaos.fault import Detects, Fault, Scene, lock_server, window
from redlease.chaos.settings import Settings
from redlease.server import EmbeddedServer


class Expire(Fault):
    name = "pexpire"
    summary = "PEXPIRE the held lease to 1 ms behind the holder's back (a server clock jump)"
    lesson = (
        "A lease that ends early on the server (a clock jump, an operator, eviction) lets a "
        "second holder in while the first is still at work. Fencing refuses the first holder's "
        "write."
    )
    expect_unfenced_violations = True
    detects = Detects.FORGOTTEN

    def adjust(self, settings: Settings) -> Settings:
        return window(settings)

    def inject(self, run: Scene, holder: str) -> None:
        """Expire the held lock and, in the same round trip, the holder's probe leases."""
        with run.lock_client() as client:
            pipe = client.pipeline(transaction=False)
            for key in (run.lease_key, *run.probe_keys(holder).values()):
                pipe.pexpire(key, 1)
            self.forgot_at = time.monotonic()
            pipe.execute()


class _ServerCommand(Fault):
    """Run one blocking command on the lock server from a thread, for 2 x TTL."""

    needs_server = True
    detects = Detects.DEADLINE

    def __init__(self) -> None:
        super().__init__()
        self.thread: threading.Thread | None = None

    def command(self, seconds: float) -> tuple[str, ...]:
        raise NotImplementedError

    def duration(self, run: Scene) -> float:
        return 2 * run.settings.ttl

    def inject(self, run: Scene, holder: str) -> None:
        seconds = self.duration(run)
        command = self.command(seconds)

        def send() -> None:
            with run.lock_client(timeout=seconds + 5) as client, suppress(redis.RedisError):
                untyped: Any = client  # redis-py leaves execute_command untyped
                self.serving_again_at = time.monotonic() + seconds
                untyped.execute_command(*command)

        self.thread = threading.Thread(target=send, name=f"chaos-{self.name}", daemon=True)
        self.thread.start()

    def heal(self, run: Scene) -> None:
        if self.thread is not None:
            self.thread.join(self.duration(run) + 10)
            self.thread = None


class Stall(_ServerCommand):
    name = "stall"
    summary = "DEBUG SLEEP the lock server for 2 x TTL (every lock command hangs, then resumes)"
    lesson = (
        "A server that stops answering for a while (a long command, a fork, swap) delays "
        "everyone, holder included; nobody can be let in before it answers again, and the "
        "holder's renewal, queued behind the stall, finds its lease expired."
    )

    def command(self, seconds: float) -> tuple[str, ...]:
        return ("DEBUG", "SLEEP", f"{seconds:.3f}")


class ClientPause(_ServerCommand):
    name = "client-pause"
    summary = "CLIENT PAUSE ALL on the lock server for 2 x TTL (commands queue, expiry stops)"
    lesson = (
        "CLIENT PAUSE queues every command and stops expiry; when it ends, the queued commands "
        "run in order. No one is let in early."
    )

    def command(self, seconds: float) -> tuple[str, ...]:
        # CLIENT PAUSE returns at once; the thread's join in heal() is then immediate.
        return ("CLIENT", "PAUSE", str(int(seconds * 1000)), "ALL")


class Restart(Fault):
    name = "restart"
    summary = "kill -9 the lock server and restart it at once with no persistence (empty)"
    lesson = (
        "A lock server that restarts empty forgets the lock and its fencing counter: a second "
        "holder is let in at once, and its tokens start again from 1. The guard refuses those "
        "low tokens until the counter passes the highest one it has seen (the refused writes "
        "are the price); re-seed or persist the counter when you restore a server."
    )
    needs_server = True
    expect_unfenced_violations = True
    detects = Detects.FORGOTTEN

    def adjust(self, settings: Settings) -> Settings:
        return window(settings)

    def inject(self, run: Scene, holder: str) -> None:
        server = lock_server(self, run.target)
        self.forgot_at = time.monotonic()
        server.kill()
        server.start()
        self.serving_again_at = time.monotonic()


class DelayedRestart(Fault):
    name = "restart-delayed"
    summary = "kill -9 the lock server, keep it down for 2 x TTL, then restart it empty"
    lesson = (
        "Keeping a crashed server down for longer than the TTL (Redlock's 'delayed restart' "
        "rule) means every lease it granted has expired before it answers again: no overlap, at "
        "the cost of downtime. The counter still restarts from 1, so the guard refuses writes "
        "until the counter passes the highest token it saw."
    )
    needs_server = True
    detects = Detects.DEADLINE

    def __init__(self) -> None:
        super().__init__()
        self.server: EmbeddedServer | None = None

    def duration(self, run: Scene) -> float:
        return 2 * run.settings.ttl

    def inject(self, run: Scene, holder: str) -> None:
        self.server = lock_server(self, run.target)
        self.forgot_at = time.monotonic()
        self.server.kill()

    def heal(self, run: Scene) -> None:
        if self.server is not None:
            self.server.start()
            self.serving_again_at = time.monotonic()
            self.server = None
