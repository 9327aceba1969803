"""Turn the parts' raw figures into the result object, the table, and the JSON line.

Naming: contended figures for 4 workers use the plain names (``handoff_p50_us``); for any
other worker count the number goes after the first word (``handoff8_p50_us``,
``acquires16_per_s``, ``commands2_per_acquire``, ``client8_commands_per_acquire``,
``longest8_wait_ms``, ``overlaps8``). The full per-rep detail is nested under
``contended`` -> ``"2"``/``"4"``/``"8"``/``"16"``. Renewal works the same way around
10,000 held leases: ``renew_cpu_pct`` for 10,000, ``renew100_cpu_pct`` for 100, with the
detail under ``renewal_by_leases`` -> ``"100"``/``"1000"``/``"10000"``.
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
BASE_LEASES = 10_000
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


def numbered(key: str, number: int, base: int) -> str:
    """``key`` for the base count, else the count after the first word (module doc)."""
    if number == base:
        return key
    first, _, rest = key.partition("_")
    return f"{first}{number}_{rest}" if rest else f"{first}{number}"


def assemble(parts: dict[str, dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """The result object from the raw figures of each part (``{part: {"data": ...}}``).

    Parts missing from ``parts`` leave their keys out; the redlease-only parts' figures go
    flat into the redlease row; the claims parts go under ``claims``.
    """
    data = {name: part["data"] for name, part in parts.items() if "data" in part}
    rtts = [v for name in ("rtt", "cycle", "handoff") for v in data.get(name, {}).get("rtts", [])]
    result: dict[str, Any] = {"rtt_us": median(rtts), "rtt_us_spread": spread(rtts)}
    uncontended = (data.get("cycle") or data.get("rtt") or {}).get("uncontended", {})
    for library in LIBRARIES:
        entry: dict[str, Any] = {"rtt_us": result["rtt_us"]}
        entry |= uncontended.get(library, {})
        if library == "redlease" and "redlease-ttl10" in uncontended:
            fixed = uncontended["redlease-ttl10"]
            entry |= {f"ttl10_{key}": fixed.get(key) for key in TTL10_KEYS}
        if "handoff" in data:
            entry |= _contended_entry(data["handoff"]["runs"].get(library, {}))
        if "renewal" in data:
            entry |= _renewal_entry(data["renewal"]["leases"], library)
        if "async" in data:
            entry |= _async_entry(data["async"]["libraries"].get(library))
        if library == "redlease":
            for name in FAMILY_PARTS:
                entry |= data.get(name, {}).get("extras", {})
        result[library] = entry
    if "async" in data and "aioredlock" in data["async"]["libraries"]:
        result["aioredlock"] = _async_entry(data["async"]["libraries"]["aioredlock"])
    result["claims"] = claims(data)
    result["skipped"] = skipped(parts, data)
    result["meta"] = meta
    return rounded(result)  # type: ignore[return-value]


FAMILY_PARTS = ("fair", "rw", "semaphore", "redlock", "cluster")


def _contended_entry(by_workers: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    nested = {}
    for workers, runs in sorted(by_workers.items(), key=lambda item: int(item[0])):
        summary = summarise_contended(runs)
        nested[workers] = summary
        for key in FLAT:
            entry[numbered(key, int(workers), BASE_WORKERS)] = summary.get(key)
    if nested:
        entry["contended"] = nested
    return entry


def _renewal_entry(leases: dict[str, dict[str, Any]], library: str) -> dict[str, Any]:
    """Flat ``renew_*`` keys per held-lease count; nested detail per count."""
    entry: dict[str, Any] = {}
    figures = leases.get(library, {})
    counts = sorted({int(count) for runs in leases.values() for count in runs})
    for count in counts:
        found = figures.get(str(count))
        for key in RENEWAL_KEYS:
            entry[numbered(key, count, BASE_LEASES)] = None if found is None else found.get(key)
    if figures:
        entry["renewal_by_leases"] = figures
        if str(BASE_LEASES) in figures:
            entry["renewal"] = figures[str(BASE_LEASES)]
    big_pool = leases.get(f"{library}:big-pool")
    if big_pool:
        entry["renewal_big_pool_by_leases"] = big_pool
        if str(BASE_LEASES) in big_pool:
            entry["renewal_big_pool"] = big_pool[str(BASE_LEASES)]
    return entry


def _async_entry(figures: dict[str, Any] | None) -> dict[str, Any]:
    entry: dict[str, Any] = {
        key: None if figures is None else figures.get(key) for key in ASYNC_KEYS
    }
    if figures:
        entry["async"] = figures
    return entry


FLASH_KEYS = ("sold", "oversold", "buys_per_s", "latency_p50_us", "latency_p99_us")


def claims(data: dict[str, Any]) -> dict[str, Any]:
    """The ``claims`` object: every figure the claims modules gave, as they gave it."""
    out: dict[str, Any] = {}
    flash = data.get("flash")
    if flash:
        out["flash_sale"] = flash.get("flash_sale", {})
        out["segments"] = flash.get("segments", {})
    coordination = data.get("coordination")
    if coordination:
        out["coordination"] = coordination.get("coordination", {})
    return out


def skipped(parts: dict[str, dict[str, Any]], data: dict[str, Any]) -> dict[str, str]:
    """Parts that did not run, and what the parts that ran skipped, with the reason."""
    out: dict[str, str] = {
        name: part["skipped"] for name, part in parts.items() if part.get("skipped")
    }
    for name in ("async", "flash", "coordination"):
        for what, reason in (data.get(name, {}).get("skipped") or {}).items():
            out[str(what)] = str(reason)
    for library, runs in data.get("renewal", {}).get("leases", {}).items():
        for count, figures in runs.items():
            if figures.get("skipped"):
                out[f"renewal {library} {count}"] = figures["skipped"]
    return out


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


def counts_in(result: dict[str, Any], nested: str) -> list[int]:
    """Worker counts (``contended``) or held-lease counts (``renewal_by_leases``) present."""
    found = {
        int(count) for library in LIBRARIES for count in result.get(library, {}).get(nested, {})
    }
    return sorted(found)


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
    if as_json:
        print(json.dumps(result, separators=(",", ":")), flush=True)
