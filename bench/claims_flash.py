"""The seeds' flash-sale ("seckill") claims, measured side by side on real servers.

    python bench/claims_flash.py [--quick] [--json] [--url REDIS_URL]

Every approach sells the same stock (full: 2,000; quick: 300) to the same number of
buyer processes (full: 8; quick: 4); each buyer buys one unit at a time until it sees
the stock sold out (bounded by a try count and a deadline). See flash_buyer.py for the
purchase each approach makes:

* ``redlease``: a redlease lock around SELECT / check / UPDATE / INSERT on PostgreSQL,
  no FOR UPDATE (the lock is the only protection);
* ``postgres_for_update`` and ``mariadb_for_update``: the same with SELECT ... FOR UPDATE;
* ``optimistic_version``: PostgreSQL, UPDATE ... WHERE version = <read>, retried on 0 rows;
* ``redis_lua``: one EVALSHA that decrements only while stock > 0, then RPUSH the order;
* ``no_lock``: the ``redlease`` purchase without the lock, the baseline that oversells.

``segments`` splits the stock into 1, 2, 4, 8 PostgreSQL rows, each under its own redlease
lock; buyers pick a random segment that still has stock.

Figures come from the stores, not from the buyers' opinion: ``sold`` is the orders
recorded, ``oversold`` the units sold beyond the stock (orders beyond a row's stock, or a
negative stock). ``buys_per_s`` is sold / seconds from the common start until the last
purchase that sold out the stock (or until the buyers stopped, if it never sold out).
Latency is per successful purchase, from its start to its commit, lock included.

Full mode runs every approach and segment count 3 times (the order rotated per rep) and
reports medians, with ``buys_per_s_min``/``buys_per_s_max`` and ``oversold_max`` over the
reps, ``reps`` (the reps that finished), and ``errors`` summed over the reps (a rep that
failed counts as one). A server that does not answer has no entry in ``versions``, and its
approaches are listed in ``skipped`` with the reason. Every run uses private tables
(``rlbench_flash_<random>`` in database ``test``) and Redis keys (``rlbench:flash:<random>``)
and removes them afterwards (``flash_stores.py``).

This module is the runner: the plan, the reps, the buyers' race and the figures; the
stores each approach sells from are in ``flash_stores.py``, the purchases in
``flash_buyer.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import queue
import secrets
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from counting import start_together
from flash_buyer import BuyerSpec, buyer_main
from flash_stores import APPROACHES, STORES, Servers, one_line, probe, split_stock, stocked
from stats import median, percentile, rotated, rounded

log = logging.getLogger("rlbench.flash")

SEGMENT_COUNTS = (1, 2, 4, 8)
LUA = Path(__file__).resolve().parent / "lua" / "flash_decrement.lua"
SPREAD_KEYS = ("buys_per_s_min", "buys_per_s_max", "oversold_max", "reps")


@dataclass(frozen=True)
class Plan:
    stock: int
    buyers: int
    reps: int
    seconds: float  # the deadline of one run

    @property
    def max_tries(self) -> int:
        """Per buyer: enough to buy everything alone, with room for retries and sold-out checks."""
        return 20 * self.stock + 1000


FULL = Plan(stock=2000, buyers=8, reps=3, seconds=60.0)
QUICK = Plan(stock=300, buyers=4, reps=1, seconds=20.0)


class RunFailed(Exception):
    """One run could not finish (a buyer died, did not start, or did not report)."""


def step_count(quick: bool) -> int:
    """How often :func:`measure` calls ``progress`` (skipped steps included)."""
    plan = QUICK if quick else FULL
    return plan.reps * (len(APPROACHES) + len(SEGMENT_COUNTS))


def measure(
    quick: bool,
    progress: Callable[[str], None] | None = None,
    redis_url: str | None = None,
) -> dict[str, Any]:
    """Run every approach and segment count; see the module docstring for the figures.

    ``progress(description)`` is called before each step, :func:`step_count` times in all.
    ``redis_url`` None starts a private embedded server for the Redis-based approaches.
    """
    plan = QUICK if quick else FULL
    announce = progress or (lambda _text: None)
    with ExitStack() as stack:
        servers = probe(stack, redis_url)
        runs: dict[str, list[dict[str, Any]]] = {}
        failures: dict[str, list[str]] = {}
        for rep in range(plan.reps):
            for part in _order(rep):
                reason = servers.reason_to_skip(part.split(":")[0])
                label = f"flash sale: {part.replace(':', ' ')} (rep {rep + 1}/{plan.reps})"
                announce(label + (" skipped" if reason else ""))
                if reason:
                    continue
                try:
                    runs.setdefault(part, []).append(_one_part(part, plan, servers))
                except Exception as exc:
                    log.warning("%s: %s", label, exc)
                    failures.setdefault(part, []).append(one_line(exc))
    return cast(dict[str, Any], rounded(_assemble(servers, runs, failures)))


def _order(rep: int) -> list[str]:
    """The approaches, then the segment counts, each list rotated by the rep (spreads drift)."""
    counts = [f"segments:{count}" for count in SEGMENT_COUNTS]
    return [*rotated(APPROACHES, rep), *rotated(counts, rep)]


def _one_part(part: str, plan: Plan, servers: Servers) -> dict[str, Any]:
    if part.startswith("segments:"):
        return run_sale("segments", plan, servers.redis_url, int(part.split(":")[1]))
    return run_sale(part, plan, servers.redis_url)


def run_sale(approach: str, plan: Plan, redis_url: str | None, segments: int = 1) -> dict[str, Any]:
    """One sale of ``plan.stock`` units to ``plan.buyers`` processes; always cleans up."""
    run_id = secrets.token_hex(4)
    table, prefix = f"rlbench_flash_{run_id}", f"rlbench:flash:{run_id}"
    store = "postgresql" if approach == "segments" else STORES[approach]
    shares = split_stock(plan.stock, segments)
    spec = BuyerSpec(
        approach=approach,
        index=0,
        table=table,
        segments=segments,
        redis_url=redis_url,
        key_prefix=prefix,
        lua=LUA.read_text() if approach == "redis_lua" else "",
        max_tries=plan.max_tries,
        seconds=plan.seconds,
    )
    with stocked(store, table, prefix, shares, redis_url) as count_state:
        begin, reports = _race(spec, plan.buyers)
        orders, final = count_state()
    return _figures(plan, store, shares, orders, final, begin, reports)


def _race(spec: BuyerSpec, buyers: int) -> tuple[float, list[dict[str, Any]]]:
    """Start the buyers, release them at one start time, and collect their reports."""
    context = multiprocessing.get_context("spawn")
    ready, results = context.Queue(), context.Queue()
    go = context.Event()
    start_at = context.Value("d", 0.0)
    processes = [
        context.Process(
            target=buyer_main,
            args=(replace(spec, index=index), ready, go, start_at, results),
            name=f"rlbench-flash-{spec.approach}-{index}",
            daemon=True,
        )
        for index in range(buyers)
    ]
    reports: list[dict[str, Any]] = []
    try:
        reports = start_together(processes, ready, go, start_at, results, spec.seconds)
    except queue.Empty:
        raise RunFailed(f"{spec.approach}: a buyer died or did not finish in time") from None
    finally:
        for process in processes:
            process.join(10.0)
            if process.is_alive():
                process.terminate()
                process.join(5.0)
    fatal = [f"buyer {r['index']}: {r['fatal']}" for r in reports if "fatal" in r]
    if fatal:
        raise RunFailed(f"{spec.approach}: " + "; ".join(fatal))
    for report in reports:
        if report["first_error"]:
            who = f"{spec.approach} buyer {report['index']}: {report['errors']} errors"
            log.warning("%s, the first: %s", who, report["first_error"])
    return start_at.value, reports


def _figures(
    plan: Plan,
    store: str,
    shares: list[int],
    orders: list[int],
    final: list[int],
    begin: float,
    reports: list[dict[str, Any]],
) -> dict[str, Any]:
    """One run's figures from the store's state after the run and the buyers' logs."""
    sold = sum(orders)
    beyond = sum(
        max(done - share, -left, 0) for done, share, left in zip(orders, shares, final, strict=True)
    )
    sold_out = all(report["sold_out"] for report in reports)
    last_buys = [r["last_buy_at"] for r in reports if r["last_buy_at"] is not None]
    end = max(last_buys) if sold_out and last_buys else max(r["finished_at"] for r in reports)
    seconds = max(end - begin, 1e-9)
    latencies = [value for report in reports for value in report["latencies_us"]]
    return {
        "sold": sold,
        "oversold": max(beyond, sold - plan.stock, 0),
        "stock": plan.stock,
        "buyers": plan.buyers,
        "seconds": seconds,
        "buys_per_s": sold / seconds,
        "latency_p50_us": percentile(latencies, 0.5),
        "latency_p99_us": percentile(latencies, 0.99),
        "retries": sum(report["retries"] for report in reports),
        "errors": sum(report["errors"] for report in reports),
        "store": store,
    }


