"""``redlease ls [PATTERN]`` and ``redlease show NAME``: who holds which lock right now.

A table for people (drawn with rich when it is installed, plain columns otherwise) and
``--json`` for scripts: one JSON document on the last line of stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from redlease.commands.common import ExitCode, add_connection_options, connect
from redlease.commands.state import Holder, LockState, names, snapshot
from redlease.keys import LockKeys, validate_name, validate_prefix

__all__ = ["register"]

COLUMNS = ("NAME", "KIND", "HOLDER", "TTL LEFT", "FENCE", "WAITERS")


def register(commands: Any) -> None:
    ls = commands.add_parser(
        "ls",
        help="list held locks (every kind) with holder, TTL left, fence and waiters",
        description="List every held lock, read-write lock, semaphore and latch whose name "
        "matches PATTERN (a glob, default *), using SCAN (never KEYS).",
    )
    ls.add_argument("pattern", nargs="?", default="*", metavar="PATTERN")
    ls.add_argument("--json", action="store_true", help="print one JSON array instead")
    add_connection_options(ls)
    ls.set_defaults(handler=list_locks)

    show = commands.add_parser(
        "show",
        help="everything the server knows about one lock",
        description="Show one lock name: its holders, fence, waiters (even when it is free).",
    )
    show.add_argument("name", metavar="NAME")
    show.add_argument("--json", action="store_true", help="print one JSON object instead")
    add_connection_options(show)
    show.set_defaults(handler=show_lock)


def list_locks(args: argparse.Namespace) -> int:
    prefix = validate_prefix(args.prefix)
    with connect(args) as client:
        found = names(client, prefix, args.pattern)
        states = [snapshot(client, LockKeys(name, prefix)) for name in found]
    held = [state for state in states if state.held]
    if args.json:
        print(json.dumps([state.as_json() for state in held]))
    elif held:
        _table(held)
    else:
        print(f"no lock under prefix {prefix!r} matching {args.pattern!r} is held")
    return ExitCode.OK


def show_lock(args: argparse.Namespace) -> int:
    keys = LockKeys(validate_name(args.name), validate_prefix(args.prefix))
    with connect(args) as client:
        state = snapshot(client, keys)
    if args.json:
        print(json.dumps(state.as_json(waiting=True)))
        return ExitCode.OK
    if state.held:
        _table([state])
    else:
        print(f"{state.name}: free")
    print(f"fence (last token handed out): {_or_dash(state.fence)}")
    print(f"waiters: {state.waiters}")
    for waiter in state.queued:
        print(f"  {waiter.kind:9} {waiter.describe()}")
    print("reentry counts are kept by the holding process, not on the server")
    return ExitCode.OK


def _rows(states: list[LockState]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for state in states:
        for holder in state.holders:
            rows.append(_row(state, holder))
        if state.latch_count is not None:
            rows.append(
                (
                    state.name,
                    "latch",
                    f"count {state.latch_count}",
                    _duration(state.latch_ttl_s),
                    "-",
                    str(state.waiters),
                )
            )
    return rows


def _row(state: LockState, holder: Holder) -> tuple[str, ...]:
    return (
        state.name,
        holder.kind,
        holder.describe(),
        _duration(holder.ttl_s),
        _or_dash(state.fence),
        str(state.waiters),
    )


def _table(states: list[LockState]) -> None:
    rows = _rows(states)
    try:
        from rich.console import Console  # noqa: PLC0415 - rich is an optional extra
        from rich.table import Table  # noqa: PLC0415
    except ImportError:
        widths = [max(len(row[i]) for row in [COLUMNS, *rows]) for i in range(len(COLUMNS))]
        for row in [COLUMNS, *rows]:
            print(
                "  ".join(
                    cell.ljust(width) for cell, width in zip(row, widths, strict=True)
                ).rstrip()
            )
        return
    table = Table(box=None, header_style="bold")
    for column in COLUMNS:
        table.add_column(column, justify="right" if column in ("FENCE", "WAITERS") else "left")
    for row in rows:
        table.add_row(*row)
    Console(file=sys.stdout, soft_wrap=True).print(table)


def _duration(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}s"


def _or_dash(value: int | None) -> str:
    return "-" if value is None else str(value)
