"""Worker processes for the demos: start them together, relay what they say, collect reports.

The demos run their actors as separate processes (the ``spawn`` context, so nothing is
inherited but the arguments), because that is what a lock is for: programs that meet only
in Redis. Each worker connects, reports ready and waits for the common start signal, so
slow interpreter start-up does not decide the race; then it runs its *job*, a module-level
function ``job(plan, worker) -> figures``, and sends the figures back. While it works a
job may ``worker.emit({...})`` an event, which the parent receives with the time it
happened, measured from the start signal.

:class:`RunKeys` names every key of one run under a namespace of its own, so that runs
on one server never mix, and :func:`remove_keys` deletes them all afterwards.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any, Protocol

import redis

from redlease.demos.base import DemoFailed

__all__ = [
    "Crew",
    "Event",
    "Job",
    "Report",
    "RunKeys",
    "Worker",
    "remove_keys",
    "run_crew",
]

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from typing import TypeAlias

    Outbox: TypeAlias = Queue[tuple[str, int, Any]]

POLL_INTERVAL = 0.05
START_TIMEOUT = 60.0


class _Outbox(Protocol):
    """The part of a ``multiprocessing`` queue a worker uses."""

    def put(self, obj: Any, block: bool = ..., timeout: float | None = ...) -> None: ...


class _StartSignal(Protocol):
    """The part of a ``multiprocessing`` event a worker uses."""

    def wait(self, timeout: float | None = ...) -> bool: ...


@dataclass(frozen=True)
class RunKeys:
    """The keys of one run of one demo, unique to it.

    The demo's own keys share one hash tag (one Redis Cluster slot, so fenced writes stay
    single-slot scripts); the locks live under :attr:`lock_prefix`, tagged by redlease.
    """

    demo: str
    run_id: str

    @classmethod
    def fresh(cls, demo: str) -> RunKeys:
        return cls(demo, uuid.uuid4().hex[:12])

    @property
    def base(self) -> str:
        return f"redlease-demo:{{{self.demo}:{self.run_id}}}"

    def key(self, *parts: object) -> str:
        """``base:part:part...``, e.g. ``key("orders", 42)``."""
        return ":".join([self.base, *(str(part) for part in parts)])

    @property
    def lock_prefix(self) -> str:
        return f"redlease-demo:{self.demo}:{self.run_id}"

    @property
    def pattern(self) -> str:
        """Matches every key of the run: the demo's and its locks'."""
        return f"redlease-demo:*{self.run_id}*"


def remove_keys(client: redis.Redis, pattern: str) -> None:
    """Delete every key matching ``pattern``, in batches."""
    batch: list[str | bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 500:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)


@dataclass(frozen=True)
class Worker:
    """What a job gets besides its plan: its number, its own client, and a way to speak up."""

    index: int
    client: redis.Redis
    emit: Callable[[dict[str, Any]], None]


Job = Callable[[Any, Worker], dict[str, Any]]


@dataclass(frozen=True)
class Report:
    """What one worker's job returned; ``finished_at`` is on the system-wide monotonic clock."""

    index: int
    figures: dict[str, Any]
    finished_at: float
    error: str | None = None


@dataclass(frozen=True)
class Event:
    """Something a worker emitted, ``at`` seconds after the start signal."""

    index: int
    at: float
    payload: dict[str, Any]


@dataclass
class Crew:
    """The reports of all workers (in worker order) and when they were let loose."""

    reports: list[Report]
    started: float
    finished: float = field(default=0.0)

    @property
    def seconds(self) -> float:
        """From the start signal to the last worker's end."""
        return max(self.finished - self.started, 1e-9)


@dataclass(frozen=True)
class _Task:
    """One worker's assignment: plain, picklable data (``job`` is pickled by its name)."""

    job: Job
    plan: Any
    index: int
    url: str


