"""The performance targets, read off one result object: what must hold, what was measured,
and met or not.

``evaluate`` gives the ``targets`` object of the JSON: one entry per target of the "fair
and fast" work (the uncontended cycle, contended throughput and waits, commands, asyncio,
Redlock, server memory and keys, the flash sale), each
``{"target", "measured", "value", "limit", "compare", "met"}``, where ``value`` is compared
with ``limit`` by ``compare`` (``"<="`` or ``">="``) and ``met`` is ``None`` when the part
the target needs did not run. Ratios are within one run: both sides come from the same
part, on the same server, in the same minutes. The console (``console.py``) and the page
(``targets_section``) show the same entries as a table; the page adds the earlier
targets of ``standing``.
"""

# ruff: noqa: RUF001, RUF002 - the page shows multiplication signs
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from doc_format import med, num, table
from peers import LIBRARIES

CONTENDED_WAITS = {8: 25.0, 16: 50.0}
"""Worker counts of the contended targets, with the longest wait allowed at each (ms)."""
MAX_HELD_LOCK_BYTES = 250.0
NAMES_IN_TARGET = 100_000
MAX_KEYS_LEFT = 16_384

Entry = dict[str, Any]


def entry(target: str, measured: str, value: float | None, limit: float, compare: str) -> Entry:
    """One target; ``met`` is None when ``value`` is (its part did not run)."""
    met = None
    if value is not None:
        met = value <= limit if compare == "<=" else value >= limit
    return {
        "target": target,
        "measured": measured if value is not None else "n/a",
        "value": value,
        "limit": limit,
        "compare": compare,
        "met": met,
    }


def evaluate(result: dict[str, Any]) -> dict[str, Entry]:
    """The ``targets`` object (see the module doc), in the order of the targets."""
    return dict(_targets(result))


def _ratio(ours: Any, theirs: Any) -> float | None:
    if not isinstance(ours, int | float) or not isinstance(theirs, int | float) or not theirs:
        return None
    return float(ours) / float(theirs)


def _versus(ours: Any, theirs: Any, unit: str, peer: str) -> tuple[str, float | None]:
    """``"441 µs vs redis-py 394 µs: 1.12×"`` and the ratio."""
    value = _ratio(ours, theirs)
    return f"{num(ours)}{unit} vs {peer} {num(theirs)}{unit}: {num(value)}×", value


def _contended(result: dict[str, Any], library: str, workers: int) -> dict[str, Any]:
    return result.get(library, {}).get("contended", {}).get(str(workers)) or {}


def _targets(result: dict[str, Any]) -> Iterator[tuple[str, Entry]]:
    ours, redis_py = result.get("redlease", {}), result.get("redis-py", {})
    yield from _uncontended(ours, redis_py)
    for workers, longest in CONTENDED_WAITS.items():
        yield from _contention(result, workers, longest)
    yield from _commands(ours, result)
    shown, value = _versus(
        ours.get("async_cycle_us"), redis_py.get("async_cycle_us"), " µs", "redis-py"
    )
    yield (
        "async_cycle",
        entry("asyncio cycle ≤ 1.05 × redis-py's asyncio", shown, value, 1.05, "<="),
    )
    for key, flavour in (("redlock5_ratio", "sync"), ("async_redlock5_ratio", "asyncio")):
        value = ours.get(key)
        shown = f"{num(value)}× ({num(ours.get(key.replace('ratio', 'cycle_us')))} µs)"
        target = f"Redlock over 5 masters ≤ 1.5 × one master ({flavour})"
        yield key.removesuffix("_ratio"), entry(target, shown, value, 1.5, "<=")
    yield from _server_memory(ours)
    yield from _flash_sale(result.get("claims", {}).get("flash_sale") or {})


def _uncontended(ours: dict[str, Any], redis_py: dict[str, Any]) -> Iterator[tuple[str, Entry]]:
    shown, value = _versus(ours.get("cycle_us"), redis_py.get("cycle_us"), " µs", "redis-py")
    yield "cycle", entry("uncontended cycle ≤ redis-py's", shown, value, 1.0, "<=")
    shown, value = _versus(
        ours.get("cycle_cpu_us"), redis_py.get("cycle_cpu_us"), " µs", "redis-py"
    )
    yield "cycle_cpu", entry("client CPU per cycle ≤ redis-py's", shown, value, 1.0, "<=")


