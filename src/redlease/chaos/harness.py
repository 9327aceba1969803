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
from redlease.chaos.errors import ChaosError
from redlease.chaos.faults import FAULTS, Fault
from redlease.chaos.targets import Target, namespaces_available, open_target
from redlease.keys import LockKeys

LOCK_NAME = "counter"
POLL = 0.002
START_TIMEOUT = 30.0  # python start-up of every worker on a loaded 2-core machine
HOLDER_TIMEOUT = 5.0
FAILOVER_ALLOWANCE = 30.0  # a failover fault heals when a replica has taken over


@dataclass(frozen=True)
class Settings:
    ttl: float = 1.0
    hold: float = 0.25
    workers: int = 3
    injections: int = 5
    warmup: float = 1.0
    settle: float = 1.5
    renew: bool = False

    @classmethod
    def quick(cls) -> Settings:
        return cls(ttl=0.5, hold=0.15, workers=3, injections=2, warmup=0.4, settle=0.8)


class _Tail:
    """Reads a worker log incrementally; remembers the worker's open critical section."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.buffer = ""
        self.in_section = False
        self.acquisitions = 0
        self.granted_at = 0.0

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
            with suppress(ValueError, KeyError):
                event = json.loads(line)
                kind = event["ev"]
                if kind == "enter":
                    self.in_section = True
                elif kind == "exit":
                    self.in_section = False
                elif kind == "acq":
                    self.acquisitions += 1
                    self.granted_at = float(event["t"])


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
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.tails: dict[str, _Tail] = {}
        self.deadline = time.monotonic() + self.budget()

    def budget(self) -> float:
        s = self.settings
        per_fault = self.holder_timeout() + self.fault.duration(self) + s.settle
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

    def spawn(self) -> str:
        worker = f"w{len(self.workers) + 1}"
        log = self.directory / f"{self.fault.name}-{worker}.jsonl"
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
        started = time.monotonic()
        try:
            for _ in range(self.settings.workers):
                self.spawn()
            self.wait_for("acq", START_TIMEOUT)
            time.sleep(self.settings.warmup)
            for _ in range(self.settings.injections):
                prepared = time.monotonic()
                self.fault.prepare(self)
                since = prepared if self.fault.fresh_holder else 0.0
                holder = self.wait_for("enter", self.holder_timeout(), since)
                self.fault.inject(self, holder)
                time.sleep(self.fault.duration(self))
                self.fault.heal(self)
                fault_ends.append(self.fault.ended_at(time.monotonic()))
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
        result["topology"] = self.target.kind
        result["settings"] = {"hold": self.settings.hold, "renew": self.settings.renew}
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
    """Run each scenario in turn, each on a fresh target; the result is what ``--json`` prints.

    The workers' logs go to ``logs`` (kept) or to a temporary directory (removed). A
    scenario this machine cannot run (no network namespaces, say) is reported as
    ``{"skipped": reason}``.
    """
    faults = [FAULTS[name]() for name in names]
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="redlease-chaos-") as scratch:
        directory = Path(scratch) if logs is None else logs
        directory.mkdir(parents=True, exist_ok=True)
        for fault in faults:
            reason = unavailable(fault)
            if reason is not None:
                results[fault.name] = {"skipped": reason}
                continue
            slots = settings.workers + settings.injections
            target = open_target(fault.topology, url=url, proxied=fault.proxied, slots=slots)
            with target:
                try:
                    results[fault.name] = Run(fault, target, settings, directory).execute()
                except ChaosError as error:
                    results[fault.name] = {"error": str(error)}
    ok = all(
        "error" not in r and r["fenced_lost_updates"] == 0 and r["fence_regressions"] == 0
        for r in results.values()
        if "skipped" not in r
    )
    return {
        "ok": ok,
        "server": "private" if url is None else "shared",
        "settings": asdict(settings),
        "scenarios": results,
    }


def unavailable(fault: Fault) -> str | None:
    """Why this machine cannot run ``fault`` (None when it can)."""
    if fault.topology == "netns":
        return namespaces_available()
    return None