def _assemble(
    servers: Servers,
    runs: dict[str, list[dict[str, Any]]],
    failures: dict[str, list[str]],
) -> dict[str, Any]:
    flash: dict[str, Any] = {}
    segments: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for part in [*APPROACHES, *(f"segments:{count}" for count in SEGMENT_COUNTS)]:
        name = part.split(":")[0]
        reason = servers.reason_to_skip(name)
        if reason:
            skipped[name] = reason
            continue
        done, failed = runs.get(part, []), failures.get(part, [])
        if not done:
            skipped[part] = "every rep failed: " + "; ".join(failed)
            continue
        summary = _summary(done, len(failed))
        if name == "segments":
            keys = ("buys_per_s", "sold", "oversold", "seconds", *SPREAD_KEYS, "errors")
            segments[part.split(":")[1]] = {key: summary[key] for key in keys}
        else:
            flash[part] = summary
    return {
        "flash_sale": flash,
        "segments": segments,
        "versions": servers.versions,
        "skipped": skipped,
    }


def _summary(runs: list[dict[str, Any]], failed: int) -> dict[str, Any]:
    """Medians over the reps; the spread of buys_per_s; errors summed, failed reps included."""

    def middle(key: str) -> Any:
        return median([run[key] for run in runs])

    rates = [run["buys_per_s"] for run in runs]
    return {
        "sold": round(middle("sold")),
        "oversold": round(middle("oversold")),
        "stock": runs[0]["stock"],
        "buyers": runs[0]["buyers"],
        "seconds": float(middle("seconds")),
        "buys_per_s": float(middle("buys_per_s")),
        "latency_p50_us": middle("latency_p50_us"),
        "latency_p99_us": middle("latency_p99_us"),
        "retries": round(middle("retries")),
        "errors": sum(run["errors"] for run in runs) + failed,
        "store": runs[0]["store"],
        "buys_per_s_min": min(rates),
        "buys_per_s_max": max(rates),
        "oversold_max": max(run["oversold"] for run in runs),
        "reps": len(runs),
    }


