"""The cache rebuild: many processes miss a cache at once, exactly one rebuilds it.

Every process looks the value up, finds nothing, and must not rush to the slow source
all together (a cache stampede). With the lock each does the double-checked dance: check
the cache, take ``locks.lock("cache-rebuild:report")``, check again, rebuild only if it
is still missing. The first one in rebuilds; the others wait on the lock (no polling: the
release wakes them) and then find the value. Without the lock every process that missed
calls the source.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from redlease.commands.common import non_negative_float, positive_float
from redlease.demos.base import option, switch, workers_option
from redlease.demos.crew import Event, Worker
from redlease.demos.display import SILENT, Progress, Stage, counted, rows_of, summary_table
from redlease.demos.namespace import Plan, as_text
from redlease.demos.scaffold import demo, session
from redlease.sync.lock import Locks

__all__ = ["DEMO", "CacheResult", "CacheSettings", "run_cache_rebuild"]

NAME = "cache-rebuild"
LOCK_NAME = "cache-rebuild:report"
CACHE = "cache"
"""The key of the cached value."""
SOURCE_CALLS = "source_calls"
"""The key counting the calls to the slow source, from every process."""
STOP_GRACE = 10.0


@dataclass(frozen=True)
class CacheSettings:
    """The options of ``redlease demo cache-rebuild``, one field each."""

    workers: int = workers_option(8, "processes missing the cache at once")
    rebuild_seconds: float = option(
        0.5, non_negative_float, "S", "how long the slow source takes (default: %(default)s)"
    )
    locked: bool = switch(
        "--no-lock", "rebuild without the lock, to see the stampede on the source"
    )
    seconds: float = option(
        60.0, positive_float, "S", "longest a process waits for the lock (default: %(default)s)"
    )


@dataclass(frozen=True)
class CacheResult:
    """``readers`` read the cache without rebuilding; ``rebuilders`` called the source.

    ``seconds`` runs from the common start until the last process had the value.
    """

    source_calls: int
    readers: int
    rebuilders: int
    workers: int
    seconds: float
    locked: bool
    rebuild_seconds: float
    distinct_values: int
    longest_wait_s: float


CachePlan = Plan[CacheSettings]


def fetch(plan: CachePlan, worker: Worker) -> dict[str, Any]:
    """One process that needs the value: double-checked under the lock, or racing without.

    ``served_at`` is when the process had the value, before its client is closed (closing
    stops the client's workers, which is no part of the wait).
    """
    began = time.monotonic()
    value = worker.client.get(plan.key(CACHE))
    if value is not None:
        role, served_at = "read", time.monotonic()
    elif not plan.settings.locked:
        role, value = "rebuilt", _rebuild(plan, worker)
        served_at = time.monotonic()
    else:
        with Locks(worker.client, prefix=plan.keys.lock_prefix) as locks:
            role, value = _fetch_locked(plan, worker, locks)
            served_at = time.monotonic()
    worker.emit({"role": role})
    return {
        "role": role,
        "value": as_text(value),
        "waited_s": round(served_at - began, 4),
        "served_at": served_at,
    }


def _fetch_locked(plan: CachePlan, worker: Worker, locks: Locks) -> tuple[str, bytes | str]:
    """Lock, check the cache again, rebuild only if it is still missing."""
    with locks.lock(LOCK_NAME, timeout=plan.settings.seconds):
        value = worker.client.get(plan.key(CACHE))
        if value is None:
            return "rebuilt", _rebuild(plan, worker)
        return "read", value


def _rebuild(plan: CachePlan, worker: Worker) -> bytes:
    """The slow source: counted in Redis, so the parent sees every call from every process."""
    worker.client.incr(plan.key(SOURCE_CALLS))
    time.sleep(plan.settings.rebuild_seconds)
    value = f"report built by worker {worker.index} (pid {os.getpid()})".encode()
    worker.client.set(plan.key(CACHE), value)
    return value


def run_cache_rebuild(
    url: str, settings: CacheSettings, progress: Progress = SILENT
) -> CacheResult:
    """Miss the cache from every process at once; count the source calls; clean up."""
    served = 0

    def on_event(event: Event) -> None:
        nonlocal served
        served += 1

    with session(url, NAME, progress) as run:
        plan = CachePlan(run.keys, settings)
        crew = run.crew(
            [(fetch, plan)] * settings.workers,
            who=counted(settings.workers, "process"),
            stage=Stage("missing the cache", settings.workers, "served"),
            count=lambda elapsed: served,
            limit=settings.seconds + settings.rebuild_seconds + STOP_GRACE,
            on_event=on_event,
        )
        source_calls = int(run.client.get(plan.key(SOURCE_CALLS)) or 0)
    figures = [report.figures for report in crew.reports]
    rebuilders = sum(1 for figure in figures if figure["role"] == "rebuilt")
    return CacheResult(
        source_calls=source_calls,
        readers=len(figures) - rebuilders,
        rebuilders=rebuilders,
        workers=settings.workers,
        seconds=round(max(figure["served_at"] for figure in figures) - crew.started, 4),
        locked=settings.locked,
        rebuild_seconds=settings.rebuild_seconds,
        distinct_values=len({figure["value"] for figure in figures}),
        longest_wait_s=max(figure["waited_s"] for figure in figures),
    )


def _show(result: CacheResult) -> None:
    rows = [
        ("lock", "on" if result.locked else "off"),
        *rows_of(result, "workers", "source_calls", "rebuilders", "readers", "distinct_values"),
        ("longest wait", f"{result.longest_wait_s:.3f} s"),
        ("seconds", f"{result.seconds:.3f}"),
    ]
    summary_table("cache rebuild", rows)
    if result.source_calls == 1:
        print(
            f"Rebuilt once: 1 process called the source, {result.readers} waited on the "
            "lock and read the cache."
        )
    else:
        print(
            f"Stampede: {result.source_calls} of {result.workers} processes called the slow "
            f"source for the same value ({result.distinct_values} different values written)."
        )


def _violation(result: CacheResult) -> str | None:
    if result.locked and result.source_calls != 1:
        return f"the source was called {result.source_calls} times with the lock on"
    return None


DEMO = demo(
    name=NAME,
    summary="processes miss a cache at once; the lock lets exactly one rebuild it",
    description=(
        "N processes look up a cached value at the same moment and all miss. Each one\n"
        'checks the cache, takes locks.lock("cache-rebuild:report"), checks again, and\n'
        "only if the value is still missing calls the slow source (--rebuild-seconds,\n"
        "counted in Redis) and fills the cache. Exactly one process rebuilds; the others\n"
        "wait on the lock and read. With --no-lock every process that missed calls the\n"
        "source: a cache stampede."
    ),
    settings=CacheSettings,
    play=run_cache_rebuild,
    show=_show,
    violation=_violation,
)
