"""The chaos harness: start workers, inject faults into the holder, check the history.

One :class:`Run` per scenario: a fresh key namespace, ``settings.workers`` worker
processes (see :mod:`redlease.chaos.worker`) contending for one lock, ``injections``
faults each injected while a worker is inside its critical section, then a clean stop
and the checkers of :mod:`redlease.chaos.checks`. Every wait is bounded in time.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from redlease.chaos.checks import read_logs, verdict
from redlease.chaos.faults import FAULTS, Fault
from redlease.keys import LockKeys
from redlease.server import EmbeddedServer

LOCK_NAME = "counter"
POLL = 0.002
START_TIMEOUT = 15.0
HOLDER_TIMEOUT = 5.0


class ChaosError(RuntimeError):
    """The harness could not carry out a scenario (workers never started, no holder)."""


@dataclass(frozen=True)
class Settings:
    ttl: float = 1.0
    hold: float = 0.25
    workers: int = 3
    injections: int = 5
    warmup: float = 1.0
    settle: float = 1.5

    @classmethod
    def quick(cls) -> Settings:
        return cls(ttl=0.5, hold=0.15, workers=3, injections=2, warmup=0.4, settle=0.8)


@dataclass
class Target:
    """Where the lock and the protected data live; ``lock_server`` if the harness owns it."""

    lock_url: str
    data_url: str
    lock_server: EmbeddedServer | None = None

    @property
    def private(self) -> bool:
        return self.lock_server is not None


@contextmanager
def private_target() -> Iterator[Target]:
    """Two private servers: one for the lock, one for the counters it protects.

    Separate servers let a restart of the lock server wipe the lock (and its fencing
    counter) while the counters and their fence records survive, as a database would.
    """
    with EmbeddedServer() as lock_server, EmbeddedServer() as data_server:
        yield Target(lock_server.url, data_server.url, lock_server)


class _Tail:
    """Reads a worker log incrementally; remembers the worker's open critical section."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.buffer = ""
        self.in_section = False
        self.acquisitions = 0

    def poll(self) -> None:
        try:
            with self.path.open("r", encoding="utf-8") as stream:
                stream.seek(self.offset)
                chunk = stream.read()
                self.offset = stream.tell()
        except FileNotFoundError:
            return
        lines = (self.buffer + chunk).split("\n")
        self.buffer = lines.pop()
        for line in lines:
            with suppress(ValueError):
                kind = json.loads(line)["ev"]
                if kind == "enter":
                    self.in_section = True
                elif kind == "exit":
                    self.in_section = False
                elif kind == "acq":
                    self.acquisitions += 1


class Run:
    """One scenario: its workers, its namespace, its fault."""

    def __init__(self, fault: Fault, target: Target, settings: Settings, directory: Path) -> None:
        self.fault = fault
        self.target = target
        self.settings = settings
        self.directory = directory
        self.prefix = f"redlease-chaos-{fault.name}-{secrets.token_hex(4)}"
        self.lease_key = LockKeys(LOCK_NAME, self.prefix).lease
        self.stop_file = directory / f"{fault.name}.stop"
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.tails: dict[str, _Tail] = {}
        self.deadline = time.monotonic() + self.budget()

    def budget(self) -> float:
        s = self.settings
        per_fault = HOLDER_TIMEOUT + self.fault.duration(self) + s.settle
        return START_TIMEOUT + s.warmup + s.injections * per_fault + 10

    @contextmanager
    def lock_client(self, timeout: float = 2.0) -> Iterator[redis.Redis]:
        client = redis.Redis.from_url(
            self.target.lock_url, socket_timeout=timeout, socket_connect_timeout=timeout
        )
        try:
            yield client
        finally:
            client.close()

    def spawn(self) -> str:
        worker = f"w{len(self.workers) + 1}"
        log = self.directory / f"{self.fault.name}-{worker}.jsonl"
        command = [
            sys.executable, "-m", "redlease.chaos.worker",
            "--lock-url", self.target.lock_url,
            "--data-url", self.target.data_url,
            "--prefix", self.prefix,
            "--name", LOCK_NAME,
            "--worker", worker,
            "--ttl", str(self.settings.ttl),
            "--hold", str(self.settings.hold),
            "--deadline", str(self.deadline),
            "--stop-file", str(self.stop_file),
            "--log", str(log),
        ]  # fmt: skip
        with (self.directory / f"{self.fault.name}-{worker}.err").open("wb") as errors:
            self.workers[worker] = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=errors, stderr=subprocess.STDOUT
            )
        self.tails[worker] = _Tail(log)
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

    def wait_for(self, condition: str, timeout: float) -> str:
        """The first live worker that has acquired (``acq``) or is in its section."""
        limit = time.monotonic() + timeout
        while time.monotonic() < limit:
            for worker in self._live():
                tail = self.tails[worker]
                tail.poll()
                if (condition == "acq" and tail.acquisitions) or (
                    condition == "enter" and tail.in_section
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
        started = time.monotonic()
        try:
            for _ in range(self.settings.workers):
                self.spawn()
            self.wait_for("acq", START_TIMEOUT)
            time.sleep(self.settings.warmup)
            for _ in range(self.settings.injections):
                holder = self.wait_for("enter", HOLDER_TIMEOUT)
                self.fault.inject(self, holder)
                time.sleep(self.fault.duration(self))
                self.fault.heal(self)
                fault_ends.append(time.monotonic())
                time.sleep(self.settings.settle)
        finally:
            self.fault.heal(self)
            self._stop_workers()
        history = read_logs([tail.path for tail in self.tails.values()])
        plain, fenced = self._counters()
        result = verdict(history, plain, fenced, fault_ends)
        result["injections"] = len(fault_ends)
        result["seconds"] = round(time.monotonic() - started, 2)
        result["expect_unfenced_violations"] = self.fault.expect_unfenced_violations
        return result

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
            if not self.target.private:
                _delete_namespace(client, self.prefix)
        finally:
            client.close()
        if not self.target.private:
            with self.lock_client() as lock_client:
                _delete_namespace(lock_client, self.prefix)
        return plain, fenced


def _delete_namespace(client: redis.Redis, prefix: str) -> None:
    """Remove the run's keys from a shared server (SCAN, bounded in count)."""
    keys = list(client.scan_iter(match=f"{prefix}*", count=500))[:10_000]
    if keys:
        client.delete(*keys)


def run_scenarios(
    names: list[str], settings: Settings, url: str | None = None, logs: Path | None = None
) -> dict[str, Any]:
    """Run each scenario in turn; the result is what ``--json`` prints.

    The workers' logs go to ``logs`` (kept) or to a temporary directory (removed).
    """
    faults = [FAULTS[name]() for name in names]
    with tempfile.TemporaryDirectory(prefix="redlease-chaos-") as scratch:
        directory = Path(scratch) if logs is None else logs
        directory.mkdir(parents=True, exist_ok=True)
        if url is None:
            with private_target() as target:
                results = {f.name: Run(f, target, settings, directory).execute() for f in faults}
        else:
            target = Target(url, url)
            results = {f.name: Run(f, target, settings, directory).execute() for f in faults}
    ok = all(
        r["fenced_lost_updates"] == 0 and r["fence_regressions"] == 0 for r in results.values()
    )
    return {
        "ok": ok,
        "server": "private" if url is None else "shared",
        "settings": asdict(settings),
        "scenarios": results,
    }
