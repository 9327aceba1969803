"""The wake harness: scripted waiters, a fault while they wait, and how soon they wake.

One :class:`WakeRun` per wake scenario (:mod:`redlease.chaos.wake_scenarios`): two
waiter processes (:mod:`redlease.chaos.waiter`), one per flavour, on the README's default
client, and a holder of its own in this process. Per injection the scenario plays its
script with the measured waiter and the other one (the measured flavour alternates) and
returns when the lock became free for the waiter and when the waiter got it. The bound
is one round trip (a ``PING`` from here, measured right before the injection) plus
:data:`~redlease.chaos.settings.WAKE_SLACK_S`. Every wait is bounded.
"""

from __future__ import annotations

import logging
import os
import secrets
import signal
import statistics
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

import redis

from redlease.chaos.detection import ExpiryWatch
from redlease.chaos.errors import ChaosError, WaiterFailed, remove_earlier
from redlease.chaos.fault import target_of
from redlease.chaos.harness import FORGET_WITHIN_S, forget_when_back
from redlease.chaos.probes import FLAVOURS
from redlease.chaos.settings import WAKE_SLACK_S, Settings
from redlease.chaos.tail import LogTail
from redlease.chaos.targets import SingleTarget, Target
from redlease.chaos.wake_scenarios import WakeSample, WakeScenario
from redlease.core.lease import Lease
from redlease.errors import LockError
from redlease.keys import LockKeys
from redlease.processes import die_with_parent
from redlease.sync.lock import Lock, Locks

LOCK_NAME = "wake"
POLL = 0.002
READY_TIMEOUT = 30.0  # python start-up of both waiters on a loaded 2-core machine
STEP_TIMEOUT = 5.0  # a grant of a free lock, a release, getting into the queue
WATCH_TIMEOUT = 10.0
ROUND_TRIPS = 5
MAX_COUNT = 8  # more reentrant holds than any script takes
OWN_TIMEOUT_SLACK = 0.1  # a grant this close to the waiter's timeout came from its last try
BOUND = "<= one round trip + 50 ms after the lock was free for the waiter"
LOGGER = logging.getLogger("redlease")


