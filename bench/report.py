"""Turn per-rep raw figures into the result object, the table, and the JSON line.

Naming: contended figures for 4 workers use the plain names (``handoff_p50_us``); for 8
workers the number goes after the first word (``handoff8_p50_us``, ``acquires8_per_s``,
``commands8_per_acquire``, ``client8_commands_per_acquire``, ``longest8_wait_ms``,
``overlaps8``). The full per-rep detail is nested under ``contended`` -> ``"4"``/``"8"``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from peers import LIBRARIES
from stats import median, ratio, rounded, spread

BASE_WORKERS = 4
SUMMED = ("overlaps", "counter_mismatch")
MEDIAN_OF_REPS = (
    "handoff_p50_us",
    "handoff_p99_us",
    "handoff_p50_rtt",
    "handoff_p99_rtt",
    "handoff_p50_loaded_rtt",
    "handoff_p99_loaded_rtt",
    "acquires_per_s",
    "commands_per_acquire",
    "client_commands_per_acquire",
    "handoff_share",
    "idle_rtt_us",
    "loaded_rtt_us",
    "wait_p50_ms",
)
FLAT = (
    "handoff_p50_us",
    "handoff_p99_us",
    "handoff_p50_rtt",
    "handoff_p99_rtt",
    "handoff_p50_loaded_rtt",
    "handoff_p99_loaded_rtt",
    "loaded_rtt_us",
    "acquires_per_s",
    "commands_per_acquire",
    "client_commands_per_acquire",
    "longest_wait_ms",
    "handoff_share",
    "overlaps",
    "counter_mismatch",
)
TTL10_KEYS = ("cycle_us", "cycle_cpu_us", "cycle_rtt", "cycle_rtt_spread", "rtt_us")
RENEWAL_KEYS = ("renew_threads", "renew_cpu_pct", "renew_lost")
ASYNC_KEYS = ("async_cycle_us", "async_ratio")


def for_workers(key: str, workers: int) -> str:
    """``handoff_p50_us`` for 4 workers, ``handoff8_p50_us`` for 8 (see the module doc)."""
    if workers == BASE_WORKERS:
        return key
    first, _, rest = key.partition("_")
    return f"{first}{workers}_{rest}" if rest else f"{first}{workers}"


def summarise_contended(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median (and range) over reps of one library and worker count."""
    good = [run for run in runs if "error" not in run]
    for run in good:
        run["handoff_p50_rtt"] = ratio(run["handoff_p50_us"], run["idle_rtt_us"])
        run["handoff_p99_rtt"] = ratio(run["handoff_p99_us"], run["idle_rtt_us"])
        run["handoff_p50_loaded_rtt"] = ratio(run["handoff_p50_us"], run["loaded_rtt_us"])
        run["handoff_p99_loaded_rtt"] = ratio(run["handoff_p99_us"], run["loaded_rtt_us"])
    summary: dict[str, Any] = {"reps": len(good)}
    for key in MEDIAN_OF_REPS:
        values = [run.get(key) for run in good]
        summary[key] = median(values)
        summary[f"{key}_spread"] = spread(values)
    longest = [run["longest_wait_ms"] for run in good if run["longest_wait_ms"] is not None]
    summary["longest_wait_ms"] = max(longest) if longest else None
    summary["longest_wait_ms_per_rep"] = longest
    for key in SUMMED:
        summary[key] = sum(run[key] for run in good)
    summary["acquisitions_per_rep"] = [run["acquisitions"] for run in good]
    summary["per_worker_min_max"] = [[run["per_worker_min"], run["per_worker_max"]] for run in good]
    summary["server_commands_last_rep"] = good[-1]["server_commands"] if good else None
    summary["client_commands_last_rep"] = good[-1]["client_commands"] if good else None
    summary["errors"] = [e for run in runs for e in run.get("errors", [])] + [
        run["error"] for run in runs if "error" in run
    ]
    return summary


