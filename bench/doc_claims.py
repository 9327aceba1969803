"""The page's tables of the claims parts: the flash sale, its segments, and coordination."""

# ruff: noqa: RUF001 - the page shows multiplication signs
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from doc_format import med, num, table

Cell = Callable[[dict[str, Any]], str]


def plain(key: str) -> Cell:
    return lambda figures: num(figures.get(key))


def ranged(key: str) -> Cell:
    """The median with its range over reps, ``<key>_min`` to ``<key>_max``."""

    def cell(figures: dict[str, Any]) -> str:
        spread = [figures.get(f"{key}_min"), figures.get(f"{key}_max")]
        return med(figures.get(key), spread if None not in spread else None)

    return cell


FLASH_COLUMNS: tuple[tuple[str, Cell], ...] = (
    ("store", lambda f: str(f.get("store", ""))),
    ("sold / stock", lambda f: f"{num(f.get('sold'))} / {num(f.get('stock'))}"),
    ("oversold", plain("oversold")),
    ("buys / s", ranged("buys_per_s")),
    ("latency p50, µs", plain("latency_p50_us")),
    ("latency p99, µs", plain("latency_p99_us")),
    ("retries", plain("retries")),
    ("errors", plain("errors")),
    ("buyers × reps", lambda f: f"{num(f.get('buyers'))} × {num(f.get('reps', 1))}"),
)
SEGMENT_COLUMNS: tuple[tuple[str, Cell], ...] = (
    ("buys / s", ranged("buys_per_s")),
    ("sold", plain("sold")),
    ("oversold", plain("oversold")),
    ("seconds", plain("seconds")),
)
COORDINATION_COLUMNS: tuple[tuple[str, Cell], ...] = (
    ("nodes", plain("nodes")),
    ("cycle, µs", ranged("cycle_us")),
    ("handoff p50, µs", plain("handoff_p50_us")),
    ("handoff p99, µs", plain("handoff_p99_us")),
    ("acquisitions / s", plain("acquisitions_per_s")),
    ("workers", plain("workers")),
    ("overlaps", plain("overlaps")),
)


def flash_table(result: dict[str, Any], kept: dict[str, Any]) -> str:
    return _claims_table(result, kept, "flash", "flash_sale", ("approach", *FLASH_COLUMNS))


def coordination_table(result: dict[str, Any], kept: dict[str, Any]) -> str:
    columns = ("system", *COORDINATION_COLUMNS)
    return _claims_table(result, kept, "coordination", "coordination", columns)


def segments_table(result: dict[str, Any]) -> str:
    rows_in = result.get("claims", {}).get("segments")
    if not rows_in:
        return ""
    rows = [
        [count, *[cell(rows_in[count]) for _, cell in SEGMENT_COLUMNS]]
        for count in sorted(rows_in, key=int)
    ]
    return table(["segments", *[header for header, _ in SEGMENT_COLUMNS]], rows)


def _claims_table(
    result: dict[str, Any], kept: dict[str, Any], part: str, claim: str, columns: tuple[Any, ...]
) -> str:
    """One row per approach or system (redlease in bold), then the part's notes."""
    found = result.get("claims", {}).get(claim)
    if not found:
        record = kept["parts"].get(part)
        if record and record.get("skipped"):
            return f"*(the `{part}` part did not run: {record['skipped']})*"
        return f"*(the `{part}` part has not run)*"
    first, *cells = columns
    rows = [
        [f"**{name}**" if name == "redlease" else name, *[cell(figures) for _, cell in cells]]
        for name, figures in found.items()
    ]
    return table([first, *[header for header, _ in cells]], rows) + _claims_notes(kept, part)


def _claims_notes(kept: dict[str, Any], part: str) -> str:
    data = kept["parts"].get(part, {}).get("data", {})
    notes = []
    if data.get("versions"):
        notes.append(
            "Versions: " + ", ".join(f"{k} {v}" for k, v in data["versions"].items()) + "."
        )
    for name, why in (data.get("skipped") or {}).items():
        notes.append(f"`{name}` skipped: {why}.")
    return ("\n\n" + "\n".join(f"* {n}" for n in notes)) if notes else ""
