"""The console's tables of a result object, and the JSON line (``run.py`` prints them).

The row labels name each figure as the JSON does; the page's own tables are in
``doc_results.py``, ``doc_claims.py`` and ``targets.py``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from peers import LIBRARIES
from report import BASE_LEASES, BASE_WORKERS, FLASH_KEYS, counts_in, numbered

CYCLE_ROWS = (
    ("rtt_us", "EVALSHA round trip (µs)"),
    ("cycle_us", "uncontended cycle (µs)"),
    ("cycle_rtt", "  x RTT (target ≤ 2.2)"),
    ("cycle_cpu_us", "  client CPU per cycle (µs)"),
    ("ttl10_cycle_rtt", "  x RTT with ttl=10, no renewal"),
    ("cycle_client_commands", "  client commands / cycle"),
    ("cycle_server_commands", "  server commands / cycle"),
    ("leftover_keys", "  keys left after all cycles"),
)
CONTENDED_ROWS = (
    ("handoff_p50_us", "handoff p50 (µs)"),
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
)
RENEWAL_ROWS = (
    ("renew_threads", "renewal threads"),
    ("renew_cpu_pct", "  CPU % of one core"),
    ("renew_lost", "  leases lost"),
)
ASYNC_ROWS = (
    ("async_cycle_us", "asyncio cycle (µs)"),
    ("async_ratio", "  asyncio / sync (target ≤ 1.3)"),
)
FAMILY_ROWS = (
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
    ("server_bytes_per_held_lock", "server memory per held lock, bytes (target ≤ 250)"),
    ("server_keys_per_held_lock", "  keys per held lock"),
    ("server_bytes_per_recent_release", "  bytes a release keeps for the retry window"),
    ("keys_left_per_1000_names", "keys left per 1,000 released names"),
    ("keys_at_release_per_1000_names", "  right after the releases"),
    ("keys_left_names", "  names locked once and released"),
    ("keys_left_wait_s", "  counted after waiting (s)"),
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


def rows(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The table's rows for what this result holds: one block per worker and lease count."""
    out = list(CYCLE_ROWS)
    for workers in counts_in(result, "contended"):
        for index, (key, label) in enumerate(CONTENDED_ROWS):
            text = f"{workers} workers: {label}" if index == 0 else label
            out.append((numbered(key, workers, BASE_WORKERS), text))
    for count in counts_in(result, "renewal_by_leases"):
        for index, (key, label) in enumerate(RENEWAL_ROWS):
            text = f"{label}, {count:,} leases" if index == 0 else label
            out.append((numbered(key, count, BASE_LEASES), text))
    return out + list(ASYNC_ROWS) + list(FAMILY_ROWS)


def columns(result: dict[str, Any]) -> list[str]:
    return [*LIBRARIES, "aioredlock"] if "aioredlock" in result else list(LIBRARIES)


def table(result: dict[str, Any]) -> Table:
    out = Table(title="redlease vs peers (medians over reps; same server, same run)")
    out.add_column("metric")
    names = columns(result)
    for library in names:
        out.add_column(library, justify="right")
    for key, label in rows(result):
        cells = [_cell(result.get(library, {}), key) for library in names]
        if any(cells):
            out.add_row(label, *cells)
    return out


def claims_tables(result: dict[str, Any]) -> list[Table]:
    """The flash sale, segments and coordination figures, one small table each."""
    claimed = result.get("claims", {})
    specs = (
        ("flash_sale", "flash sale, per approach", FLASH_COLUMNS),
        ("segments", "flash sale with redlease, per segment count", SEGMENT_COLUMNS),
        ("coordination", "coordination systems: one lock cycle and handoff", COORD_COLUMNS),
    )
    tables = []
    for name, title, keys in specs:
        if not claimed.get(name):
            continue
        out = Table(title=title)
        out.add_column(name.split("_")[0])
        for key in keys:
            out.add_column(key, justify="right")
        for row, figures in claimed[name].items():
            out.add_row(str(row), *[_cell(figures, key) for key in keys])
        tables.append(out)
    return tables


FLASH_COLUMNS = (*FLASH_KEYS, "retries", "errors")
SEGMENT_COLUMNS = ("buys_per_s", "sold", "oversold")
COORD_COLUMNS = ("cycle_us", "handoff_p50_us", "handoff_p99_us", "acquisitions_per_s")


def targets_table(checks: dict[str, dict[str, Any]]) -> Table:
    """The ``targets`` object: each target, what this run measured, met or not."""
    out = Table(title="targets (ratios within this run)")
    for name in ("target", "measured", "met?"):
        out.add_column(name)
    styles = {True: "[green]met[/green]", False: "[red]not met[/red]", None: "not measured"}
    for check in checks.values():
        out.add_row(check["target"], check["measured"], styles[check["met"]])
    return out


def show(result: dict[str, Any], as_json: bool) -> None:
    console = Console(width=None if sys.stdout.isatty() else 110)
    console.print(table(result))
    for extra in claims_tables(result):
        console.print(extra)
    errors = {
        f"{library} {count} workers": workers["errors"]
        for library in LIBRARIES
        for count, workers in result[library].get("contended", {}).items()
        if workers["errors"]
    }
    for key in ("fair_errors", "rw_errors"):
        if result["redlease"].get(key):
            errors[key] = result["redlease"][key]
    if errors:
        console.print(f"[red]errors:[/red] {errors}")
    if result.get("skipped"):
        console.print(f"[yellow]skipped:[/yellow] {result['skipped']}")
    console.print(targets_table(result.get("targets", {})))
    if as_json:
        print(json.dumps(result, separators=(",", ":")), flush=True)
