"""Wake scenarios: a waiter blocked across a fault, and how soon it gets the lock after.

Each injection is a short script the wake harness (:mod:`redlease.chaos.wake`) plays
with two scripted waiter processes, one per flavour (``waiter`` is measured, ``other``
plays a part), and with a holder of its own in the harness process where the script
needs one (the README's default lease: 30 s, renewed). The script returns when the lock
became free for the waiter (``freed_at``: a release, or the lease deadline of a holder
that stopped) and when the waiter got it; the harness holds the difference to one
measured round trip + 50 ms. The flavour of the measured waiter alternates per injection.

The harness's holder makes the waiter's cap long: a waiter that misses its wake-up sleeps
until the holder's remaining lease runs out (or its own timeout), so a missed wake-up
shows as seconds, not as a few milliseconds.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import AbstractContextManager, suppress
from dataclasses import dataclass
from typing import Protocol

from redlease.chaos.detection import ExpiryWatch
from redlease.chaos.errors import ChaosError
from redlease.chaos.fault import Scenario, lock_server, single
from redlease.chaos.proxy import Mode
from redlease.chaos.settings import Settings
from redlease.chaos.targets import Target
from redlease.core.lease import Lease

REQUEUE_GRACE = 2.0
"""After a restart, how long the harness waits for the waiter to queue up again."""


@dataclass(frozen=True)
class WakeSample:
    """One injection: when the lock was free for the waiter, and when the waiter got it."""

    freed_at: float | None
    granted_at: float | None
    freed_by: str


class WakeScene(Protocol):
    """What a wake scenario may use of the run it plays in."""

    @property
    def settings(self) -> Settings: ...

    @property
    def target(self) -> Target: ...

    def take(self, worker: str, ttl: float | None, renew: bool = False) -> None:
        """Have ``worker`` acquire the free lock; returns once it holds it."""
        ...

    def join_queue(self, worker: str, ttl: float | None) -> None:
        """Have ``worker`` acquire the held lock; returns once it is in the waiter queue."""
        ...

    def queued(self, worker: str) -> bool: ...

    def granted(self, worker: str) -> float | None:
        """When ``worker``'s pending acquisition succeeded (None: it timed out or failed)."""
        ...

    def release(self, worker: str) -> None:
        """Have ``worker`` release (or give up) and wait until it says it did."""
        ...

    def pid_of(self, worker: str) -> int: ...

    def hold(self, owner: str) -> Lease:
        """Take the lock in the harness, with the README's default lease, for ``owner``."""
        ...

    def try_hold(self, owner: str) -> Lease | None: ...

    def let_go(self, owner: str) -> float:
        """Release the harness's lease of ``owner``; returns when the release was sent."""
        ...

    def watch_lease(self) -> AbstractContextManager[ExpiryWatch]: ...


class WakeScenario(Scenario):
    """A scenario of the wake harness; ``play`` runs one injection."""

    def play(self, run: WakeScene, waiter: str, other: str) -> WakeSample:
        raise NotImplementedError


def _past_stopped(
    run: WakeScene, waiter: str, other: str, freed_by: str, let_go: str | None = None
) -> WakeSample:
    """SIGSTOP ``other`` (the holder, or the first waiter), let the harness's holder
    ``let_go`` if there is one (the lock then goes to the stopped waiter), and wait for
    ``waiter``: the lock is free for it once the stopped process's lease runs out."""
    pid = run.pid_of(other)
    os.kill(pid, signal.SIGSTOP)
    try:
        if let_go is not None:
            run.let_go(let_go)
        with run.watch_lease() as watch:
            granted = run.granted(waiter)
    finally:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    run.release(waiter)
    run.release(other)
    lease = watch.keys["lease"]
    if lease.owner is None or f"|{pid}|".encode() not in lease.owner:
        raise ChaosError(f"the lock was not held by the stopped process {pid}: {lease.owner!r}")
    return WakeSample(lease.expiry, granted, freed_by)


class StoppedHolder(WakeScenario):
    name = "stopped-holder"
    summary = "SIGSTOP a holder (TTL, renewed) while a waiter is queued behind it"
    lesson = (
        "A waiter sends nothing between its tries, yet a holder that stops (a pause, a hung "
        "process) costs it no more than that holder's TTL: every wait is capped by the "
        "holder's remaining lease, and the waiter tries again when it runs out."
    )

    def play(self, run: WakeScene, waiter: str, other: str) -> WakeSample:
        run.take(other, run.settings.ttl, renew=True)
        run.join_queue(waiter, run.settings.ttl)
        return _past_stopped(run, waiter, other, "the stopped holder's deadline")


class StoppedWaiter(WakeScenario):
    name = "stopped-waiter"
    summary = (
        "SIGSTOP the first of two queued waiters (TTL each), then release a default lease: "
        "the lock goes to the stopped one"
    )
    lesson = (
        "A waiter handed the lock while it is stopped holds it, like any stopped holder, for "
        "its own TTL only; the next waiter must not wait for the lease of the holder before it "
        "(30 s by default)."
    )

    def play(self, run: WakeScene, waiter: str, other: str) -> WakeSample:
        run.hold("first")
        run.join_queue(other, run.settings.ttl)
        run.join_queue(waiter, run.settings.ttl)
        return _past_stopped(run, waiter, other, "the stopped waiter's deadline", "first")


class RestartWaiting(WakeScenario):
    name = "restart-waiting"
    summary = (
        "kill -9 and restart the lock server (empty) under a waiter; a newcomer takes the "
        "lock, then releases it"
    )
    lesson = (
        "A restart forgets the waiter queue. A waiter that tries again after it must queue up "
        "again, or the newcomer's release hands the lock to nobody and the waiter sleeps "
        "until the newcomer's lease would have run out."
    )
    needs_server = True

    def play(self, run: WakeScene, waiter: str, other: str) -> WakeSample:
        run.hold("before")
        run.join_queue(waiter, None)
        server = lock_server(self, run.target)
        server.kill()
        server.start()
        restarted = time.monotonic()
        newcomer = run.try_hold("newcomer")
        freed_at, freed_by = restarted, "the restart (the waiter took the free lock)"
        if newcomer is not None:
            limit = time.monotonic() + REQUEUE_GRACE
            while not run.queued(waiter) and time.monotonic() < limit:
                time.sleep(0.005)
            freed_at, freed_by = run.let_go("newcomer"), "the newcomer's release"
        granted = run.granted(waiter)
        run.let_go("before")
        run.release(waiter)
        return WakeSample(freed_at, granted, freed_by)


class DropWaiting(WakeScenario):
    name = "drop-waiting"
    summary = "drop the hand-off message to a queued waiter and reset its pub/sub connection"
    lesson = (
        "A reconnect during a release loses the hand-off message; the lock is already the "
        "waiter's, and it must find out when it reconnects, not when the releaser's lease "
        "would have ended."
    )
    proxied = True

    def play(self, run: WakeScene, waiter: str, other: str) -> WakeSample:
        links = single(self, run.target).links[waiter]
        run.hold("first")
        run.join_queue(waiter, None)
        for link in links:
            link.set(mode=Mode.DROP_MESSAGE)
        try:
            released = run.let_go("first")
            granted = run.granted(waiter)
        finally:
            for link in links:
                link.set()
        run.release(waiter)
        return WakeSample(released, granted, "the release")


WAKE_SCENARIOS: tuple[type[WakeScenario], ...] = (
    StoppedHolder,
    StoppedWaiter,
    RestartWaiting,
    DropWaiting,
)
