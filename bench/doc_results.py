"""The page's tables of the comparison parts: cycle, contended, renewal, asyncio, and
redlease's other primitives; each says so when its part has not run."""

# ruff: noqa: RUF001 - the page shows multiplication signs
from __future__ import annotations

from typing import Any

import behind
from console import FAMILY_ROWS
from doc_format import bold, med, num, table
from peers import LIBRARIES
from report import BASE_LEASES, counts_in

MAIN_ROWS = (
    ("EVALSHA round trip, µs (adjacent reference)", "rtt_us", None),
    ("uncontended cycle, µs", "cycle_us", "cycle_us_spread"),
    ("cycle × RTT (target for redlease ≤ 2.2)", "cycle_rtt", "cycle_rtt_spread"),
    ("client CPU per cycle, µs", "cycle_cpu_us", "cycle_cpu_us_spread"),
    ("redlease with `ttl=10` (no renewal): cycle × RTT", "ttl10_cycle_rtt", "ttl10_cycle_rtt_spread"),  # noqa: E501
    ("  … client CPU per cycle, µs", "ttl10_cycle_cpu_us", None),
    ("client / server commands per cycle", ("cycle_client_commands", "cycle_server_commands"), None),  # noqa: E501
    ("keys left on the server after the cycle part", "leftover_keys", None),
)  # fmt: skip


def results_table(result: dict[str, Any]) -> str:
    if not result.get("redlease", {}).get("cycle_us") and not counts_in(result, "contended"):
        return "*(the `cycle` and `handoff` parts have not run)*"
    rows = []
    for label, key, spread in MAIN_ROWS:
        cells = []
        for library in LIBRARIES:
            entry = result.get(library, {})
            if isinstance(key, tuple):
                cell = " / ".join(num(entry.get(k)) for k in key) if key[0] in entry else ""
            elif key in entry:
                cell = med(entry.get(key), entry.get(spread) if spread else None)
            else:
                cell = ""
            cells.append(bold(cell) if library == "redlease" else cell)
        if any(cells):
            rows.append([label, *cells])
    for workers in counts_in(result, "contended"):
        rows += _contended_rows(result, workers)
    return table(["figure", *LIBRARIES], rows)


def _contended_rows(result: dict[str, Any], workers: int) -> list[list[str]]:
    """Headline rows for one worker count (the scaling tables hold the rest)."""
    out = []
    for label, key in (
        (f"**{workers} workers: handoff p50, µs**", "handoff_p50_us"),
        ("handoff p99, µs", "handoff_p99_us"),
        ("acquisitions / s", "acquires_per_s"),
    ):
        cells = []
        for library in LIBRARIES:
            nested = result.get(library, {}).get("contended", {}).get(str(workers))
            cell = med(nested.get(key), nested.get(f"{key}_spread")) if nested else ""
            cells.append(bold(cell) if library == "redlease" else cell)
        out.append([label, *cells])
    return out


SCALING = (
    ("handoff p50, µs", "handoff_p50_us"),
    ("handoff p99, µs", "handoff_p99_us"),
    ("handoff p50 × idle RTT", "handoff_p50_rtt"),
    ("handoff p50 × RTT under the same load", "handoff_p50_loaded_rtt"),
    ("RTT under the load, µs", "loaded_rtt_us"),
    ("acquisitions / s", "acquires_per_s"),
    ("share handed to another process", "handoff_share"),
    ("server commands / acquisition", "commands_per_acquire"),
    ("client commands / acquisition", "client_commands_per_acquire"),
    ("longest wait, ms (max over reps)", "longest_wait_ms"),
    ("overlaps / counter mismatch (summed over reps)", "overlaps"),
)


def scaling_tables(result: dict[str, Any]) -> str:
    workers = counts_in(result, "contended")
    if not workers:
        return "*(the `handoff` part has not run)*"
    blocks = []
    for label, key in SCALING:
        rows = []
        for library in LIBRARIES:
            nested = result.get(library, {}).get("contended", {})
            cells = [_scaling_cell(nested.get(str(w)), key) for w in workers]
            name = f"**{library}**" if library == "redlease" else library
            rows.append([name, *cells])
        blocks.append(
            f"**{label}**\n\n" + table(["library", *[f"{w} workers" for w in workers]], rows)
        )
    errors = _contended_errors(result)
    if errors:
        blocks.append("Errors in contended runs: " + "; ".join(errors))
    return "\n\n".join(blocks)


def _scaling_cell(summary: dict[str, Any] | None, key: str) -> str:
    if not summary:
        return ""
    if key == "overlaps":
        return f"{num(summary.get('overlaps'))} / {num(summary.get('counter_mismatch'))}"
    if key == "longest_wait_ms":
        return num(summary.get(key))
    return med(summary.get(key), summary.get(f"{key}_spread"))


def _contended_errors(result: dict[str, Any]) -> list[str]:
    return [
        f"{library}, {workers} workers: {error}"
        for library in LIBRARIES
        for workers, summary in result.get(library, {}).get("contended", {}).items()
        for error in summary.get("errors", [])
    ]


