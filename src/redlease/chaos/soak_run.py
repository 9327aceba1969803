"""The soak's runner: its worker processes, its faults, and the report of one run.

See :mod:`redlease.chaos.soak` for what a soak does; the checks are in
:mod:`redlease.chaos.soak_checks`, what it reads off the servers in
:mod:`redlease.chaos.soak_servers`.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from redlease.chaos.errors import remove_earlier
from redlease.chaos.soak_board import HOLDING, Board, resources
from redlease.chaos.soak_checks import (
    Injection,
    acquisitions,
    failures,
    fence_order,
    holder_label,
    overruns,
    sections_by_name,
    split_overlaps,
    worker_resources,
)
from redlease.chaos.soak_servers import Servers
from redlease.chaos.soak_settings import SoakSettings, Target
from redlease.chaos.soak_worker import WorkerLog, lock_names, read_log
from redlease.keys import LockKeys
from redlease.processes import die_with_parent

FAULT_KINDS = ("kill", "sigstop", "pexpire", "stall")
POLL = 0.2
STOP_GRACE = 15.0


@dataclass
class Slot:
    """One worker position; a killed worker's replacement takes over its slot."""

    index: int
    process: subprocess.Popen[bytes]
    log: Path
    start: int
    count: int
    incarnation: int = 0
    finished: bool = False


