"""``redlease chaos [SCENARIO ...] [--quick] [--json] [--url URL]``: faults vs. the lock.

Runs the scenarios of :mod:`redlease.chaos` and prints one table row per scenario, or
with ``--json`` one JSON object on the last line of stdout. Without ``--url`` the harness
starts two private servers (the lock's and the data's); with ``--url`` it uses that
server for both, under a unique key prefix that it deletes afterwards, and runs only the
scenarios that need no control over the server. Exit status: 0 when every fenced counter
is exact, fences never went back, every holder was told of its loss and every waiter woke
within their bounds; 70 when not; 64 for a usage mistake (paths are checked before any
scenario runs); 69 for an unreachable server; 74 when all held but the ``--markdown`` page
could not be written (the results are printed anyway); 130 after Ctrl-C or SIGTERM, once
the workers are reaped and the keys deleted. stderr names each scenario that failed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from redlease.chaos import FAULTS, ChaosError, Settings, run_scenarios
from redlease.chaos.interrupt import stop_signals
from redlease.chaos.matrix import render
from redlease.commands.common import (
    URL_ONLY_HINT,
    ExitCode,
    UsageError,
    reachable_server,
    writable_directory,
)

__all__ = ["register"]

COLUMNS = (
    "SCENARIO", "SECTIONS", "OVERLAPS", "LOST", "FENCED LOST", "REJECTED", "RECOVER MS",
    "TOLD MS", "WOKEN MS",
)  # fmt: skip
CAPTION = (
    "OVERLAPS: accepted/all sections; LOST: plain counter; FENCED LOST must be 0; "
    "* = unfenced violations expected; TOLD/WOKEN: worst sync/asyncio, ! = bound missed"
)


def register(commands: Any) -> None:
    chaos = commands.add_parser(
        "chaos",
        help="inject faults (processes, network, servers, failovers) and check the lock",
        description="Worker processes take one lock around a slow read-modify-write of a "
        "plain counter and a fenced one while faults hit the holder or the server; then "
        "check for overlapping critical sections, lost updates and fence order. "
        "Scenarios: " + "; ".join(f"{name}: {fault.summary}" for name, fault in FAULTS.items()),
        epilog="exit status: 0 when the fenced counter is exact in every scenario and every "
        "holder was told of its loss and every waiter woke within the bounds, 70 when not (or "
        "a scenario could not run), 64 usage, 69 server unreachable, 74 the --markdown page "
        "could not be written (the results are printed anyway), 130 interrupted",
    )
    chaos.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"any of {', '.join(FAULTS)} (default: all that the server allows)",
    )
    chaos.add_argument("--quick", action="store_true", help="short TTL, 2 injections each")
    chaos.add_argument("--json", action="store_true", help="print one JSON object at the end")
    chaos.add_argument(
        "--url",
        help="run against this server (only scenarios that need no control over the server "
        "and no topology of their own; default: private servers and topologies)",
    )
    chaos.add_argument("--logs", type=Path, metavar="DIR", help="keep the workers' logs here")
    chaos.add_argument(
        "--markdown",
        type=Path,
        metavar="FILE",
        help="also write the results as a Markdown page (the chaos matrix of the docs)",
    )
    chaos.set_defaults(handler=run_chaos)


FAILURES = {
    "detection_ok": "a holder was not told of its lost lease within the bound",
    "wake_ok": "a waiter blocked across a fault did not get the lock within the bound",
}
PAGE_NOT_WRITTEN = 74  # EX_IOERR: every check held, but the --markdown page was not written


def _runs_on_shared(name: str) -> bool:
    fault = FAULTS[name]
    return not fault.needs_server and fault.topology == "single"


def _choose(requested: list[str], shared: bool) -> list[str]:
    unknown = [name for name in requested if name not in FAULTS]
    if unknown:
        raise UsageError(f"unknown scenario {unknown[0]!r}; choose from {', '.join(FAULTS)}")
    if not shared:
        return list(dict.fromkeys(requested)) or list(FAULTS)
    needs = [name for name in requested if not _runs_on_shared(name)]
    if needs:
        raise UsageError(
            f"scenario {needs[0]!r} stops or stalls servers or starts a topology of its own, "
            "so it runs only on private servers: drop --url"
        )
    return list(dict.fromkeys(requested)) or [name for name in FAULTS if _runs_on_shared(name)]


def run_chaos(args: argparse.Namespace) -> int:
    names = _choose(list(args.scenarios), args.url is not None)
    _check_paths(args.logs, args.markdown)
    settings = Settings.quick() if args.quick else Settings()
    try:
        with stop_signals():
            if args.url is None:
                report = run_scenarios(names, settings, logs=args.logs)
            else:
                with reachable_server(args.url, hint=URL_ONLY_HINT) as url:
                    report = run_scenarios(names, settings, url=url, logs=args.logs)
    except ChaosError as error:
        print(f"redlease: {error}", file=sys.stderr)
        return ExitCode.SOFTWARE
    page_error = None
    if args.markdown is not None:
        command = "redlease " + " ".join(sys.argv[1:]) if sys.argv[1:] else "redlease chaos"
        try:
            args.markdown.write_text(render(report, command), encoding="utf-8")
        except OSError as error:
            page_error = f"could not write {args.markdown}: {error.strerror or error}"
    if args.json:
        print(json.dumps(report))
    else:
        _table(report)
    for failure in _failures(report):
        print(f"redlease: {failure}", file=sys.stderr)
    if page_error is not None:
        print(f"redlease: {page_error}; the results are above", file=sys.stderr)
    if not report["ok"]:
        return ExitCode.SOFTWARE
    return ExitCode.OK if page_error is None else PAGE_NOT_WRITTEN


def _check_paths(logs: Path | None, markdown: Path | None) -> None:
    """Before any scenario runs: the log directory can be made, the page can be written."""
    if logs is not None:
        writable_directory(logs, "--logs")
    if markdown is not None:
        folder = markdown.parent
        if markdown.is_dir():
            raise UsageError(f"--markdown {markdown}: is a directory")
        if not folder.is_dir():
            raise UsageError(f"--markdown {markdown}: no directory {folder}")
        if not os.access(markdown if markdown.exists() else folder, os.W_OK):
            raise UsageError(f"--markdown {markdown}: not writable")


def _failures(report: dict[str, Any]) -> list[str]:
    """Which scenario failed, and how, one line each; then where the logs were kept."""
    found = []
    for name, result in report["scenarios"].items():
        if "error" in result:
            found.append(f"scenario {name} could not run: {result['error']}")
            continue
        if result.get("fenced_lost_updates", 0):
            found.append(
                f"scenario {name}: the fenced counter lost {result['fenced_lost_updates']} updates"
            )
        if result.get("fence_regressions", 0):
            found.append(f"scenario {name}: a fence went back {result['fence_regressions']} times")
        detection, wake = result.get("detection"), result.get("wake")
        if detection and not detection["met"]:
            found.append(
                f"scenario {name}: {FAILURES['detection_ok']} "
                f"(worst ms {detection['worst_ms']}, {detection['not_told']} never told)"
            )
        if wake and not wake["met"]:
            found.append(
                f"scenario {name}: {FAILURES['wake_ok']} (worst ms {wake['worst_ms']}, "
                f"{wake['not_woken']} never woken, {wake['at_own_timeout']} at their own timeout)"
            )
    if found and report.get("logs"):
        found.append(f"the workers' logs are kept in {report['logs']}")
    return found


def _rows(report: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for name, result in report["scenarios"].items():
        if "skipped" in result or "error" in result:
            kind = "skipped" if "skipped" in result else "error"
            rows.append((name, kind, result[kind][:60], "", "", "", "", "", ""))
            continue
        counters = ("-",) * 6
        if "sections" in result:
            recover = result["recover_ms"]
            counters = (
                str(result["sections"]),
                f"{result['overlaps']}/{result['overlaps_all']}",
                str(result["lost_updates"]),
                str(result["fenced_lost_updates"]),
                str(result["rejected"]),
                "-" if recover is None else f"{recover:g}",
            )
        rows.append(
            (
                f"{name}*" if result["expect_unfenced_violations"] else name,
                *counters,
                _bounded(result.get("detection"), "not_told"),
                _bounded(result.get("wake"), "not_woken"),
            )
        )
    return rows


def _bounded(measured: dict[str, Any] | None, never: str) -> str:
    """Worst sync/asyncio figures, ``never`` counted, ``!`` when the bound was missed."""
    if not measured:
        return "-"
    worst = measured["worst_ms"]
    cell = "/".join(f"{worst[f]:g}" if f in worst else "-" for f in ("sync", "asyncio"))
    if measured[never]:
        cell += f" ({measured[never]} never)"
    return cell if measured["met"] else cell + " !"


def _table(report: dict[str, Any]) -> None:
    rows = _rows(report)
    settings = report["settings"]
    title = (
        f"redlease chaos: {settings['workers']} workers, TTL {settings['ttl']:g} s, "
        f"hold {settings['hold']:g} s, {settings['injections']} injections per scenario"
    )
    try:
        from rich.console import Console  # noqa: PLC0415 - rich is an optional extra
        from rich.table import Table  # noqa: PLC0415
    except ImportError:
        print(title)
        widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
        for row in [COLUMNS, *rows]:
            print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
        print(CAPTION)
        return
    table = Table(title=title, caption=CAPTION)
    for column in COLUMNS:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    Console().print(table)