class WakeRun:
    """One wake scenario: its waiter processes, its holder, its namespace."""

    def __init__(
        self, scenario: WakeScenario, target: Target, settings: Settings, directory: Path
    ) -> None:
        self.scenario = scenario
        self.target = target
        self.settings = scenario.adjust(settings)
        self.directory = directory
        self.prefix = f"redlease-chaos-{scenario.name}-{secrets.token_hex(4)}"
        self.keys = LockKeys(LOCK_NAME, self.prefix)
        self.processes: dict[str, subprocess.Popen[str]] = {}
        self.tails: dict[str, LogTail] = {}
        self.pending: dict[str, float] = {}
        self.client = redis.Redis.from_url(target_of(scenario, target, SingleTarget).lock_url)
        self.admin = target.admin(WATCH_TIMEOUT)
        self.locks = Locks(self.client, prefix=self.prefix)
        self.handles: dict[str, Lock] = {}
        self.outwaited = False
        """Whether the last waiter to get the lock got it only when its own timeout ran out."""
        self.failure: str | None = None
        """How the last waiter's acquisition ended if it did not get the lock."""

    # What a scenario plays with (WakeScene).

    def take(self, worker: str, ttl: float | None, renew: bool = False) -> None:
        sent = self._acquire(worker, ttl, renew)
        event = self._next(worker, ("acq", "timeout", "error"), sent, STEP_TIMEOUT)
        if event["ev"] != "acq":
            raise WaiterFailed(f"{worker} could not take the free lock: {_said(event)}")

    def join_queue(self, worker: str, ttl: float | None) -> None:
        sent = self._acquire(worker, ttl, False)
        limit = time.monotonic() + STEP_TIMEOUT
        while not self.queued(worker):
            event = self._seen(worker, ("acq", "timeout", "error"), sent)
            if event is not None:
                raise WaiterFailed(f"{worker} did not queue up: {_said(event)}")
            if time.monotonic() > limit:
                raise ChaosError(f"scenario {self.scenario.name}: {worker} did not queue up")
            time.sleep(POLL)
        self.pending[worker] = sent

    def queued(self, worker: str) -> bool:
        marker = f"|{self.pid_of(worker)}|".encode()
        return any(marker in entry for entry in self.admin.lrange(self.keys.queue, 0, -1))

    def granted(self, worker: str) -> float | None:
        since = self.pending.pop(worker)
        wait = self.settings.wait_timeout
        event = self._next(worker, ("acq", "timeout", "error"), since, wait + STEP_TIMEOUT)
        got = event["ev"] == "acq"
        self.outwaited = got and event["t"] - since >= wait - OWN_TIMEOUT_SLACK
        self.failure = None if got else _said(event)
        return float(event["t"]) if event["ev"] == "acq" else None

    def release(self, worker: str) -> None:
        sent = self._send(worker, "release")
        self._next(worker, ("rel", "error"), sent, self.settings.wait_timeout + STEP_TIMEOUT)

    def pid_of(self, worker: str) -> int:
        return self.processes[worker].pid

    def hold(self, owner: str) -> Lease:
        try:
            return self._handle(owner).acquire(timeout=STEP_TIMEOUT)
        except (LockError, redis.RedisError) as error:
            raise ChaosError(f"{self.scenario.name}: the harness could not hold") from error

    def try_hold(self, owner: str) -> Lease | None:
        try:
            return self._handle(owner).try_acquire()
        except (LockError, redis.RedisError):
            return None

    def let_go(self, owner: str) -> float:
        sent = time.monotonic()
        try:
            self._handle(owner).release()
        except (LockError, redis.RedisError) as error:
            raise ChaosError(f"{self.scenario.name}: the harness's release failed") from error
        return sent

    def watch_lease(self) -> ExpiryWatch:
        return ExpiryWatch(lambda: self.target.admin(WATCH_TIMEOUT), {"lease": self.keys.lease})

    # The run.

    def execute(self) -> dict[str, Any]:
        started = time.monotonic()
        records: list[dict[str, Any]] = []
        LOGGER.addFilter(_own_losses)
        try:
            waiters = [self._spawn(flavour) for flavour in FLAVOURS]
            for waiter in waiters:
                self._next(waiter, ("ready",), 0.0, READY_TIMEOUT)
            for number in range(self.settings.injections):
                waiter, other = waiters[number % 2], waiters[1 - number % 2]
                rtt = self._round_trip()
                self.outwaited, self.failure = False, None
                try:
                    sample = self.scenario.play(self, waiter, other)
                except WaiterFailed as failure:
                    sample = WakeSample(None, None, "nothing: the waiter failed first")
                    self.failure = str(failure)
                    self._reset(waiters)
                records.append(_record(waiter, rtt, sample, self.outwaited, self.failure))
        finally:
            self._stop()
            LOGGER.removeFilter(_own_losses)
        return {
            "injections": len(records),
            "seconds": round(time.monotonic() - started, 2),
            "expect_unfenced_violations": False,
            "topology": self.target.kind,
            "settings": {"hold": self.settings.hold, "renew": self.settings.renew},
            "detection": None,
            "wake": summarize(records, self.settings.wait_timeout),
        }

    def _reset(self, waiters: list[str]) -> None:
        """After a failed injection: every lease the harness or a waiter holds goes back."""
        for handle in self.handles.values():
            for _ in range(MAX_COUNT):
                if handle.lease is None:
                    break
                with suppress(LockError, redis.RedisError):
                    handle.release()
        for waiter in waiters:
            self.pending.pop(waiter, None)
            self.release(waiter)

    def _spawn(self, flavour: str) -> str:
        log = self.directory / f"{self.scenario.name}-{flavour}.jsonl"
        remove_earlier(log)
        command = [
            sys.executable, "-m", "redlease.chaos.waiter",
            *self.target.lock_args(flavour),
            "--prefix", self.prefix, "--name", LOCK_NAME,
            "--flavour", flavour, "--worker", flavour, "--log", str(log),
        ]  # fmt: skip
        errors_path = self.directory / f"{self.scenario.name}-{flavour}.err"
        remove_earlier(errors_path)
        with errors_path.open("wb") as errors:
            self.processes[flavour] = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=errors,
                stderr=subprocess.STDOUT,
                text=True,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - sets the death signal only
            )
        self.tails[flavour] = LogTail(log)
        return flavour

    def _send(self, worker: str, line: str) -> float:
        stdin = self.processes[worker].stdin
        assert stdin is not None
        sent = time.monotonic()
        stdin.write(line + "\n")
        stdin.flush()
        return sent

    def _acquire(self, worker: str, ttl: float | None, renew: bool) -> float:
        wait = self.settings.wait_timeout
        ttl_word = "default" if ttl is None else f"{ttl:g}"
        return self._send(worker, f"acquire {ttl_word} {int(renew)} {wait:g}")

    def _seen(self, worker: str, kinds: tuple[str, ...], since: float) -> dict[str, Any] | None:
        tail = self.tails[worker]
        tail.poll()
        return next((e for e in tail.events if e["ev"] in kinds and e["t"] >= since), None)

    def _next(
        self, worker: str, kinds: tuple[str, ...], since: float, timeout: float
    ) -> dict[str, Any]:
        limit = time.monotonic() + timeout
        while (event := self._seen(worker, kinds, since)) is None:
            if time.monotonic() > limit or self.processes[worker].poll() is not None:
                raise ChaosError(
                    f"scenario {self.scenario.name}: {worker} logged none of {', '.join(kinds)} "
                    f"within {timeout:g} s; its output is in {self.directory}"
                )
            time.sleep(POLL)
        return event

    def _handle(self, owner: str) -> Lock:
        if owner not in self.handles:
            self.handles[owner] = self.locks.lock(LOCK_NAME, owner=owner)
        return self.handles[owner]

    def _round_trip(self) -> float:
        """The median of a few PINGs from here, in seconds."""
        samples = []
        for _ in range(ROUND_TRIPS):
            sent = time.monotonic()
            self.client.ping()
            samples.append(time.monotonic() - sent)
        return statistics.median(samples)

    def _stop(self) -> None:
        """End the waiters, then delete the run's keys: also when a signal cuts the wait for
        the waiters short (they are killed first, so none writes a key after)."""
        try:
            self._end_waiters()
        except BaseException:
            for process in self.processes.values():
                with suppress(OSError):
                    process.kill()
            raise
        finally:
            self.locks.close()
            self.client.close()
            self.admin.close()
            if not self.target.private:
                forget_when_back(
                    lambda: self.target.admin(WATCH_TIMEOUT),
                    self.prefix,
                    time.monotonic() + FORGET_WITHIN_S,
                )

    def _end_waiters(self) -> None:
        for process in self.processes.values():
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            if process.stdin is not None:
                with suppress(OSError):
                    process.stdin.close()
        for process in self.processes.values():
            try:
                process.wait(self.settings.wait_timeout + STEP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5.0)