class Soak:
    """One soak run: its workers, its faults, its namespace."""

    def __init__(self, settings: SoakSettings, target: Target, directory: Path) -> None:
        self.settings = settings
        self.target = target
        self.directory = directory
        self.prefix = f"redlease-soak-{secrets.token_hex(4)}"
        self.names = lock_names(settings.names)
        self.random = random.Random(settings.seed)
        remove_earlier(directory / "board.bin")
        self.board = Board(directory / "board.bin", settings.workers, create=True)
        self.stop_file = directory / "stop"
        remove_earlier(self.stop_file)
        self.slots: list[Slot] = []
        self.logs: list[Path] = []
        self.injections: list[Injection] = []
        self.crashes: list[str] = []
        self.started = time.monotonic()
        self.deadline = self.started + settings.deadline
        self.servers = Servers(target, self.prefix, self.names)

    # Workers.

    def spawn(self, index: int, start: int, count: int, incarnation: int = 0) -> Slot:
        s = self.settings
        worker = f"w{index:02d}.{incarnation}"
        log = self.directory / f"{worker}.jsonl"
        remove_earlier(log)
        command = [
            sys.executable, "-m", "redlease.chaos.soak_worker",
            "--lock-url", self.target.lock_url, "--data-url", self.target.data_url,
            "--prefix", self.prefix, "--names", str(s.names),
            "--slot", str(index), "--worker", worker,
            "--start", str(start), "--count", str(count),
            "--ttl", str(s.ttl), "--hold", str(s.hold),
            "--acquire-timeout", str(s.acquire_timeout), "--warmup", str(s.warmup),
            "--deadline", str(self.deadline), "--stop-file", str(self.stop_file),
            "--board", str(self.directory / "board.bin"), "--log", str(log),
            "--seed", str(self.random.getrandbits(32)),
        ]  # fmt: skip
        errors_path = self.directory / f"{worker}.err"
        remove_earlier(errors_path)
        with errors_path.open("wb") as errors:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=errors,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(),  # noqa: PLW1509 - sets the death signal only
            )
        self.logs.append(log)
        return Slot(index, process, log, start, count, incarnation)

    def live(self) -> list[Slot]:
        return [slot for slot in self.slots if not slot.finished]

    def reap(self) -> None:
        """Mark workers that exited; one that failed is a crash to report, not respawned."""
        for slot in self.live():
            code = slot.process.poll()
            if code is None:
                continue
            slot.finished = True
            if code != 0:
                tail = (self.directory / f"{slot.log.stem}.err").read_bytes()[-400:]
                self.crashes.append(f"{slot.log.stem} exit {code}: {tail.decode(errors='replace')}")

    def states(self) -> list[tuple[Slot, tuple[int, int]]]:
        """Each live worker with its ``(state, name index)`` from the board."""
        return [(slot, self.board.get(slot.index)) for slot in self.live()]

    def pick(self) -> tuple[Slot, int | None]:
        """A random worker holding a lock right now (and its name), else any live one."""
        states = self.states()
        holding = [(slot, name) for slot, (state, name) in states if state == HOLDING]
        if holding:
            return self.random.choice(holding)
        return self.random.choice(states)[0], None

    # Faults: each returns a description of its target; the caller times the window.

    def kill(self) -> str:
        slot, name = self.pick()
        with suppress(ProcessLookupError):
            slot.process.kill()
        with suppress(subprocess.TimeoutExpired):
            slot.process.wait(5.0)
        done = read_log(slot.log).attempts  # at most the unflushed tail is redone
        position = self.slots.index(slot)
        remaining = slot.count - done
        if remaining > 0:
            self.slots[position] = self.spawn(
                slot.index, slot.start + done, remaining, slot.incarnation + 1
            )
        else:
            slot.finished = True
        return f"{slot.log.stem}{holder_label(self.names, name)}, respawned for {remaining}"

    def sigstop(self) -> str:
        slot, name = self.pick()
        pid = slot.process.pid
        try:
            os.kill(pid, signal.SIGSTOP)
            time.sleep(2 * self.settings.ttl)
        finally:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return f"{slot.log.stem}{holder_label(self.names, name)}"

    def pexpire(self) -> str:
        """Expire a lease some worker holds now; failing that, any lease that exists."""
        held = [name for _, (state, name) in self.states() if state == HOLDING]
        rest = [index for index in range(len(self.names)) if index not in held]
        self.random.shuffle(held)
        self.random.shuffle(rest)
        with self.servers.client(self.target.lock_url) as client:
            for index in [*held, *rest]:
                if client.pexpire(LockKeys(self.names[index], self.prefix).lease, 1):
                    return f"lease of {self.names[index]}"
        return "no lease held"

    def stall(self) -> str:
        seconds = 2 * self.settings.ttl
        with self.servers.client(self.target.lock_url, timeout=seconds + 10) as client:
            untyped: Any = client  # redis-py leaves execute_command untyped
            untyped.execute_command("DEBUG", "SLEEP", f"{seconds:.3f}")
        return "lock server"

    def inject(self, kind: str) -> None:
        started = time.monotonic()
        try:
            target = getattr(self, kind)()
        except (redis.RedisError, OSError) as error:
            target = f"failed: {error}"
        ended = time.monotonic()
        self.injections.append(
            Injection(kind, started, ended, target, window_end=ended + self.settings.ttl)
        )

    # The run.

    def drive(self) -> None:
        """Start the workers, inject faults on schedule, until all are done or the deadline."""
        s = self.settings
        kinds = [kind for kind in FAULT_KINDS if self.target.private or kind != "stall"]
        self.slots = [self.spawn(index, 0, s.acquisitions) for index in range(s.workers)]
        next_fault = self.started + s.fault_every
        while time.monotonic() < self.deadline:
            self.reap()
            if not self.live():
                return
            if s.fault_every > 0 and time.monotonic() >= next_fault:
                self.inject(kinds[len(self.injections) % len(kinds)])
                next_fault = max(next_fault + s.fault_every, time.monotonic() + 1.0)
            time.sleep(POLL)

    def stop(self) -> None:
        """Tell every worker to stop, wake any paused one, and wait (bounded) for all."""
        self.stop_file.touch()
        limit = time.monotonic() + STOP_GRACE
        for slot in self.slots:
            with suppress(ProcessLookupError):
                os.kill(slot.process.pid, signal.SIGCONT)
        for slot in self.slots:
            try:
                slot.process.wait(max(limit - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                slot.process.kill()
                slot.process.wait(5.0)
                self.crashes.append(f"{slot.log.stem} did not stop within {STOP_GRACE:g} s")
        self.reap()
        self.board.close()

    def execute(self) -> dict[str, Any]:
        """Run, stop every worker, check; the run's keys go whatever happens, even on
        Ctrl-C (a shared server keeps nothing of the run)."""
        try:
            server_start = self.servers.server_info()
            try:
                self.drive()
            finally:
                self.stop()
            return self.report(server_start)
        finally:
            self.servers.cleanup()

    def report(self, server_start: dict[str, Any]) -> dict[str, Any]:
        seconds = time.monotonic() - self.started
        parsed = {path: read_log(path) for path in self.logs}
        logs = list(parsed.values())
        # Finished: each slot's last worker logged every acquisition it was given.
        completed = all(parsed[slot.log].attempts >= slot.count for slot in self.slots)
        report: dict[str, Any] = {
            "completed": completed and not self.crashes,
            "crashes": self.crashes,
            "seconds": round(seconds, 1),
            "prefix": self.prefix,
            "started_monotonic": self.started,
            "server": "private" if self.target.private else "shared",
        }
        report["acquisitions"] = acquisitions(logs, seconds)
        report.update(self.history(logs))
        report["workers"] = worker_resources(logs)
        report["workers"]["spawned"] = len(self.logs)
        report["runner"] = dict(zip(("rss_kib", "fds"), resources(), strict=True))
        report["leftover_keys"] = self.servers.leftovers()
        server_end = self.servers.server_info()
        report["lock_server"] = {
            "version": server_start["version"],
            "memory_start": server_start["used_memory"],
            "memory_end": server_end["used_memory"],
            "clients_at_end": server_end["clients"] if self.target.private else None,
        }
        report["failures"] = failures(report, self.settings)
        report["ok"] = not report["failures"]
        return report

    # Checks.

    def history(self, logs: list[WorkerLog]) -> dict[str, Any]:
        """The verdicts over every logged section and the counters' ground truth."""
        by_name = sections_by_name(logs, len(self.names))
        truth = self.servers.counters()
        accepted = [s for ss in by_name.values() for s in ss if s.fenced == "accepted"]
        rejected = [s.ended or 0.0 for ss in by_name.values() for s in ss if s.fenced == "rejected"]
        for injection in self.injections:
            injection.rejected = sum(
                injection.started <= t <= injection.window_end for t in rejected
            )
        highest = {
            index: max((s.fence for s in sections if s.fenced == "accepted"), default=0)
            for index, sections in by_name.items()
        }
        order = [fence_order(sections) for sections in by_name.values()]
        return {
            "overlaps": split_overlaps(by_name, self.injections),
            "overruns_outside_windows": overruns(by_name, self.injections),
            "fenced_lost_updates": truth["fenced_writes"] - truth["fenced_counter"],
            "plain_lost_updates": truth["plain_writes"] - truth["plain_counter"],
            "fence_regressions": sum(regressions for regressions, _ in order),
            "duplicate_fenced_values": sum(duplicates for _, duplicates in order),
            "fence_records_behind": sum(truth["records"][i] < highest[i] for i in by_name),
            "rejected": len(rejected),
            "unlogged_fenced_writes": truth["fenced_writes"] - len(accepted),
            "counters": {key: value for key, value in truth.items() if key != "records"},
            "faults": [self.describe(injection) for injection in self.injections],
            "faults_by_kind": dict(Counter(injection.kind for injection in self.injections)),
        }

    def describe(self, injection: Injection) -> dict[str, Any]:
        return {
            "kind": injection.kind,
            "at_s": round(injection.started - self.started, 1),
            "lasted_s": round(injection.ended - injection.started, 2),
            "target": injection.target,
            "overlaps_all": injection.overlaps,
            "rejected": injection.rejected,
        }
