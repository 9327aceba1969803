"""One soak worker process: ``count`` fenced read-modify-writes over random lock names.

Run as ``python -m redlease.chaos.soak_worker``; :mod:`redlease.chaos.soak` starts many
and injects faults into them. Each acquisition picks a random name out of ``names``,
waits for it (``acquire(timeout=...)``, the library's blocking wait), then on the *data*
server:

1. ``RedisGuard.claim`` the name's fenced hash (older holders are refused from now on);
2. reads the fenced and the plain hash in one round trip (``HMGET n <worker>``);
3. writes the plain hash with a plain ``HSET`` and the fenced one through
   ``RedisGuard.hset``, each ``{n: n + 1, <worker>: mine + 1}``;
4. releases the lock.

The field named after the worker counts that worker's own writes. Only this process
writes it, so after the run the sum of those fields is exactly how many writes went
through, whatever the log lost, and ``sum - n`` is the number of lost updates.

The log is compact and buffered: one JSON list per critical section, written every
``FLUSH_LINES`` lines or ``FLUSH_SECONDS``, so ``kill -9`` loses at most the unflushed
tail (the checker tolerates it; the counters above do not depend on it). Times come from
``time.monotonic()``, one clock for every process of a Linux host.

While it runs, the worker keeps its state (waiting, holding, which name) in its slot of
a small shared :class:`Board` file, so the runner can aim a fault at a holder.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import redis

from redlease.chaos.checks import Section
from redlease.chaos.soak_board import HOLDING, IDLE, WAITING, Board, resources
from redlease.core.lease import Lease, ReleaseOutcome
from redlease.errors import FenceRejected, LockError, LockTimeout
from redlease.fencing import RedisGuard
from redlease.sync.lock import Lock, Locks

FLUSH_LINES = 64
FLUSH_SECONDS = 1.0
ERROR_PAUSE = 0.01
WARM_UP_WAIT = 0.05  # the deliberate wait that opens the pub/sub connection
SOCKET_TIMEOUT = 15.0  # outlasts a stalled server (DEBUG SLEEP 2 x TTL) without ambiguity

# Section codes in the log: plain write, fenced write, release.
WROTE, ERROR = "w", "e"
ACCEPTED, REJECTED_CLAIM, REJECTED_SET = "a", "r", "R"
RELEASE_CODES = {ReleaseOutcome.RELEASED: "r", ReleaseOutcome.EXPIRED: "x"}


def data_keys(prefix: str, name: str) -> tuple[str, str]:
    """The plain and the fenced hash that the lock ``name`` protects."""
    return f"{prefix}:plain:{name}", f"{prefix}:fenced:{name}"


def lock_names(count: int) -> list[str]:
    return [f"n{index:03d}" for index in range(count)]


class Log:
    """JSON lists, one a line, buffered in memory and written in batches."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.lines: list[str] = []
        self.flushed = time.monotonic()

    def add(self, *fields: Any) -> None:
        self.lines.append(json.dumps(fields, separators=(",", ":")))
        if len(self.lines) >= FLUSH_LINES or time.monotonic() - self.flushed > FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        if self.lines:
            self.stream.write("\n".join(self.lines) + "\n")
            self.stream.flush()
            self.lines.clear()
        self.flushed = time.monotonic()


PLAIN_RESULTS = {WROTE: "wrote", ERROR: "error"}
FENCED_RESULTS = {ACCEPTED: "accepted", REJECTED_CLAIM: "rejected", REJECTED_SET: "rejected"}


SECTION_FIELDS = (
    "seq", "name", "fence", "requested", "acquired", "deadline", "ended",
    "plain", "fenced", "released", "written",
)  # fmt: skip
"""A section's log line: ``["s", *fields]`` in this order."""


@dataclass
class SoakSection(Section):
    """A critical section of the soak, beyond what :mod:`~redlease.chaos.checks` knows.

    ``deadline`` is the lease's ``expires_at``: the server keeps the lease at least until
    then, so a newer holder granted before it means two holders inside their leases.
    ``written`` is the value the fenced write set the counter to (0 unless accepted):
    accepted writes sorted by it are in the order the data server applied them.
    """

    name: int = 0
    requested: float = 0.0
    deadline: float = 0.0
    released: str = ""
    written: int = 0


