"""The soak: many workers, many fenced acquisitions over many lock names, under faults.

``python -m redlease.chaos.soak [--workers 64] [--acquisitions 10000] [--names 64]
[--fault-every 30] [--json]`` starts two private servers (the lock's and the data's, see
``docs/soak.md``) unless ``--url`` is given, and ``workers`` processes of
:mod:`redlease.chaos.soak_worker`, each doing ``acquisitions`` blocking acquisitions of
random names with a fenced read-modify-write inside. Every ``fault_every`` seconds it
injects the next fault of the cycle:

* ``kill``: ``kill -9`` a worker (a holder if one holds a lock right now) and start a
  fresh one with the acquisitions it had left;
* ``sigstop``: ``SIGSTOP`` a worker (a holder if possible) for 2 x TTL, then ``SIGCONT``;
* ``pexpire``: ``PEXPIRE`` a held lease to 1 ms behind its holder's back;
* ``stall``: ``DEBUG SLEEP`` the lock server for 2 x TTL (private servers only).

Each injection opens a window ``[start, end + TTL]``. At the end it checks: never two
holders inside their leases; no overlap of two critical sections on one name outside the
windows (among sections whose fenced write was accepted) other than after the older
lease's deadline (a holder the machine itself paused); no fenced lost update; fences never
going back on a name; each worker's RSS and file descriptors after warm-up versus right
before it stopped; and the keys left on the lock server by kind. Exit status 0 when every
check holds, 1 when not. Every wait is bounded and the whole run has a deadline.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

from redlease.chaos.soak_checks import (
    Injection,
    acquisitions,
    failures,
    fence_order,
    holder_label,
    key_kind,
    overruns,
    sections_by_name,
    split_overlaps,
    worker_resources,
)
from redlease.chaos.soak_worker import (
    HOLDING,
    Board,
    WorkerLog,
    data_keys,
    lock_names,
    read_log,
    resources,
)
from redlease.keys import LockKeys
from redlease.server import EmbeddedServer

FAULT_KINDS = ("kill", "sigstop", "pexpire", "stall")
POLL = 0.2
STOP_GRACE = 15.0
LATCH_WAIT = 12.0  # release latches live 10 s (RELEASE_LATCH_MS)
SCAN_LIMIT = 1_000_000


@dataclass(frozen=True)
class SoakSettings:
    workers: int = 64
    acquisitions: int = 10_000
    names: int = 64
    fault_every: float = 30.0
    ttl: float = 2.0
    hold: float = 0.0
    acquire_timeout: float = 10.0
    deadline: float = 7200.0
    seed: int | None = None
    max_rss_growth_kib: int = 16 * 1024
    max_fd_growth: int = 2

    @property
    def warmup(self) -> int:
        """Acquisitions before a worker's first RSS/fd sample."""
        return max(1, min(200, self.acquisitions // 10))


@dataclass
class Target:
    lock_url: str
    data_url: str
    private: bool


@contextmanager
def private_target() -> Iterator[Target]:
    """A lock server and a separate data server, as a lock and its database would be."""
    with EmbeddedServer() as lock_server, EmbeddedServer() as data_server:
        yield Target(lock_server.url, data_server.url, private=True)


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
        self.board = Board(directory / "board.bin", settings.workers, create=True)
        self.stop_file = directory / "stop"
        self.slots: list[Slot] = []
        self.logs: list[Path] = []
        self.injections: list[Injection] = []
        self.crashes: list[str] = []
        self.started = time.monotonic()
        self.deadline = self.started + settings.deadline

    @contextmanager
    def client(self, url: str, timeout: float = 5.0) -> Iterator[redis.Redis]:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=5.0)
        try:
            yield client
        finally:
            client.close()

    # Workers.

    def spawn(self, index: int, start: int, count: int, incarnation: int = 0) -> Slot:
        s = self.settings
        worker = f"w{index:02d}.{incarnation}"
        log = self.directory / f"{worker}.jsonl"
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
        with (self.directory / f"{worker}.err").open("wb") as errors:
            process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=errors, stderr=subprocess.STDOUT
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
        with self.client(self.target.lock_url) as client:
            for index in [*held, *rest]:
                if client.pexpire(LockKeys(self.names[index], self.prefix).lease, 1):
                    return f"lease of {self.names[index]}"
        return "no lease held"

    def stall(self) -> str:
        seconds = 2 * self.settings.ttl
        with self.client(self.target.lock_url, timeout=seconds + 10) as client:
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
        server_start = self.server_info()
        try:
            self.drive()
        finally:
            self.stop()
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
        report["leftover_keys"] = self.leftovers()
        server_end = self.server_info()
        report["lock_server"] = {
            "version": server_start["version"],
            "memory_start": server_start["used_memory"],
            "memory_end": server_end["used_memory"],
            "clients_at_end": server_end["clients"] if self.target.private else None,
        }
        self.cleanup()
        report["failures"] = failures(report, self.settings)
        report["ok"] = not report["failures"]
        return report

    # Checks.

    def history(self, logs: list[WorkerLog]) -> dict[str, Any]:
        """The verdicts over every logged section and the counters' ground truth."""
        by_name = sections_by_name(logs, len(self.names))
        truth = self.counters()
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

    def counters(self) -> dict[str, Any]:
        """The ground truth on the data server: every hash's ``n`` and its writers' fields."""
        truth: dict[str, Any] = Counter()
        records: dict[int, int] = {}
        with self.client(self.target.data_url) as client:
            pipe = client.pipeline(transaction=False)
            for name in self.names:
                plain, fenced = data_keys(self.prefix, name)
                pipe.hgetall(plain)
                pipe.hgetall(fenced)
                pipe.hget(f"{fenced}:fence", "fence")
            replies = pipe.execute()
        for index in range(len(self.names)):
            plain, fenced, record = replies[3 * index : 3 * index + 3]
            for kind, values in (("plain", plain), ("fenced", fenced)):
                truth[f"{kind}_counter"] += int(values.pop(b"n", 0))
                truth[f"{kind}_writes"] += sum(int(value) for value in values.values())
            records[index] = int(record or 0)
        truth["records"] = records
        return dict(truth)

    def leftovers(self) -> dict[str, Any]:
        """Keys of the run left on the lock server, by kind; waits out the release latches."""
        kinds = self.key_kinds()
        at_stop = kinds.get("latch", 0)
        limit = time.monotonic() + LATCH_WAIT
        while kinds.get("latch", 0) and time.monotonic() < limit:
            time.sleep(0.5)
            kinds = self.key_kinds()
        result: dict[str, Any] = {kind: kinds.get(kind, 0) for kind in ("lease", "fence", "queue")}
        result["latch_at_stop"] = at_stop
        result["latch_after_wait"] = kinds.get("latch", 0)
        result["other"] = sum(
            v for k, v in kinds.items() if k not in ("lease", "fence", "queue", "latch")
        )
        return result

    def key_kinds(self) -> Counter[str]:
        kinds = Counter[str]()
        with self.client(self.target.lock_url) as client:
            keys = client.scan_iter(match=f"{self.prefix}:{{*", count=1000)
            for number, key in enumerate(keys):
                if number >= SCAN_LIMIT:
                    break
                kinds[key_kind(key.decode(), self.prefix)] += 1
        return kinds

    def server_info(self) -> dict[str, Any]:
        """The lock server's version, memory and clients (other than this one)."""
        with self.client(self.target.lock_url) as client:
            info = client.info()
        return {
            "version": info.get("valkey_version") or info.get("redis_version"),
            "used_memory": int(info["used_memory"]),
            "clients": int(info["connected_clients"]) - 1,
        }

    def cleanup(self) -> None:
        """On a shared server, delete the run's keys (SCAN, bounded)."""
        if self.target.private:
            return
        for url in {self.target.lock_url, self.target.data_url}:
            with self.client(url) as client:
                batch: list[bytes] = []
                for number, key in enumerate(
                    client.scan_iter(match=f"{self.prefix}:*", count=1000)
                ):
                    if number >= SCAN_LIMIT:
                        break
                    batch.append(key)
                    if len(batch) >= 1000:
                        client.delete(*batch)
                        batch.clear()
                if batch:
                    client.delete(*batch)


def run_soak(
    settings: SoakSettings, url: str | None = None, logs: Path | None = None
) -> dict[str, Any]:
    """One soak run; the result is what ``--json`` prints. Logs go to ``logs`` or a
    temporary directory."""
    with tempfile.TemporaryDirectory(prefix="redlease-soak-") as scratch:
        directory = Path(scratch) if logs is None else logs
        directory.mkdir(parents=True, exist_ok=True)
        if url is None:
            with private_target() as target:
                report = Soak(settings, target, directory).execute()
        else:
            report = Soak(settings, Target(url, url, private=False), directory).execute()
    report["settings"] = asdict(settings)
    return report


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m redlease.chaos.soak",
        description="Many workers x many fenced acquisitions over many lock names, with "
        "faults (kill -9, SIGSTOP, PEXPIRE, DEBUG SLEEP) every few seconds; then check "
        "overlaps, lost updates, fence order, RSS, file descriptors and leftover keys.",
        epilog="exit status: 0 when every check holds, 1 when one does not",
    )
    defaults = SoakSettings()
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--acquisitions", type=int, default=defaults.acquisitions)
    parser.add_argument("--names", type=int, default=defaults.names)
    parser.add_argument("--fault-every", type=float, default=defaults.fault_every,
                        help="seconds between faults; 0 for none")  # fmt: skip
    parser.add_argument("--ttl", type=float, default=defaults.ttl, help="lease TTL, not renewed")
    parser.add_argument("--hold", type=float, default=defaults.hold,
                        help="seconds between the read and the write")  # fmt: skip
    parser.add_argument("--acquire-timeout", type=float, default=defaults.acquire_timeout)
    parser.add_argument("--deadline", type=float, default=defaults.deadline,
                        help="seconds the whole run may take")  # fmt: skip
    parser.add_argument("--seed", type=int)
    parser.add_argument("--url", help="one server for lock and data (no stall fault)")
    parser.add_argument("--logs", type=Path, help="keep the workers' logs in this directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    return parser.parse_args(argv)


def _summary(report: dict[str, Any]) -> str:
    s, a, w = report["settings"], report["acquisitions"], report["workers"]
    o, k = report["overlaps"], report["leftover_keys"]
    lines = [
        f"soak: {s['workers']} workers x {s['acquisitions']} acquisitions over {s['names']} "
        f"names, TTL {s['ttl']:g} s, a fault every {s['fault_every']:g} s",
        f"  {report['seconds']:g} s, {a['attempted']} attempted ({a['per_second']}/s), "
        f"{a['granted']} granted, {a['timeouts']} timed out, errors {a['errors']}, "
        f"wait ms {a['wait_ms']}",
        f"  overlaps accepted/all: outside windows {o['outside']}/{o['outside_all']} "
        f"({o['outside_after_deadline']} after the older lease's deadline), "
        f"inside {o['inside']}/{o['inside_all']}; with a live lease {o['live_lease']}",
        f"  sections outside windows past their lease deadline "
        f"{report['overruns_outside_windows']}",
        f"  fenced lost updates {report['fenced_lost_updates']}, plain lost updates "
        f"{report['plain_lost_updates']}, rejected {report['rejected']}, "
        f"fence regressions {report['fence_regressions']}",
        f"  faults {report['faults_by_kind']}",
        f"  worker RSS KiB {w['rss_kib']}",
        f"  worker fds {w['fds']}",
        f"  leftover keys {k}; lock server {report['lock_server']}",
    ]
    lines += [f"  FAILED {failure}" for failure in report["failures"]]
    lines.append("  ok" if report["ok"] else "  NOT OK")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    settings = SoakSettings(
        workers=args.workers,
        acquisitions=args.acquisitions,
        names=args.names,
        fault_every=args.fault_every,
        ttl=args.ttl,
        hold=args.hold,
        acquire_timeout=args.acquire_timeout,
        deadline=args.deadline,
        seed=args.seed,
    )
    report = run_soak(settings, url=args.url, logs=args.logs)
    print(json.dumps(report) if args.json else _summary(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