def _contention(
    result: dict[str, Any], workers: int, longest: float
) -> Iterator[tuple[str, Entry]]:
    ours = _contended(result, "redlease", workers)
    rate = ours.get("acquires_per_s")
    for peer, share in (("redis-py", 0.8), ("python-redis-lock", 1.0)):
        theirs = _contended(result, peer, workers).get("acquires_per_s")
        shown, value = _versus(rate, theirs, "/s", peer)
        times = f"{share:g} × " if share != 1 else ""
        target = f"{workers} workers on one key: acquisitions/s ≥ {times}{peer}'s"
        yield (
            f"acquires{workers}_vs_{peer.replace('-', '_')}",
            entry(target, shown, value, share, ">="),
        )
    wait = ours.get("longest_wait_ms")
    target = f"{workers} workers: longest wait ≤ {longest:g} ms"
    yield f"longest{workers}_wait", entry(target, f"{num(wait)} ms", wait, longest, "<=")
    if ours:
        overlaps, mismatch = ours.get("overlaps") or 0, ours.get("counter_mismatch") or 0
        bad: float | None = float(overlaps + abs(mismatch))
        shown = f"{num(overlaps)} overlaps, counter mismatch {num(mismatch)}"
    else:
        bad, shown = None, ""
    yield f"overlaps{workers}", entry(f"{workers} workers: 0 overlaps", shown, bad, 0, "<=")


def _server_cpu(result: dict[str, Any], key: str, workers: int | None) -> str:
    """The server's CPU per acquisition (or cycle), ours beside the peers': what the
    command counts stand for."""
    shown = []
    for library in ("redlease", "redis-py", "python-redis-lock"):
        row = result.get(library, {})
        value = (_contended(result, library, workers) if workers else row).get(key)
        if value is not None:
            shown.append(f"{library} {num(value)}")
    return f"; server CPU µs: {', '.join(shown)}" if shown else ""


def _commands(ours: dict[str, Any], result: dict[str, Any]) -> Iterator[tuple[str, Entry]]:
    """Per contended acquisition: the worst over the worker counts measured."""
    nested = ours.get("contended", {})
    for key, limit, who in (
        ("commands_per_acquire", 6.0, "server"),
        ("client_commands_per_acquire", 2.0, "client"),
    ):
        counts = {int(w): s.get(key) for w, s in nested.items() if s.get(key) is not None}
        worst = max(counts.values()) if counts else None
        shown = ", ".join(f"{num(v)} ({w} workers)" for w, v in sorted(counts.items()))
        if who == "server" and counts:
            shown += _server_cpu(result, "server_cpu_us_per_acquire", max(counts))
        target = f"{who} commands per contended acquisition ≤ {limit:g}"
        yield f"contended_{who}_commands", entry(target, shown, worst, limit, "<=")
    value = ours.get("cycle_server_commands")
    shown = f"{num(value)} server, {num(ours.get('cycle_client_commands'))} client"
    shown += _server_cpu(result, "cycle_server_cpu_us", None)
    yield (
        "cycle_server_commands",
        entry("server commands per uncontended cycle ≤ 5", shown, value, 5.0, "<="),
    )


def _server_memory(ours: dict[str, Any]) -> Iterator[tuple[str, Entry]]:
    size = ours.get("server_bytes_per_held_lock")
    shown = f"{num(size)} bytes in {num(ours.get('server_keys_per_held_lock'))} keys"
    if (recent := ours.get("server_bytes_per_recent_release")) is not None:
        shown += f"; each release keeps {num(recent)} bytes for the retry window"
    target = f"server memory ≤ {MAX_HELD_LOCK_BYTES:g} bytes per held lock"
    yield "bytes_per_held_lock", entry(target, shown, size, MAX_HELD_LOCK_BYTES, "<=")
    names, left = ours.get("keys_left_names"), ours.get("keys_left")
    target = (
        f"{NAMES_IN_TARGET:,} names locked once and released leave ≤ {MAX_KEYS_LEFT:,} keys "
        "after the retry window"
    )
    if not names or left is None:
        yield "keys_left", entry(target, "", None, MAX_KEYS_LEFT, "<=")
        return
    if names >= NAMES_IN_TARGET:
        limit, bound = MAX_KEYS_LEFT, f"{MAX_KEYS_LEFT:,}"
    else:  # fewer names: at most one key per hash slot they fall into
        limit = min(MAX_KEYS_LEFT, ours.get("keys_left_slots") or MAX_KEYS_LEFT)
        bound = f"{limit:,}, the hash slots of these names"
    shown = (
        f"{left:,} keys for {names:,} names ({num(ours.get('keys_left_per_1000_names'))} "
        f"per 1,000) after {num(ours.get('keys_left_wait_s'))} s; bound {bound}"
    )
    yield "keys_left", entry(target, shown, float(left), float(limit), "<=")