@dataclass
class WorkerLog:
    """What one worker process logged; a tail lost to ``kill -9`` is simply absent."""

    worker: str = ""
    pid: int = 0
    start: int = 0
    count: int = 0
    sections: list[SoakSection] = field(default_factory=list)
    timeouts: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    releases: Counter[str] = field(default_factory=Counter)
    warm: tuple[int, int] | None = None  # (RSS KiB, fds) after the warm-up
    end: tuple[int, int] | None = None  # the same right before the worker stops
    done: int | None = None  # acquisitions attempted, logged by a worker that stopped cleanly

    @property
    def attempts(self) -> int:
        """Acquisitions attempted as far as the log shows (granted, timed out, failed)."""
        return len(self.sections) + self.timeouts + self.errors["acquire"]

    def add_section(self, line: dict[str, Any]) -> None:
        fenced = FENCED_RESULTS.get(line["fenced"], "error")
        section = SoakSection(
            self.worker, line["seq"], line["acquired"], line["fence"], line["ended"],
            PLAIN_RESULTS.get(line["plain"], "error"), fenced, line["ended"],
            name=line["name"], requested=line["requested"], deadline=line["deadline"],
            released=line["released"], written=line["written"],
        )  # fmt: skip
        self.sections.append(section)
        self.releases[section.released] += 1

    def add(self, record: list[Any]) -> None:
        kind = record[0]
        if kind == "s":
            self.add_section(dict(zip(SECTION_FIELDS, record[1:], strict=True)))
        elif kind == "t":
            self.timeouts += 1
        elif kind == "e":
            self.errors[str(record[4])] += 1
        elif kind == "m":
            sample = (int(record[3]), int(record[4]))
            if record[1] == "warm":
                self.warm = sample
            else:
                self.end = sample
        elif kind == "b":
            self.worker, self.pid, _, self.start, self.count = record[1:6]
        elif kind == "z":
            self.done = int(record[2])


def read_log(path: Path) -> WorkerLog:
    """Parse one worker's log; a torn or missing line is skipped."""
    log = WorkerLog()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return log
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, list) and record:
            log.add(record)
    return log


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="redlease.chaos.soak_worker")
    parser.add_argument("--lock-url", required=True)
    parser.add_argument("--data-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--names", type=int, required=True)
    parser.add_argument("--slot", type=int, required=True)
    parser.add_argument("--worker", required=True, help="unique per process (slot.incarnation)")
    parser.add_argument("--start", type=int, default=0, help="number of the first acquisition")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--ttl", type=float, required=True)
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--acquire-timeout", type=float, required=True)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--deadline", type=float, required=True, help="monotonic time to stop")
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--board", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=5.0)


