"""The counter harness: start workers, inject faults into the holder, check the history.

One :class:`Run` per scenario: a fresh key namespace, ``settings.workers`` worker
processes (see :mod:`redlease.chaos.worker`) contending for one lock, ``injections``
faults each injected while a worker is inside its critical section, then a clean stop
and the checkers of :mod:`redlease.chaos.checks`. Where the fault can take the holder's
lease away (``Fault.detects``), every injection also measures how soon the holder's probe
leases were told (:mod:`redlease.chaos.detection`). Every wait is bounded in time.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from pathlib import Path
from typing import Any

import redis

from redlease.chaos.checks import read_logs, verdict
from redlease.chaos.detection import ExpiryWatch, measure, summarize
from redlease.chaos.errors import ChaosError, remove_earlier
from redlease.chaos.fault import Fault
from redlease.chaos.probes import FLAVOURS, probe_name
from redlease.chaos.settings import Settings
from redlease.chaos.tail import LogTail
from redlease.chaos.targets import Target
from redlease.keys import LockKeys
from redlease.processes import die_with_parent

LOCK_NAME = "counter"
POLL = 0.002
START_TIMEOUT = 30.0  # python start-up of every worker on a loaded 2-core machine
HOLDER_TIMEOUT = 5.0
FAILOVER_ALLOWANCE = 30.0  # a failover fault heals when a replica has taken over
DETECT_WAIT = 5.0  # after the settle, how long a holder whose lease went away may take to learn
WATCH_TIMEOUT = 10.0  # the watch's reads wait out a stalled server
FORGET_WITHIN_S = 30.0  # a shared server paused during the clean-up still loses the run's keys
FORGET_PAUSE_S = 0.5


class Run:
    """One scenario: its workers, its namespace, its fault."""

    def __init__(self, fault: Fault, target: Target, settings: Settings, directory: Path) -> None:
        self.fault = fault
        self.target = target
        self.settings = fault.adjust(settings)
        self.directory = directory
        self.prefix = f"redlease-chaos-{fault.name}-{secrets.token_hex(4)}"
        self.lease_key = LockKeys(LOCK_NAME, self.prefix).lease
        self.stop_file = directory / f"{fault.name}.stop"
        remove_earlier(self.stop_file)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.tails: dict[str, LogTail] = {}
        self.probed: set[str] = set()
        self.deadline = time.monotonic() + self.budget()

    def budget(self) -> float:
        s = self.settings
        per_fault = self.holder_timeout() + self.fault.duration(self) + s.settle + DETECT_WAIT
        return START_TIMEOUT + s.warmup + s.injections * (per_fault + FAILOVER_ALLOWANCE) + 10

    def holder_timeout(self) -> float:
        return HOLDER_TIMEOUT + 2 * self.settings.hold

    @contextmanager
    def lock_client(self, timeout: float = 2.0) -> Iterator[Any]:
        client = self.target.admin(timeout)
        try:
            yield client
        finally:
            client.close()

    def probe_keys(self, worker: str) -> dict[str, str]:
        if worker not in self.probed:
            return {}
        return {f: LockKeys(probe_name(worker, f), self.prefix).lease for f in FLAVOURS}

    def spawn(self) -> str:
        worker = f"w{len(self.workers) + 1}"
        log = self.directory / f"{self.fault.name}-{worker}.jsonl"
        remove_earlier(log)
        probe_url = self.target.probe_url(worker) if self.fault.detects else None
        command = [
            *self.target.wrap(worker),
            sys.executable, "-m", "redlease.chaos.worker",
            *self.target.lock_args(worker),
            "--data-url", self.target.worker_data_url(worker),
            "--prefix", self.prefix,
            "--name", LOCK_NAME,
            "--worker", worker,
            "--ttl", str(self.settings.ttl),
            "--hold", str(self.settings.hold),
            "--deadline", str(self.deadline),
            "--stop-file", str(self.stop_file),
            "--log", str(log),
            *(["--renew"] if self.settings.renew else []),
            *(["--probe-url", probe_url] if probe_url else []),
        ]  # fmt: skip
        if probe_url:
            self.probed.add(worker)
        errors_path = self.directory / f"{self.fault.name}-{worker}.err"
        remove_earlier(errors_path)
        with errors_path.open("wb") as errors:
            self.workers[worker] = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=errors,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - sets the death signal only
            )
        self.tails[worker] = LogTail(log)
        return worker

    def pid_of(self, worker: str) -> int:
        return self.workers[worker].pid

    def kill_worker(self, worker: str) -> None:
        process = self.workers[worker]
        with suppress(ProcessLookupError):
            process.kill()
        with suppress(subprocess.TimeoutExpired):
            process.wait(5.0)

    def _live(self) -> list[str]:
        return [name for name, process in self.workers.items() if process.poll() is None]

    def wait_for(self, condition: str, timeout: float, since: float = 0.0) -> str:
        """The first live worker that has acquired (``acq``) or is in its section.

        With ``since``, only a section whose lock was granted at or after that time counts.
        """
        limit = time.monotonic() + timeout
        while time.monotonic() < limit:
            for worker in self._live():
                tail = self.tails[worker]
                tail.poll()
                if (condition == "acq" and tail.acquisitions) or (
                    condition == "enter" and tail.in_section and tail.granted_at >= since
                ):
                    return worker
            time.sleep(POLL)
        raise ChaosError(
            f"scenario {self.fault.name}: no worker "
            f"{'acquired the lock' if condition == 'acq' else 'entered its section'} "
            f"within {timeout:g} s; worker output is in {self.directory}"
        )

    def execute(self) -> dict[str, Any]:
        fault_ends: list[float] = []
        detections: list[dict[str, Any]] = []
        started = time.monotonic()
        try:
            try:
                for _ in range(self.settings.workers):
                    self.spawn()
                self.wait_for("acq", START_TIMEOUT)
                time.sleep(self.settings.warmup)
                for _ in range(self.settings.injections):
                    detections += self._inject(fault_ends)
            finally:
                self.fault.heal(self)
                self._stop_workers()
            history = read_logs([tail.path for tail in self.tails.values()])
            plain, fenced = self._counters()
        finally:
            self._forget()  # even after an error or Ctrl-C: a shared server keeps nothing
        result = verdict(history, plain, fenced, fault_ends)
        result["injections"] = len(fault_ends)
        result["seconds"] = round(time.monotonic() - started, 2)
        result["expect_unfenced_violations"] = self.fault.expect_unfenced_violations
        result["topology"] = self.target.kind
        result["settings"] = {"hold": self.settings.hold, "renew": self.settings.renew}
        detects = self.fault.detects
        result["detection"] = summarize(detects, detections) if detects and self.probed else None
        result["wake"] = None
        return result

    def _inject(self, fault_ends: list[float]) -> list[dict[str, Any]]:
        """One injection; returns its detection records (none where nothing is measured)."""
        prepared = time.monotonic()
        self.fault.begin()
        self.fault.prepare(self)
        since = prepared if self.fault.fresh_holder else 0.0
        holder = self.wait_for("enter", self.holder_timeout(), since)
        keys = self.probe_keys(holder)
        watch = ExpiryWatch(lambda: self.target.admin(WATCH_TIMEOUT), keys)
        with ExitStack() as watching:
            if keys:
                watching.enter_context(watch)
            self.fault.inject(self, holder)
            time.sleep(self.fault.duration(self))
            self.fault.heal(self)
            fault_ends.append(self.fault.ended_at(time.monotonic()))
            time.sleep(self.settings.settle)
            return self._detected(holder, watch, prepared) if keys else []

    def _detected(self, holder: str, watch: ExpiryWatch, since: float) -> list[dict[str, Any]]:
        """Wait (bounded) until the holder logged each loss the watch saw, then measure."""
        fault, tail = self.fault, self.tails[holder]
        assert fault.detects is not None
        began = watch.first_read_at or since
        limit = time.monotonic() + DETECT_WAIT
        while True:
            tail.poll()
            known = {flavour: _told_before(tail, flavour, began) for flavour in watch.keys}
            lost = {flavour: tail.first("lost", since, probe=flavour) for flavour in watch.keys}
            waiting = watch.unresolved(lost, fault.forgot_at)
            if not any(not known[flavour] for flavour in waiting):
                break
            if time.monotonic() > limit:
                break
            time.sleep(POLL)
        return [
            measure(
                fault.detects,
                flavour,
                key,
                lost[flavour],
                forgot_at=fault.forgot_at,
                serving_again_at=fault.serving_again_at,
                known_lost=known[flavour],
            )
            for flavour, key in watch.keys.items()
        ]

    def _stop_workers(self) -> None:
        self.stop_file.touch()
        limit = time.monotonic() + self.settings.hold + self.settings.ttl + 5.0
        for process in self.workers.values():
            with suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)
            try:
                process.wait(max(limit - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5.0)

    def _counters(self) -> tuple[int, int]:
        client = redis.Redis.from_url(self.target.data_url, socket_timeout=5.0)
        try:
            plain = int(client.get(f"{self.prefix}:counter") or 0)
            fenced = int(client.get(f"{self.prefix}:fenced") or 0)
        except redis.RedisError as error:
            raise ChaosError(
                f"the data server did not answer the counters' read: {error}"
            ) from error
        finally:
            client.close()
        return plain, fenced

    def _forget(self) -> None:
        """On a shared server, delete the run's keys (data and lock)."""
        if self.target.private:
            return
        deadline = time.monotonic() + FORGET_WITHIN_S
        forget_when_back(
            lambda: redis.Redis.from_url(self.target.data_url, socket_timeout=5.0),
            self.prefix,
            deadline,
        )
        forget_when_back(lambda: self.target.admin(5.0), self.prefix, deadline)


def _told_before(tail: LogTail, flavour: str, moment: float) -> bool:
    """Whether a probe's last news before ``moment`` was the loss of its lease."""
    last = tail.last(("probe", "lost"), moment, probe=flavour)
    return last is not None and last["ev"] == "lost"


def forget_when_back(connect: Callable[[], Any], prefix: str, deadline: float) -> None:
    """Delete the run's keys through a client ``connect`` makes, trying again while the
    server does not answer (a paused one) until ``deadline``: then a :class:`ChaosError`
    that names the keys left."""
    while True:
        client = connect()
        try:
            delete_namespace(client, prefix)
            return
        except redis.RedisError as error:
            if time.monotonic() >= deadline:
                raise ChaosError(
                    f"the server did not answer the clean-up: keys {prefix}* are left ({error})"
                ) from error
        finally:
            client.close()
        time.sleep(FORGET_PAUSE_S)


def delete_namespace(client: redis.Redis, prefix: str) -> None:
    """Remove the run's keys from a shared server (SCAN, bounded in count)."""
    keys = list(client.scan_iter(match=f"{prefix}*", count=500))[:10_000]
    if keys:
        client.delete(*keys)
