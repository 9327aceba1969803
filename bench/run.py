"""redlease against redis-py Lock, python-redis-lock and pottery Redlock, in one run.

    python bench/run.py [--quick] [--json] [--save FILE] [PART ...]

Parts: rtt, cycle, handoff, renewal, async, and the redlease-only fair, rw, semaphore,
redlock, cluster (default: all). A private Valkey/Redis is started unless REDIS_URL is
set (redlock and cluster always start private servers of their own); only loopback
traffic. Progress goes to stderr, the table to stdout and, with --json, one JSON object
on the last stdout line.
See docs/benchmarks.md for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

PARTS = (
    "rtt",
    "cycle",
    "handoff",
    "renewal",
    "async",
    "fair",
    "rw",
    "semaphore",
    "redlock",
    "cluster",
)


@dataclass(frozen=True)
class Plan:
    reps: int  # rtt and cycle reps (libraries rotated per rep)
    rtt_ops: int
    cycles: int
    budget_s: float  # time cap of any one timed block
    handoff_reps: int
    handoff_s: float
    worker_counts: tuple[int, ...]
    renew_locks: int
    renew_ttl_s: int
    renew_hold_s: float
    async_reps: int
    async_cycles: int
    family_workers: int  # fair and rw: worker processes per run
    family_reps: int  # fair and rw: reps of each of the two sessions compared
    family_s: float
    # semaphore, redlock and cluster reuse reps, rtt_ops, cycles and budget_s


FULL = Plan(
    reps=7,
    rtt_ops=2000,
    cycles=2000,
    budget_s=8.0,
    handoff_reps=3,
    handoff_s=6.0,
    worker_counts=(4, 8),
    renew_locks=10_000,
    renew_ttl_s=3,
    renew_hold_s=10.0,
    async_reps=7,
    async_cycles=2000,
    family_workers=8,
    family_reps=3,
    family_s=6.0,
)
QUICK = Plan(
    reps=3,
    rtt_ops=500,
    cycles=400,
    budget_s=3.0,
    handoff_reps=2,
    handoff_s=2.5,
    worker_counts=(4, 8),
    renew_locks=2_000,
    renew_ttl_s=3,
    renew_hold_s=5.0,
    async_reps=3,
    async_cycles=400,
    family_workers=8,
    family_reps=2,
    family_s=2.5,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="*", choices=[*PARTS, []], metavar="PART")
    parser.add_argument("--quick", action="store_true", help="a smaller run (about 3 min)")
    parser.add_argument("--json", action="store_true", help="print the JSON object last")
    parser.add_argument("--save", type=Path, help="also write the JSON object to this file")
    args = parser.parse_args(argv)
    parts = tuple(args.parts) or PARTS
    plan = QUICK if args.quick else FULL

    from redlease.server import EmbeddedServer, resolve_url  # noqa: PLC0415

    url = resolve_url()
    if url is not None:
        return _run(url, "external (REDIS_URL)", parts, plan, args)
    with EmbeddedServer() as server:
        return _run(server.url, f"private {server.info.binary}", parts, plan, args)


def _run(url: str, where: str, parts: tuple[str, ...], plan: Plan, args: Any) -> int:
    import redis  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import Progress  # noqa: PLC0415

    from contended import run_contended  # noqa: PLC0415
    from family import (  # noqa: PLC0415
        FAIR,
        PLAIN,
        READ,
        WRITE,
        contended_pair,
        fair_figures,
        rw_figures,
        semaphore_reps,
    )
    from peers import LIBRARIES, open_session, versions  # noqa: PLC0415
    from renewal import RENEWING_LIBRARIES, run_renewal  # noqa: PLC0415
    from report import assemble, show  # noqa: PLC0415
    from stats import StealProbe  # noqa: PLC0415
    from topologies import cluster_reps, redlock_reps  # noqa: PLC0415
    from uncontended import async_reps, cycle_reps  # noqa: PLC0415

    admin = redis.Redis.from_url(url)
    server = admin.info("server")
    meta: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "parts": list(parts),
        "plan": asdict(plan),
        "server": {
            "where": where,
            "version": server.get("valkey_version") or server.get("redis_version"),
            "redis_version": server.get("redis_version"),
        },
        "machine": _machine(),
        "versions": versions(),
        "part_seconds": {},
        "part_steal_pct": {},
    }
    _clean(admin)
    rtts: list[float] = []
    uncontended: dict[str, dict[str, Any]] = {}
    contended: dict[str, dict[int, list[dict[str, Any]]]] = {}
    renewal: dict[str, dict[str, Any]] = {}
    asynchronous = None
    extras: dict[str, Any] = {}
    wants_cycles = "cycle" in parts
    cycle_sessions = [*LIBRARIES, "redlease-ttl10"] if wants_cycles else list(LIBRARIES)
    wants_reference = wants_cycles or "rtt" in parts
    steps = {
        "cycle": plan.reps * len(cycle_sessions) if wants_reference else 0,
        "handoff": plan.handoff_reps * len(plan.worker_counts) * len(LIBRARIES),
        "renewal": len(RENEWING_LIBRARIES),
        "async": plan.async_reps,
        "fair": 2 * plan.family_reps,
        "rw": 2 * plan.family_reps,
        "semaphore": plan.reps,
        "redlock": plan.reps,
        "cluster": plan.reps,
    }
    total = steps["cycle"] + sum(steps[p] for p in parts if p not in ("rtt", "cycle"))

    with Progress(console=Console(stderr=True), transient=False) as progress:
        bar = progress.add_task("starting", total=total)

        def tick() -> None:
            progress.advance(bar)

        def label(text: str) -> None:
            progress.update(bar, description=text)

        @contextmanager
        def part(name: str, label: str) -> Iterator[None]:
            progress.update(bar, description=label)
            steal, started = StealProbe(), time.monotonic()
            yield
            meta["part_seconds"][name] = round(time.monotonic() - started, 1)
            meta["part_steal_pct"][name] = steal.percent()
            _clean(admin)

        if steps["cycle"]:
            with part("cycle", "round trips and uncontended cycles"):
                sessions = {name: open_session(name, url) for name in cycle_sessions}
                try:
                    rtts, uncontended = cycle_reps(
                        sessions,
                        admin,
                        plan.reps,
                        plan.rtt_ops,
                        plan.cycles,
                        plan.budget_s,
                        wants_cycles,
                        tick,
                    )
                finally:
                    for session in sessions.values():
                        session.close()

        if "handoff" in parts:
            with part("handoff", "contended handoff"):
                for rep in range(plan.handoff_reps):
                    order = LIBRARIES[rep % 4 :] + LIBRARIES[: rep % 4]
                    for workers in plan.worker_counts:
                        for library in order:
                            progress.update(
                                bar, description=f"handoff: {library}, {workers} workers"
                            )
                            run = run_contended(
                                url, library, workers, plan.handoff_s, f"{workers}w{rep}"
                            )
                            contended.setdefault(library, {}).setdefault(workers, []).append(run)
                            rtts.append(run.get("idle_rtt_us") or 0.0)
                            tick()
                rtts = [value for value in rtts if value]

        if "renewal" in parts:
            with part("renewal", "renewal"):
                for library in RENEWING_LIBRARIES:
                    progress.update(bar, description=f"renewal: {library}")
                    renewal[library] = run_renewal(
                        url, library, plan.renew_locks, plan.renew_ttl_s, plan.renew_hold_s
                    )
                    tick()

        if "async" in parts:
            with part("async", "asyncio vs sync cycles"):
                session = open_session("redlease", url)
                try:
                    asynchronous = async_reps(
                        url, session, plan.async_reps, plan.async_cycles, plan.budget_s, tick
                    )
                finally:
                    session.close()

        if "fair" in parts:
            with part("fair", "fair lock handoff"):
                runs = contended_pair(
                    url,
                    (FAIR, PLAIN),
                    plan.family_workers,
                    plan.family_reps,
                    plan.family_s,
                    lambda text: label(f"fair: {text}"),
                    tick,
                )
                extras |= fair_figures(runs, plan.family_workers)

        if "rw" in parts:
            with part("rw", "read-write lock throughput"):
                runs = contended_pair(
                    url,
                    (READ, WRITE),
                    plan.family_workers,
                    plan.family_reps,
                    plan.family_s,
                    lambda text: label(f"rw: {text}"),
                    tick,
                )
                extras |= rw_figures(runs, plan.family_workers)

        if "semaphore" in parts:
            with part("semaphore", "semaphore cycles"):
                extras |= semaphore_reps(
                    url, admin, plan.reps, plan.rtt_ops, plan.cycles, plan.budget_s, tick
                )

        if "redlock" in parts:
            with part("redlock", "redlock over 5 private servers"):
                extras |= redlock_reps(
                    plan.reps, plan.rtt_ops, plan.cycles, plan.budget_s, label, tick
                )

        if "cluster" in parts:
            with part("cluster", "cluster cycles"):
                extras |= cluster_reps(
                    plan.reps, plan.rtt_ops, plan.cycles, plan.budget_s, label, tick
                )

    admin.close()
    result = assemble(meta, rtts, uncontended, contended, renewal, asynchronous, extras)
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")
    show(result, args.json)
    return 0


def _clean(admin: Any) -> None:
    """Delete the benchmark's keys (all contain ``rlbench:``); bounded by count."""
    for _ in range(1000):
        keys = list(admin.scan_iter(match="*rlbench:*", count=1000))[:10_000]
        if not keys:
            return
        admin.delete(*keys)


def _machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


if __name__ == "__main__":
    sys.exit(main())