class Worker:
    """The loop and one critical section; everything it learns goes to :class:`Log`."""

    def __init__(self, args: argparse.Namespace, locks: Locks, log: Log, board: Board) -> None:
        self.args = args
        self.log = log
        self.board = board
        self.data = _client(args.data_url)
        self.guard = RedisGuard(self.data)
        self.names = lock_names(args.names)
        self.locks_client = locks
        self.locks: list[Lock] = [
            locks.lock(name, ttl=args.ttl, renew=False) for name in self.names
        ]
        self.random = random.Random(args.seed)
        self.parent = os.getppid()
        self.stop_file = Path(args.stop_file)

    def should_stop(self) -> bool:
        return (
            time.monotonic() > self.args.deadline
            or self.stop_file.exists()
            or os.getppid() != self.parent
        )

    def open_connections(self) -> None:
        """Open every connection the run will use before the warm-up sample.

        The data client connects at its first command, and ``Locks`` subscribes only at
        the first contended wait, which a worker may not meet during its warm-up: the fd
        check would count those connections as a leak. So: a PING on the data client,
        and one deliberate wait on one of the run's names (held by one owner, waited for
        by another until a short timeout; if another worker holds it, the wait is on that
        one). A name of the run's own, so that no key is added (a fence counter would
        stay). Unlogged, and errors are ignored: the run reports its own.
        """
        with suppress(redis.RedisError):
            self.data.ping()
        name = self.names[self.args.slot % len(self.names)]
        holder = self.locks_client.lock(name, ttl=self.args.ttl, renew=False,
                                        owner="warm-up holder")  # fmt: skip
        waiter = self.locks_client.lock(name, ttl=self.args.ttl, renew=False,
                                        owner="warm-up waiter")  # fmt: skip
        with suppress(LockError, redis.RedisError):
            held = holder.try_acquire() is not None
            try:
                waiter.acquire(timeout=WARM_UP_WAIT)
                waiter.release()
            except LockTimeout:
                pass
            finally:
                if held:
                    holder.release()

    def run(self) -> int:
        """Acquisitions attempted; stops early at the deadline or when told to."""
        args = self.args
        done = 0
        self.open_connections()
        for seq in range(args.start, args.start + args.count):
            if self.should_stop():
                break
            if done == args.warmup:
                self.log.add("m", "warm", time.monotonic(), *resources())
            self.attempt(seq, self.random.randrange(len(self.names)))
            done += 1
        return done

    def attempt(self, seq: int, index: int) -> None:
        lock = self.locks[index]
        self.board.set(self.args.slot, WAITING, index)
        requested = time.monotonic()
        try:
            lease = lock.acquire(timeout=self.args.acquire_timeout)
        except LockTimeout:
            self.log.add("t", seq, index, time.monotonic())
            return
        except (LockError, redis.RedisError) as error:
            self.log.add("e", seq, index, time.monotonic(), "acquire", str(error)[:160])
            time.sleep(ERROR_PAUSE)
            return
        finally:
            self.board.set(self.args.slot, IDLE, index)
        acquired = time.monotonic()
        self.board.set(self.args.slot, HOLDING, index)
        plain, fenced, ended, written = self.section(seq, index, lease)
        try:
            released = RELEASE_CODES.get(lock.release(), "?")
        except (LockError, redis.RedisError) as error:
            released = ERROR
            self.log.add("e", seq, index, time.monotonic(), "release", str(error)[:160])
        self.board.set(self.args.slot, IDLE, index)
        self.log.add(
            "s", seq, index, lease.fence, requested, acquired, lease.expires_at, ended,
            plain, fenced, released, written,
        )  # fmt: skip

    def section(self, seq: int, index: int, lease: Lease) -> tuple[str, str, float, int]:
        """Claim, read both hashes, write both back plus one; returns the outcome codes,
        the end time and the fenced counter's new value (0 unless accepted)."""
        worker = self.args.worker
        plain_key, fenced_key = data_keys(self.args.prefix, self.names[index])
        fenced = ACCEPTED
        try:
            self.guard.claim(lease, fenced_key)
        except FenceRejected:
            fenced = REJECTED_CLAIM
        except (LockError, redis.RedisError) as error:
            fenced = ERROR
            self.log.add("e", seq, index, time.monotonic(), "claim", str(error)[:160])
        try:
            pipe = self.data.pipeline(transaction=False)
            pipe.hmget(plain_key, ["n", worker])
            pipe.hmget(fenced_key, ["n", worker])
            (plain_n, plain_mine), (fenced_n, fenced_mine) = pipe.execute()
        except redis.RedisError as error:
            self.log.add("e", seq, index, time.monotonic(), "read", str(error)[:160])
            return ERROR, ERROR, time.monotonic(), 0
        if self.args.hold > 0:
            time.sleep(self.args.hold)
        plain = WROTE
        try:
            self.data.hset(plain_key, mapping=_bumped(plain_n, plain_mine, worker))
        except redis.RedisError as error:
            plain = ERROR
            self.log.add("e", seq, index, time.monotonic(), "plain", str(error)[:160])
        written = 0
        if fenced == ACCEPTED:
            bumped = _bumped(fenced_n, fenced_mine, worker)
            try:
                self.guard.hset(lease, fenced_key, bumped)
                written = bumped["n"]
            except FenceRejected:
                fenced = REJECTED_SET
            except (LockError, redis.RedisError) as error:
                fenced = ERROR
                self.log.add("e", seq, index, time.monotonic(), "fenced", str(error)[:160])
        return plain, fenced, time.monotonic(), written


def _bumped(total: bytes | None, mine: bytes | None, worker: str) -> dict[Any, int]:
    # Any keys: redis-py's hset and the guard's hset type their mappings' keys differently.
    return {"n": int(total or 0) + 1, worker: int(mine or 0) + 1}


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    board = Board(Path(args.board), args.slot + 1)
    with (
        Path(args.log).open("a", encoding="utf-8") as stream,
        Locks(_client(args.lock_url), prefix=args.prefix) as locks,
    ):
        log = Log(stream)
        log.add("b", args.worker, os.getpid(), time.monotonic(), args.start, args.count)
        worker = Worker(args, locks, log, board)
        done = 0
        try:
            done = worker.run()
        finally:
            log.add("m", "end", time.monotonic(), *resources())
            log.add("z", time.monotonic(), done)
            log.flush()
            worker.data.close()
            board.set(args.slot, IDLE, 0)
    board.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