def _said(event: dict[str, Any]) -> str:
    return str(event.get("error") or event["ev"])


def _own_losses(record: logging.LogRecord) -> bool:
    """Leave out the losses the harness's own holder suffers on purpose (a restart)."""
    args = record.args if isinstance(record.args, tuple) else ()
    return not (str(record.msg).startswith("lease on lock") and LOCK_NAME in args)


def _record(
    flavour: str, rtt: float, sample: WakeSample, outwaited: bool, failure: str | None
) -> dict[str, Any]:
    bound = (rtt + WAKE_SLACK_S) * 1000
    ms = None
    if sample.granted_at is not None and sample.freed_at is not None:
        ms = round((sample.granted_at - sample.freed_at) * 1000, 1)
    return {
        "flavour": flavour,
        "freed_by": sample.freed_by,
        "ms": ms,
        "woken": sample.granted_at is not None,
        "at_own_timeout": outwaited,
        "failure": failure,
        "rtt_ms": round(rtt * 1000, 2),
        "bound_ms": round(bound, 1),
        "met": ms is not None and ms <= bound,
    }


def summarize(records: list[dict[str, Any]], timeout: float) -> dict[str, Any]:
    """The scenario's wake latency: worst per flavour, the bound, whether it held.

    ``not_woken`` counts waiters that never got the lock; ``at_own_timeout`` those that got
    it only from the last try their own timeout made (so their figure is that timeout, and
    without it they would have slept longer): both are missed wake-ups.
    """
    worst: dict[str, float] = {}
    for record in records:
        value = record["ms"]
        if value is not None:
            worst[record["flavour"]] = max(value, worst.get(record["flavour"], value))
    return {
        "bound": BOUND,
        "slack_ms": WAKE_SLACK_S * 1000,
        "wait_timeout_s": timeout,
        "worst_ms": worst,
        "not_woken": sum(1 for record in records if not record["woken"]),
        "at_own_timeout": sum(1 for record in records if record["at_own_timeout"]),
        "met": all(record["met"] for record in records),
        "each": records,
    }