def assemble(
    meta: dict[str, Any],
    rtts: list[float],
    uncontended: dict[str, dict[str, Any]],
    contended: dict[str, dict[int, list[dict[str, Any]]]],
    renewal: dict[str, dict[str, Any]],
    asynchronous: dict[str, Any] | None,
    extras: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``extras``: figures of the redlease-only parts, merged flat into the redlease row."""
    result: dict[str, Any] = {"rtt_us": median(rtts), "rtt_us_spread": spread(rtts)}
    for library in LIBRARIES:
        entry: dict[str, Any] = {"rtt_us": result["rtt_us"]}
        entry |= uncontended.get(library, {})
        if library == "redlease" and "redlease-ttl10" in uncontended:
            fixed = uncontended["redlease-ttl10"]
            entry |= {f"ttl10_{key}": fixed.get(key) for key in TTL10_KEYS}
        nested = {}
        for workers, runs in sorted(contended.get(library, {}).items()):
            summary = summarise_contended(runs)
            nested[str(workers)] = summary
            for key in FLAT:
                entry[for_workers(key, workers)] = summary.get(key)
        if nested:
            entry["contended"] = nested
        if renewal:
            figures = renewal.get(library)
            for key in RENEWAL_KEYS:
                entry[key] = None if figures is None else figures.get(key)
            if figures:
                entry["renewal"] = figures
            big_pool = renewal.get(f"{library}:big-pool")
            if big_pool:
                entry["renewal_big_pool"] = big_pool
        if asynchronous is not None:
            for key in ASYNC_KEYS:
                entry[key] = asynchronous.get(key) if library == "redlease" else None
            if library == "redlease":
                entry["async"] = asynchronous
        if library == "redlease" and extras:
            entry |= extras
        result[library] = entry
    result["meta"] = meta
    return rounded(result)  # type: ignore[return-value]


ROWS = (
    ("rtt_us", "EVALSHA round trip (µs)"),
    ("cycle_us", "uncontended cycle (µs)"),
    ("cycle_rtt", "  x RTT (target ≤ 2.2)"),
    ("cycle_cpu_us", "  client CPU per cycle (µs)"),
    ("ttl10_cycle_rtt", "  x RTT with ttl=10, no renewal"),
    ("cycle_client_commands", "  client commands / cycle"),
    ("cycle_server_commands", "  server commands / cycle"),
    ("leftover_keys", "  keys left after all cycles"),
    ("handoff_p50_us", "4 workers: handoff p50 (µs)"),
    ("handoff_p99_us", "  handoff p99 (µs)"),
    ("handoff_p50_rtt", "  handoff p50 x RTT"),
    ("handoff_p99_rtt", "  handoff p99 x RTT"),
    ("loaded_rtt_us", "  RTT under this load (µs)"),
    ("handoff_p50_loaded_rtt", "  handoff p50 x loaded RTT"),
    ("handoff_share", "  share handed to another process"),
    ("acquires_per_s", "  acquisitions / s"),
    ("client_commands_per_acquire", "  client commands / acquisition"),
    ("commands_per_acquire", "  server commands / acquisition"),
    ("longest_wait_ms", "  longest wait (ms)"),
    ("overlaps", "  overlaps / counter mismatch"),
    ("handoff8_p50_us", "8 workers: handoff p50 (µs)"),
    ("handoff8_p99_us", "  handoff p99 (µs)"),
    ("handoff8_p50_rtt", "  handoff p50 x RTT"),
    ("handoff8_p99_rtt", "  handoff p99 x RTT"),
    ("loaded8_rtt_us", "  RTT under this load (µs)"),
    ("handoff8_p50_loaded_rtt", "  handoff p50 x loaded RTT"),
    ("handoff8_share", "  share handed to another process"),
    ("acquires8_per_s", "  acquisitions / s"),
    ("client8_commands_per_acquire", "  client commands / acquisition"),
    ("commands8_per_acquire", "  server commands / acquisition"),
    ("longest8_wait_ms", "  longest wait (ms)"),
    ("overlaps8", "  overlaps / counter mismatch"),
    ("renew_threads", "renewal: threads"),
    ("renew_cpu_pct", "  CPU % of one core"),
    ("renew_lost", "  leases lost"),
    ("async_cycle_us", "asyncio cycle (µs)"),
    ("async_ratio", "  asyncio / sync (target ≤ 1.3)"),
    ("fair_handoff_p50_us", "fair lock, 8 workers: handoff p50 (µs)"),
    ("fair_handoff_p99_us", "  handoff p99 (µs)"),
    ("fair_handoff_p50_rtt", "  handoff p50 x RTT (target ≤ 1.5)"),
    ("fair_handoff_p99_rtt", "  handoff p99 x RTT"),
    ("fair_loaded_rtt_us", "  RTT under this load (µs)"),
    ("fair_handoff_p50_loaded_rtt", "  handoff p50 x loaded RTT"),
    ("fair_handoff_share", "  share handed to another process"),
    ("fair_acquires_per_s", "  acquisitions / s"),
    ("fair_longest_wait_ms", "  longest wait (ms)"),
    ("fair_overlaps", "  overlaps / counter mismatch"),
    ("plain_handoff_p50_us", "  plain lock, same part: handoff p50 (µs)"),
    ("plain_handoff_p50_rtt", "  plain lock: handoff p50 x RTT"),
    ("plain_acquires_per_s", "  plain lock: acquisitions / s"),
    ("plain_longest_wait_ms", "  plain lock: longest wait (ms)"),
    ("read_acquires_per_s", "rw lock, 8 readers: acquisitions / s"),
    ("read_overlap_share", "  share of reads overlapping another"),
    ("read_longest_wait_ms", "  longest read wait (ms)"),
    ("write_acquires_per_s", "  8 writers: acquisitions / s"),
    ("write_handoff_p50_us", "  writers: handoff p50 (µs)"),
    ("write_overlaps", "  writers: overlaps / counter mismatch"),
    ("semaphore_cycle_us", "semaphore cycle, 1 of 4 permits (µs)"),
    ("semaphore_cycle_rtt", "  x RTT"),
    ("semaphore_lock_cycle_us", "  plain lock cycle, same part (µs)"),
    ("semaphore_server_commands", "  server commands / cycle"),
    ("redlock_rtt_us", "redlock part: EVALSHA round trip (µs)"),
    ("redlock_single_cycle_us", "  single-master cycle (µs)"),
    ("redlock3_cycle_us", "  Redlock, 3 masters: cycle (µs)"),
    ("redlock3_ratio", "    / single master"),
    ("redlock5_cycle_us", "  Redlock, 5 masters: cycle (µs)"),
    ("redlock5_ratio", "    / single master (target ≤ 1.5)"),
    ("async_redlock5_cycle_us", "  AsyncRedlock, 5 masters: cycle (µs)"),
    ("async_redlock5_ratio", "    / AsyncLocks single master"),
    ("cluster_rtt_us", "cluster: EVALSHA via cluster client (µs)"),
    ("cluster_node_rtt_us", "  EVALSHA, plain client to one node (µs)"),
    ("cluster_cycle_us", "  cluster cycle (µs)"),
    ("cluster_cycle_rtt", "  x cluster RTT"),
)


def _cell(entry: dict[str, Any], key: str) -> str:
    if key not in entry:
        return ""
    value = entry[key]
    if "overlaps" in key:
        mismatch = entry.get(key.replace("overlaps", "counter") + "_mismatch")
        return f"{value} / {mismatch}"
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def table(result: dict[str, Any]) -> Table:
    out = Table(title="redlease vs peers (medians over reps; same server, same run)")
    out.add_column("metric")
    for library in LIBRARIES:
        out.add_column(library, justify="right")
    for key, label in ROWS:
        cells = [_cell(result[library], key) for library in LIBRARIES]
        if any(cells):
            out.add_row(label, *cells)
    return out


def show(result: dict[str, Any], as_json: bool) -> None:
    console = Console(width=None if sys.stdout.isatty() else 110)
    console.print(table(result))
    errors = {
        library: workers["errors"]
        for library in LIBRARIES
        for workers in result[library].get("contended", {}).values()
        if workers["errors"]
    }
    for key in ("fair_errors", "rw_errors"):
        if result["redlease"].get(key):
            errors[key] = result["redlease"][key]
    if errors:
        console.print(f"[red]errors:[/red] {errors}")
    if as_json:
        print(json.dumps(result, separators=(",", ":")), flush=True)
