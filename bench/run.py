"""redlease against redis-py Lock, python-redis-lock and pottery, in one run.

    python bench/run.py [--quick] [--json] [--save FILE] [--no-docs] [PART ...]
    python bench/run.py --docs-only

Parts: rtt, cycle, handoff, renewal, async (redlease against the peers), the redlease-only
fair, rw, semaphore, redlock, cluster, footprint, and the claims parts flash and
coordination (default: all). A private Valkey/Redis is started unless REDIS_URL is set (redlock,
cluster and coordination always start private servers of their own); only loopback
traffic. Progress goes to stderr, the table to stdout and, with --json, one JSON object
on the last stdout line; the table of the performance targets (``targets.py``) comes
last. Unless --no-docs, the run's parts are merged into
bench/results/latest.json and docs/benchmarks.md and its plots are generated from that
file (--docs-only regenerates them without measuring).
See docs/benchmarks.md for what each figure means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from parts import Context, PartSkipped, run_part, steps
from plan import FULL, QUICK, Plan

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
    "footprint",
    "flash",
    "coordination",
)
CLAIMS_PARTS = ("flash", "coordination")
DOCS_DIR = Path(__file__).resolve().parent.parent / "docs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="*", choices=[*PARTS, []], metavar="PART")
    parser.add_argument("--quick", action="store_true", help="a smaller run (about 6 min)")
    parser.add_argument("--json", action="store_true", help="print the JSON object last")
    parser.add_argument("--save", type=Path, help="also write the JSON object to this file")
    parser.add_argument("--no-docs", action="store_true", help="write no results, doc or plots")
    parser.add_argument(
        "--docs-only", action="store_true", help="regenerate the doc and plots from the results"
    )
    parser.add_argument("--results", type=Path, help="kept results (bench/results/latest.json)")
    parser.add_argument("--docs-dir", type=Path, default=DOCS_DIR, help="where the doc goes")
    parser.add_argument(
        "--retry-window",
        type=float,
        metavar="S",
        help="footprint: seconds a release can be retried, waited out before the keys left "
        f"are counted (default {FULL.retry_window_s:g}: the release latch's lifetime today)",
    )
    args = parser.parse_args(argv)
    from store import DEFAULT_PATH  # noqa: PLC0415

    args.results = args.results or DEFAULT_PATH
    if args.docs_only:
        return _write_docs(args, None)
    parts = tuple(args.parts) or PARTS
    if "cycle" in parts and "rtt" in parts:
        parts = tuple(part for part in parts if part != "rtt")  # cycle takes the references
    plan = QUICK if args.quick else FULL
    if args.retry_window is not None:
        if not 0 <= args.retry_window <= 3600:
            parser.error("--retry-window takes 0 to 3600 seconds")
        plan = replace(plan, retry_window_s=args.retry_window)

    from redlease.server import EmbeddedServer, resolve_url  # noqa: PLC0415

    url = resolve_url()
    if url is not None:
        return _run(url, "external (REDIS_URL)", parts, plan, args)
    with EmbeddedServer() as server:
        return _run(server.url, f"private {server.info.binary}", parts, plan, args)


def _run(url: str, where: str, parts: tuple[str, ...], plan: Plan, args: Any) -> int:
    import redis  # noqa: PLC0415

    from console import show  # noqa: PLC0415
    from report import assemble  # noqa: PLC0415
    from stats import rounded  # noqa: PLC0415

    admin = redis.Redis.from_url(url)
    meta = _meta(admin, where, parts, plan)
    _clean(admin)
    records, failed = _measure(url, admin, parts, plan, meta)
    admin.close()
    records = rounded(records)  # type: ignore[assignment]
    result = assemble(records, meta)
    if args.save:
        args.save.write_text(json.dumps(result, indent=1) + "\n")
    status = 0 if not failed else 1
    if not args.no_docs:
        from store import load, merge, save  # noqa: PLC0415

        kept = merge(load(args.results), meta["date"], meta, records)
        save(args.results, kept)
        status = max(status, _write_docs(args, [p for p, r in records.items() if "data" in r]))
    show(result, args.json)
    return status


def _measure(
    url: str, admin: Any, parts: tuple[str, ...], plan: Plan, meta: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """Run each part under the progress bar; a part that fails is recorded, not raised."""
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import Progress  # noqa: PLC0415

    from stats import StealProbe  # noqa: PLC0415

    counts = steps(plan, parts)
    records: dict[str, Any] = {}
    failed: list[str] = []
    console = Console(stderr=True)
    with Progress(console=console, transient=False) as progress:
        bar = progress.add_task("starting", total=sum(counts.values()))
        done = 0
        ctx = Context(
            url,
            admin,
            plan,
            lambda text: progress.update(bar, description=text),
            lambda: progress.advance(bar),
        )
        for part in parts:
            ctx.label(part)
            steal, started = StealProbe(), time.monotonic()
            try:
                record: dict[str, Any] = {"data": run_part(ctx, part)}
            except PartSkipped as exc:
                record = {"skipped": str(exc)}
            except Exception as exc:  # one broken part must not lose the others' figures
                record = {"skipped": f"failed: {type(exc).__name__}: {exc}"}
                if part not in CLAIMS_PARTS:
                    failed.append(part)
                console.print(f"[red]{part} failed[/red]\n{traceback.format_exc()}")
            record["seconds"] = round(time.monotonic() - started, 1)
            record["steal_pct"] = steal.percent()
            records[part] = record
            meta["part_seconds"][part] = record["seconds"]
            meta["part_steal_pct"][part] = record["steal_pct"]
            done += counts[part]
            progress.update(bar, completed=done)
            _clean(admin)
    return records, failed


def _meta(admin: Any, where: str, parts: tuple[str, ...], plan: Plan) -> dict[str, Any]:
    from peers import versions  # noqa: PLC0415

    server = admin.info("server")
    return {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "quick": plan.quick,
        "parts": list(parts),
        "plan": asdict(plan),
        "server": {
            "where": where,
            "version": server.get("valkey_version") or server.get("redis_version"),
            "redis_version": server.get("redis_version"),
            "maxclients": admin.config_get("maxclients").get("maxclients"),
        },
        "machine": _machine(),
        "versions": versions(),
        "part_seconds": {},
        "part_steal_pct": {},
    }


def _write_docs(args: Any, plotted_parts: list[str] | None) -> int:
    """Generate the doc and plots from the kept results (``None``: every part's plots)."""
    from docgen import write_docs  # noqa: PLC0415
    from store import load  # noqa: PLC0415

    kept = load(args.results)
    if not kept["parts"]:
        print(f"no kept results in {args.results}; run the benchmark first", file=sys.stderr)
        return 1
    written = write_docs(kept, args.docs_dir, plotted_parts)
    print(f"wrote {', '.join(str(path) for path in written)}", file=sys.stderr)
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