def renewal_table(result: dict[str, Any]) -> str:
    counts = counts_in(result, "renewal_by_leases")
    if not counts:
        return "*(the `renewal` part has not run)*"
    rows = []
    variants = (
        ("redlease", "renewal_by_leases"),
        ("python-redis-lock", "renewal_by_leases"),
        ("python-redis-lock (big pool)", "renewal_big_pool_by_leases"),
    )
    for label, nested in variants:
        library = label.split(" ")[0]
        for count in counts:
            figures = result.get(library, {}).get(nested, {}).get(str(count))
            if figures is None:
                continue
            rows.append(_renewal_row(label, count, figures))
    text = table(
        [
            "library",
            "leases",
            "threads",
            "CPU % of one core",
            "lost / held",
            "acquire all, s",
            "notes",
        ],
        rows,
    )
    return text + (
        "\n\nredis-py and pottery have no automatic renewal (manual `extend()` only): "
        f"`null` in the JSON. The flat `renew_*` keys hold the {BASE_LEASES:,}-lease run."
    )


def _renewal_row(label: str, count: int, figures: dict[str, Any]) -> list[str]:
    if figures.get("skipped") or figures.get("error"):
        note = figures.get("skipped") or figures.get("error")
        return [label, f"{count:,}", "", "", "", "", f"not measured: {note}"]
    notes = []
    if figures.get("renew_thread_errors"):
        notes.append("threads died: " + _counts(figures["renew_thread_errors"]))
    if figures.get("renew_acquire_errors"):
        notes.append("acquires failed: " + _counts(figures["renew_acquire_errors"]))
    if figures.get("renew_release_errors"):
        notes.append(f"{num(figures['renew_release_errors'])} releases failed")
    lost = f"{num(figures.get('renew_lost'))} / {num(figures.get('renew_locks'))}"
    name = f"**{label}**" if label == "redlease" else label
    return [
        name,
        f"{count:,}",
        num(figures.get("renew_threads")),
        num(figures.get("renew_cpu_pct")),
        lost,
        num(figures.get("renew_acquire_all_s")),
        "; ".join(notes),
    ]


def _counts(errors: dict[str, Any]) -> str:
    return ", ".join(f"{name.split('.')[-1]} × {num(count)}" for name, count in errors.items())


def async_table(result: dict[str, Any]) -> str:
    names = [n for n in (*LIBRARIES, "aioredlock") if (result.get(n) or {}).get("async")]
    if not names:
        return "*(the `async` part has not run)*"
    rows = []
    for name in names:
        figures = result[name]["async"]
        label = f"**{name}**" if name == "redlease" else name
        rows.append(
            [
                label,
                num(figures.get("async_sync_cycle_us")),
                med(figures.get("async_cycle_us"), figures.get("async_cycle_us_spread")),
                med(figures.get("async_ratio"), figures.get("async_ratio_spread")),
                num(figures.get("async_rtt_us")),
                num(figures.get("async_cycle_rtt")),
                num(figures.get("async_cycle_cpu_us")),
            ]
        )
    text = table(
        [
            "library",
            "sync cycle, µs",
            "asyncio cycle, µs",
            "asyncio / sync (redlease target ≤ 1.3)",
            "asyncio RTT, µs",
            "cycle × asyncio RTT",
            "asyncio CPU per cycle, µs",
        ],
        rows,
    )
    skipped = {
        k: v
        for k, v in result.get("skipped", {}).items()
        if k in ("aioredlock", "pottery", "redis-py", "redlease")
    }
    for name, why in skipped.items():
        text += f"\n\n`{name}` did not run: {why}"
    return text + "\n\npython-redis-lock has no asyncio flavour."


def behind_list(result: dict[str, Any]) -> str:
    findings = behind.find(result)
    if not findings:
        return "No figure in the kept results where a peer beats redlease by more than the spread."
    by_kind: dict[str, list[behind.Finding]] = {}
    for finding in findings:
        by_kind.setdefault(finding.kind, []).append(finding)
    blocks = []
    for items in by_kind.values():
        rows = [
            [
                f.section,
                f.figure,
                med(f.ours.median, f.ours.spread),
                f.peer,
                med(f.theirs.median, f.theirs.spread),
                f"{num(f.margin)}×" if f.margin else "",
            ]
            for f in items
        ]
        text = table(
            ["where", "figure", "redlease", "better peer", "peer's figure", "peer better by"], rows
        )
        blocks.append(f"{text}\n\n*Why:* {behind.reason(items[0])}")
    return "\n\n".join(blocks)


def family_table(result: dict[str, Any]) -> str:
    ours = result.get("redlease", {})
    rows = []
    for key, label in FAMILY_ROWS:
        if key not in ours:
            continue
        if "overlaps" in key:
            mismatch = ours.get(key.replace("overlaps", "counter") + "_mismatch")
            cell = f"{num(ours[key])} / {num(mismatch)}"
        else:
            cell = med(ours[key], ours.get(f"{key}_spread"))
        text = label.replace(" x ", " × ")
        rows.append([f"… {text.strip()}" if text.startswith(" ") else f"**{text}**", cell])
    if not rows:
        return "*(none of `fair`, `rw`, `semaphore`, `redlock`, `cluster` has run)*"
    return table(["figure", "value"], rows)