def work(task: _Task, outbox: _Outbox, start: _StartSignal) -> None:
    """Process entry: put ``ready``, wait for the start, run the job, put ``done``."""
    index = task.index
    client = redis.Redis.from_url(task.url)

    def emit(payload: dict[str, Any]) -> None:
        outbox.put(("event", index, (time.monotonic(), payload)))

    try:
        client.ping()
        outbox.put(("ready", index, None))
        if not start.wait(START_TIMEOUT):
            return
        figures = task.job(task.plan, Worker(index, client, emit))
        report = Report(index, figures, time.monotonic())
    except KeyboardInterrupt:
        return
    except Exception as error:
        report = Report(index, {}, time.monotonic(), repr(error))
    finally:
        client.close()
    outbox.put(("done", index, report))


def run_crew(
    url: str,
    name: str,
    tasks: Sequence[tuple[Job, Any]],
    *,
    limit: float,
    tick: Callable[[float], None] = lambda elapsed: None,
    on_event: Callable[[Event], None] = lambda event: None,
) -> Crew:
    """Run one process per ``(job, plan)`` and return their reports.

    ``tick(elapsed)`` is called between polls, ``on_event`` for every event as it arrives.
    Raises :class:`DemoFailed` when a worker does not start, crashes, fails, or is still
    running ``limit`` seconds after the start; the processes never outlive the call.
    """
    context = multiprocessing.get_context("spawn")
    outbox: Outbox = context.Queue()
    start = context.Event()
    processes = [
        context.Process(
            target=work,
            args=(_Task(job, plan, index, url), outbox, start),
            name=f"redlease-{name}-{index}",
            daemon=True,
        )
        for index, (job, plan) in enumerate(tasks)
    ]
    try:
        for process in processes:
            process.start()
        _await_ready(processes, outbox)
        started = time.monotonic()
        start.set()
        reports = _supervise(processes, outbox, started, limit=limit, tick=tick, on_event=on_event)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
                process.join()
        outbox.close()
    _check(reports, len(processes))
    reports.sort(key=lambda report: report.index)
    finished = max(report.finished_at for report in reports)
    return Crew(reports, started, finished)


def _await_ready(processes: Sequence[BaseProcess], outbox: Outbox) -> None:
    """Wait until every worker is connected, so that they all start at once."""
    deadline = time.monotonic() + START_TIMEOUT
    ready = 0
    while ready < len(processes):
        if time.monotonic() > deadline:
            raise DemoFailed(
                f"only {ready} of {len(processes)} workers started within {START_TIMEOUT:g} s"
            )
        try:
            kind, _, _ = outbox.get(timeout=POLL_INTERVAL)
        except queue.Empty:
            dead = [process.name for process in processes if process.exitcode is not None]
            if dead:
                raise DemoFailed(
                    f"worker processes exited before the start: {', '.join(dead)}"
                ) from None
            continue
        ready += kind == "ready"


def _supervise(
    processes: Sequence[BaseProcess],
    outbox: Outbox,
    started: float,
    *,
    limit: float,
    tick: Callable[[float], None],
    on_event: Callable[[Event], None],
) -> list[Report]:
    """Relay events and collect reports while the workers run.

    Reading while they run matters: a process that put something on a queue does not exit
    until the reader has taken it off the pipe.
    """
    deadline = started + limit
    reports: list[Report] = []
    while len(reports) < len(processes):
        if time.monotonic() > deadline:
            raise DemoFailed(f"workers still running {limit:g} s after the start")
        try:
            kind, index, payload = outbox.get(timeout=POLL_INTERVAL)
        except queue.Empty:
            if not any(process.is_alive() for process in processes):
                break
        else:
            if kind == "done":
                reports.append(payload)
            elif kind == "event":
                at, body = payload
                on_event(Event(index, max(at - started, 0.0), body))
        tick(time.monotonic() - started)
    tick(time.monotonic() - started)
    return reports


def _check(reports: list[Report], expected: int) -> None:
    failures = [f"worker {report.index}: {report.error}" for report in reports if report.error]
    if len(reports) < expected:
        failures.append(f"{expected - len(reports)} worker(s) exited without a report")
    if failures:
        raise DemoFailed("the demo did not finish: " + "; ".join(failures))