def show(result: dict[str, Any]) -> None:
    """Print the figures as two small plain-text tables."""
    header = (
        f"{'approach':<20} {'store':<10} {'sold':>5} {'over':>5} {'s':>7} {'buys/s':>8}"
        f" {'min':>8} {'max':>8} {'p50 µs':>8} {'p99 µs':>9} {'retries':>7} {'errors':>6}"
    )
    print(header)
    for name, row in result["flash_sale"].items():
        print(
            f"{name:<20} {row['store']:<10} {row['sold']:>5} {row['oversold']:>5}"
            f" {row['seconds']:>7.3f} {row['buys_per_s']:>8.0f} {row['buys_per_s_min']:>8.0f}"
            f" {row['buys_per_s_max']:>8.0f} {_number(row['latency_p50_us']):>8}"
            f" {_number(row['latency_p99_us']):>9} {row['retries']:>7} {row['errors']:>6}"
        )
    print(f"\n{'segments':<9} {'sold':>5} {'over':>5} {'s':>7} {'buys/s':>8} {'min':>8} {'max':>8}")
    for count, row in result["segments"].items():
        print(
            f"{count:<9} {row['sold']:>5} {row['oversold']:>5} {row['seconds']:>7.3f}"
            f" {row['buys_per_s']:>8.0f} {row['buys_per_s_min']:>8.0f}"
            f" {row['buys_per_s_max']:>8.0f}"
        )
    for name, version in result["versions"].items():
        print(f"{name}: {version}")
    for name, reason in result["skipped"].items():
        print(f"skipped {name}: {reason}")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="300 units, 4 buyers, 1 rep")
    parser.add_argument("--json", action="store_true", help="print the JSON object last")
    where = "Redis for the locks and redis_lua (default: REDIS_URL, else a private server)"
    parser.add_argument("--url", help=where)
    args = parser.parse_args(argv)
    from redlease.server import resolve_url  # noqa: PLC0415

    total, done = step_count(args.quick), 0

    def progress(text: str) -> None:
        nonlocal done
        done += 1
        print(f"[{done}/{total}] {text}", file=sys.stderr, flush=True)

    started = time.monotonic()
    result = measure(args.quick, progress, resolve_url(args.url))
    print(f"took {time.monotonic() - started:.1f} s", file=sys.stderr)
    show(result)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
