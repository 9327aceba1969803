"""The cache rebuild: many processes miss a cache at once, exactly one rebuilds it.

Every process looks the value up, finds nothing, and must not rush to the slow source
all together (a cache stampede). With the lock each does the double-checked dance: check
the cache, take ``locks.lock("cache-rebuild:report")``, check again, rebuild only if it
is still missing. The first one in rebuilds; the others wait on the lock (no polling: the
release wakes them) and then find the value. Without the lock every process that missed
calls the source.
"""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import dataclass
from typing import Any

import redis

from redlease.demos import display
from redlease.demos.base import (
    MAX_WORKERS,
    Demo,
    finish,
    non_negative_float,
    positive_float,
    reachable_server,
    worker_count,
)
from redlease.demos.crew import Event, RunKeys, Worker, remove_keys, run_crew
from redlease.sync.lock import Locks

__all__ = ["DEMO", "CacheResult", "CacheSettings", "run_cache_rebuild"]

NAME = "cache-rebuild"
LOCK_NAME = "cache-rebuild:report"
STOP_GRACE = 10.0


@dataclass(frozen=True)
class CacheSettings:
    workers: int = 8
    rebuild_seconds: float = 0.5
    locked: bool = True
    seconds: float = 60.0


@dataclass(frozen=True)
class CachePlan:
    """What one process needs; it crosses the process boundary, so plain data only."""

    keys: RunKeys
    locked: bool
    rebuild_seconds: float
    seconds: float

    @property
    def cache(self) -> str:
        return self.keys.key("cache")

    @property
    def source_calls(self) -> str:
        return self.keys.key("source_calls")


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


def fetch(plan: CachePlan, worker: Worker) -> dict[str, Any]:
    """One process that needs the value: double-checked under the lock, or racing without.

    ``served_at`` is when the process had the value, before its client is closed (closing
    stops the client's workers, which is no part of the wait).
    """
    began = time.monotonic()
    value = worker.client.get(plan.cache)
    if value is not None:
        role, served_at = "read", time.monotonic()
    elif not plan.locked:
        role, value = "rebuilt", _rebuild(plan, worker)
        served_at = time.monotonic()
    else:
        with Locks(worker.client, prefix=plan.keys.lock_prefix) as locks:
            role, value = _fetch_locked(plan, worker, locks)
            served_at = time.monotonic()
    worker.emit({"role": role})
    return {
        "role": role,
        "value": _text(value),
        "waited_s": round(served_at - began, 4),
        "served_at": served_at,
    }


def _fetch_locked(plan: CachePlan, worker: Worker, locks: Locks) -> tuple[str, bytes | str]:
    """Lock, check the cache again, rebuild only if it is still missing."""
    with locks.lock(LOCK_NAME, timeout=plan.seconds):
        value = worker.client.get(plan.cache)
        if value is None:
            return "rebuilt", _rebuild(plan, worker)
        return "read", value


def _rebuild(plan: CachePlan, worker: Worker) -> bytes:
    """The slow source: counted in Redis, so the parent sees every call from every process."""
    worker.client.incr(plan.source_calls)
    time.sleep(plan.rebuild_seconds)
    value = f"report built by worker {worker.index} (pid {os.getpid()})".encode()
    worker.client.set(plan.cache, value)
    return value


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def run_cache_rebuild(
    url: str, settings: CacheSettings, on_progress: display.ProgressUpdate = lambda done: None
) -> CacheResult:
    """Miss the cache from every process at once; count the source calls; clean up."""
    keys = RunKeys.fresh(NAME)
    plan = CachePlan(keys, settings.locked, settings.rebuild_seconds, settings.seconds)
    served = 0

    def on_event(event: Event) -> None:
        nonlocal served
        served += 1
        on_progress(served)

    client = redis.Redis.from_url(url)
    try:
        crew = run_crew(
            url,
            NAME,
            [(fetch, plan)] * settings.workers,
            limit=settings.seconds + settings.rebuild_seconds + STOP_GRACE,
            on_event=on_event,
        )
        source_calls = int(client.get(plan.source_calls) or 0)
    finally:
        remove_keys(client, keys.pattern)
        client.close()
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


def _configure(parser: argparse.ArgumentParser) -> None:
    defaults = CacheSettings()
    parser.add_argument(
        "--workers",
        type=worker_count,
        default=defaults.workers,
        metavar="N",
        help=f"processes missing the cache at once, at most {MAX_WORKERS} (default: %(default)s)",
    )
    parser.add_argument(
        "--rebuild-seconds",
        type=non_negative_float,
        default=defaults.rebuild_seconds,
        metavar="S",
        help="how long the slow source takes (default: %(default)s)",
    )
    parser.add_argument(
        "--no-lock",
        dest="locked",
        action="store_false",
        help="rebuild without the lock, to see the stampede on the source",
    )
    parser.add_argument(
        "--seconds",
        type=positive_float,
        default=defaults.seconds,
        metavar="S",
        help="longest a process waits for the lock (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the figures instead of the table",
    )


def _run(args: argparse.Namespace) -> int:
    settings = CacheSettings(
        workers=args.workers,
        rebuild_seconds=args.rebuild_seconds,
        locked=args.locked,
        seconds=args.seconds,
    )
    with (
        reachable_server(args.url) as url,
        display.progress("served", settings.workers, enabled=not args.json) as update,
    ):
        result = run_cache_rebuild(url, settings, update)
    violation = (
        f"the source was called {result.source_calls} times with the lock on"
        if (result.locked and result.source_calls != 1)
        else None
    )
    return finish(result, args.json, _show, violation)


def _show(result: CacheResult) -> None:
    rows = [
        ("lock", "on" if result.locked else "off"),
        ("workers", str(result.workers)),
        ("source calls", str(result.source_calls)),
        ("rebuilders", str(result.rebuilders)),
        ("readers", str(result.readers)),
        ("distinct values", str(result.distinct_values)),
        ("longest wait", f"{result.longest_wait_s:.3f} s"),
        ("seconds", f"{result.seconds:.3f}"),
    ]
    display.summary_table("cache rebuild", rows)
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


DEMO = Demo(
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
    configure=_configure,
    run=_run,
)
