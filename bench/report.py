"""Turn the parts' raw figures into the result object (the console and the page show it).

Naming: contended figures for 4 workers use the plain names (``handoff_p50_us``); for any
other worker count the number goes after the first word (``handoff8_p50_us``,
``acquires16_per_s``, ``commands2_per_acquire``, ``client8_commands_per_acquire``,
``longest8_wait_ms``, ``overlaps8``). The full per-rep detail is nested under
``contended`` -> ``"2"``/``"4"``/``"8"``/``"16"``. Renewal works the same way around
10,000 held leases: ``renew_cpu_pct`` for 10,000, ``renew100_cpu_pct`` for 100, with the
detail under ``renewal_by_leases`` -> ``"100"``/``"1000"``/``"10000"``.
"""

from __future__ import annotations

from typing import Any

from peers import LIBRARIES
from stats import ratio, rounded, with_spread
from targets import evaluate

BASE_WORKERS = 4
BASE_LEASES = 10_000
SUMMED = ("overlaps", "counter_mismatch")
HANDOFF_KEYS = (
    "handoff_p50_us",
    "handoff_p99_us",
    "handoff_p50_rtt",
    "handoff_p99_rtt",
    "handoff_p50_loaded_rtt",
    "handoff_p99_loaded_rtt",
)
PER_ACQUIRE_KEYS = (
    "acquires_per_s",
    "commands_per_acquire",
    "client_commands_per_acquire",
    "server_cpu_us_per_acquire",
)
MEDIAN_OF_REPS = (
    *HANDOFF_KEYS,
    *PER_ACQUIRE_KEYS,
    "handoff_share",
    "idle_rtt_us",
    "loaded_rtt_us",
    "wait_p50_ms",
)
FLAT = (
    *HANDOFF_KEYS,
    "loaded_rtt_us",
    *PER_ACQUIRE_KEYS,
    "longest_wait_ms",
    "handoff_share",
    *SUMMED,
)
TTL10_KEYS = ("cycle_us", "cycle_cpu_us", "cycle_rtt", "cycle_rtt_spread", "rtt_us")
RENEWAL_KEYS = ("renew_threads", "renew_cpu_pct", "renew_lost")
ASYNC_KEYS = ("async_cycle_us", "async_ratio")


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
        summary |= with_spread(key, [run.get(key) for run in good])
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
    result: dict[str, Any] = with_spread("rtt_us", rtts)
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
    result["targets"] = evaluate(result)
    result["skipped"] = skipped(parts, data)
    result["meta"] = meta
    return rounded(result)  # type: ignore[return-value]


FAMILY_PARTS = ("fair", "rw", "semaphore", "redlock", "cluster", "footprint")


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


def counts_in(result: dict[str, Any], nested: str) -> list[int]:
    """Worker counts (``contended``) or held-lease counts (``renewal_by_leases``) present."""
    found = {
        int(count) for library in LIBRARIES for count in result.get(library, {}).get(nested, {})
    }
    return sorted(found)