def _flash_sale(approaches: dict[str, Any]) -> Iterator[tuple[str, Entry]]:
    ours = (approaches.get("redlease") or {}).get("buys_per_s")
    theirs = (approaches.get("postgres_for_update") or {}).get("buys_per_s")
    shown, value = _versus(ours, theirs, " buys/s", "FOR UPDATE")
    target = "flash sale: redlease in front of PostgreSQL ≥ PostgreSQL FOR UPDATE (buys/s)"
    yield "flash_sale", entry(target, shown, value, 1.0, ">=")


def verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "not measured"}[met]


def targets_section(result: dict[str, Any]) -> str:
    """The page's targets: the "fair and fast" table, then the earlier targets."""
    checks = result.get("targets") or evaluate(result)
    rows = [
        [check["target"], check["measured"], verdict(check["met"])] for check in checks.values()
    ]
    earlier = standing(result)
    return (
        "### Fair and fast\n\n"
        + table(["target", "measured in the same run", "met?"], rows)
        + "\n\n### Earlier targets\n\n"
        + (
            table(["target", "result", "met?"], earlier)
            if earlier
            else "*(no part with a target has run)*"
        )
    )


def standing(result: dict[str, Any]) -> list[list[str]]:
    """The earlier targets (cycle and handoff against the round trip, renewal, safety)."""
    ours = result.get("redlease", {})
    rows = []

    def add(target: str, value: float | None, limit: float, shown: str) -> None:
        if value is None:
            return
        rows.append([target, shown, "met" if value <= limit else "**missed**"])

    add(
        "uncontended cycle ≤ 2.2 × RTT",
        ours.get("cycle_rtt"),
        2.2,
        med(ours.get("cycle_rtt"), ours.get("cycle_rtt_spread")),
    )
    add(
        "asyncio cycle ≤ 1.3 × sync cycle",
        ours.get("async_ratio"),
        1.3,
        med(ours.get("async_ratio"), (ours.get("async") or {}).get("async_ratio_spread")),
    )
    for workers, summary in sorted(ours.get("contended", {}).items(), key=lambda i: int(i[0])):
        for key, limit, what in (
            ("handoff_p50_rtt", 2.0, "p50 ≤ 2"),
            ("handoff_p99_rtt", 10.0, "p99 ≤ 10"),
        ):
            add(
                f"{workers} workers: handoff {what} × idle RTT",
                summary.get(key),
                limit,
                num(summary.get(key)),
            )
        loaded = summary.get("handoff_p50_loaded_rtt")
        add(f"{workers} workers: handoff p50 ≤ 2 × RTT under load", loaded, 2.0, num(loaded))
    overlaps = [
        (summary.get("overlaps") or 0) + abs(summary.get("counter_mismatch") or 0)
        for library in LIBRARIES
        for summary in result.get(library, {}).get("contended", {}).values()
    ]
    if overlaps:
        add(
            "no overlapping critical sections (every library, every count)",
            float(sum(overlaps)),
            0.0,
            f"{num(sum(overlaps))} overlaps + counter mismatches",
        )
    renewal = ours.get("renewal_by_leases", {})
    if renewal:
        top = max(renewal, key=int)
        lost = renewal[top].get("renew_lost")
        add(
            f"renewal holds {int(top):,} leases without loss",
            lost,
            0,
            f"{num(lost)} lost, {num(renewal[top].get('renew_cpu_pct'))} % CPU, "
            f"{num(renewal[top].get('renew_threads'))} thread(s)",
        )
    fair = ours.get("fair_handoff_p50_rtt")
    add(
        "fair lock handoff p50 ≤ 1.5 × idle RTT (8 workers)",
        fair,
        1.5,
        med(fair, ours.get("fair_handoff_p50_rtt_spread")),
    )
    fair_loaded = ours.get("fair_handoff_p50_loaded_rtt")
    add("fair lock handoff p50 ≤ 1.5 × RTT under load", fair_loaded, 1.5, num(fair_loaded))
    flash = result.get("claims", {}).get("flash_sale", {}).get("redlease")
    if flash:
        add(
            "flash sale with redlease: nothing oversold",
            flash.get("oversold"),
            0,
            num(flash.get("oversold")),
        )
    return rows
