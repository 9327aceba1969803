"""Worker processes for the demos: start them together, relay what they say, collect reports.

The demos run their actors as separate processes (the ``spawn`` context, so nothing is
inherited but the arguments), because that is what a lock is for: programs that meet only
in Redis. Each worker connects, reports ready and waits for the common start signal, so
slow interpreter start-up does not decide the race; then it runs its *job*, a module-level
function ``job(plan, worker) -> figures``, and sends the figures back. While it works a
job may ``worker.emit({...})`` an event, which the parent receives with the time it
happened, measured from the start signal.

A spawned process has no logging set up, so what the library logs there (a lease lost
under ``watchdog --no-renew``) would vanish. Each worker therefore sends its ``redlease``
log records over the same channel, and the parent hands them to its own ``redlease``
logger: the command prints them as ``redlease: …`` lines, as it prints its own.
"""

from __future__ import annotations

import logging
import logging.handlers
import multiprocessing
import queue
import time
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
    "Worker",
    "run_crew",
]

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from typing import TypeAlias

    Outbox: TypeAlias = Queue[tuple[str, int, Any]]

LOGGER = "redlease"
POLL_INTERVAL = 0.05
START_TIMEOUT = 60.0


class _Outbox(Protocol):
    """The part of a ``multiprocessing`` queue a worker uses."""

    def put(self, obj: Any, block: bool = ..., timeout: float | None = ...) -> None: ...


class _StartSignal(Protocol):
    """The part of a ``multiprocessing`` event a worker uses."""

    def wait(self, timeout: float | None = ...) -> bool: ...


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
    log_level: int


class _LogForwarder(logging.handlers.QueueHandler):
    """Puts a worker's log records on the crew's channel, made picklable by ``prepare``."""

    def __init__(self, outbox: _Outbox, index: int) -> None:
        super().__init__(outbox)  # type: ignore[arg-type]  # a queue of tuples, see enqueue
        self.outbox = outbox
        self.index = index

    def enqueue(self, record: logging.LogRecord) -> None:
        self.outbox.put(("log", self.index, record))


def _forward_logs(outbox: _Outbox, index: int, level: int) -> None:
    """Send this process's ``redlease`` records at ``level`` and above to the parent."""
    logger = logging.getLogger(LOGGER)
    logger.setLevel(level)
    logger.addHandler(_LogForwarder(outbox, index))
    logger.propagate = False


def _relay_log(record: logging.LogRecord) -> None:
    """A worker's record, handled by the parent's logger of the same name."""
    logging.getLogger(record.name).handle(record)


def work(task: _Task, outbox: _Outbox, start: _StartSignal) -> None:
    """Process entry: put ``ready``, wait for the start, run the job, put ``done``."""
    index = task.index
    _forward_logs(outbox, index, task.log_level)
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
    on_ready: Callable[[int], None] = lambda ready: None,
    tick: Callable[[float], None] = lambda elapsed: None,
    on_event: Callable[[Event], None] = lambda event: None,
) -> Crew:
    """Run one process per ``(job, plan)`` and return their reports.

    ``on_ready(count)`` is called as the workers come up, ``tick(elapsed)`` between polls
    once they run, ``on_event`` for every event as it arrives. Raises :class:`DemoFailed`
    when a worker does not start, crashes, fails, or is still running ``limit`` seconds
    after the start; the processes never outlive the call.
    """
    log_level = logging.getLogger(LOGGER).getEffectiveLevel()
    context = multiprocessing.get_context("spawn")
    outbox: Outbox = context.Queue()
    start = context.Event()
    processes = [
        context.Process(
            target=work,
            args=(_Task(job, plan, index, url, log_level), outbox, start),
            name=f"redlease-{name}-{index}",
            daemon=True,
        )
        for index, (job, plan) in enumerate(tasks)
    ]
    try:
        for process in processes:
            process.start()
        _await_ready(processes, outbox, on_ready)
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


def _await_ready(
    processes: Sequence[BaseProcess], outbox: Outbox, on_ready: Callable[[int], None]
) -> None:
    """Wait until every worker is connected, so that they all start at once."""
    deadline = time.monotonic() + START_TIMEOUT
    ready = 0
    while ready < len(processes):
        if time.monotonic() > deadline:
            raise DemoFailed(
                f"only {ready} of {len(processes)} workers started within {START_TIMEOUT:g} s"
            )
        try:
            kind, _, payload = outbox.get(timeout=POLL_INTERVAL)
        except queue.Empty:
            dead = [process.name for process in processes if process.exitcode is not None]
            if dead:
                raise DemoFailed(
                    f"worker processes exited before the start: {', '.join(dead)}"
                ) from None
            continue
        if kind == "ready":
            ready += 1
            on_ready(ready)
        elif kind == "log":
            _relay_log(payload)


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
            elif kind == "log":
                _relay_log(payload)
        tick(time.monotonic() - started)
    tick(time.monotonic() - started)
    return reports


def _check(reports: list[Report], expected: int) -> None:
    failures = [f"worker {report.index}: {report.error}" for report in reports if report.error]
    if len(reports) < expected:
        failures.append(f"{expected - len(reports)} worker(s) exited without a report")
    if failures:
        raise DemoFailed("the demo did not finish: " + "; ".join(failures))
