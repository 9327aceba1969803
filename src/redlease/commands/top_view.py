"""How ``redlease top`` draws: a rich live screen, or plain text with a few ANSI codes.

rich (the ``cli`` extra) draws the table when it is installed; without it the same
columns are printed as aligned text, redrawn in the terminal's alternate screen, so the
shell's screen comes back unchanged when ``top`` quits.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TextIO

from redlease.commands.top_model import Row

__all__ = ["COLUMNS", "Frame", "LiveScreen", "cells", "plain_table", "print_table"]

COLUMNS = ("NAME", "KIND", "FENCE", "TTL", "WAITERS", "ACQ/S", "LOST", "HOLDER")
RIGHT_ALIGNED = {"FENCE", "TTL", "WAITERS", "ACQ/S", "LOST"}
ENTER_SCREEN = "\x1b[?1049h\x1b[?25l"
LEAVE_SCREEN = "\x1b[?25h\x1b[?1049l"
HOME_AND_CLEAR = "\x1b[H\x1b[J"


@dataclass(frozen=True)
class Frame:
    """One screenful: the title lines, the rows in order, and the latest warning."""

    title: str
    status: str
    rows: list[Row]
    warning: str = ""


def cells(row: Row) -> tuple[str, ...]:
    return (
        row.name,
        row.kind,
        "-" if row.fence is None else str(row.fence),
        "-" if row.ttl_s is None else f"{row.ttl_s:.1f}s",
        str(row.waiters),
        "-" if row.rate is None else f"{row.rate:.1f}",
        str(row.lost),
        row.holder,
    )


def plain_table(rows: list[Row], width: int | None = None) -> list[str]:
    """The rows as aligned text lines under a header, each cut to ``width`` if given."""
    table = [COLUMNS, *(cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in table) for i in range(len(COLUMNS))]
    lines = []
    for line in table:
        text = "  ".join(
            cell.rjust(size) if column in RIGHT_ALIGNED else cell.ljust(size)
            for cell, size, column in zip(line, widths, COLUMNS, strict=True)
        ).rstrip()
        lines.append(text if width is None else text[:width])
    return lines


def print_table(rows: list[Row], stream: TextIO) -> None:
    """A one-off table (``top --once``), drawn by rich when it is installed."""
    rich = _rich()
    if rich is None:
        for line in plain_table(rows):
            stream.write(line + "\n")
        return
    rich.Console(file=stream, soft_wrap=True).print(_rich_table(rich, rows, fit=True))


class LiveScreen:
    """The full-screen view: :meth:`show` a :class:`Frame`; leaving restores the terminal."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self._rich = _rich()
        self._live: Any = None

    def __enter__(self) -> LiveScreen:
        if self._rich is not None:
            console = self._rich.Console(file=self.stream)
            self._live = self._rich.Live(
                console=console, screen=True, auto_refresh=False, vertical_overflow="crop"
            )
            self._live.__enter__()
        else:
            self.stream.write(ENTER_SCREEN)
            self.stream.flush()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        if self._live is not None:
            self._live.__exit__(kind, error, trace)
        else:
            self.stream.write(LEAVE_SCREEN)
            self.stream.flush()

    def show(self, frame: Frame) -> None:
        if self._live is not None and self._rich is not None:
            self._live.update(self._rich_frame(self._rich, frame), refresh=True)
            return
        size = shutil.get_terminal_size()
        room = max(size.lines - 4, 1)
        lines = [frame.title, frame.status, *plain_table(frame.rows[:room], size.columns)]
        if len(frame.rows) > room:
            lines.append(f"… {len(frame.rows) - room} more")
        if frame.warning:
            lines.append(frame.warning)
        text = "\n".join(line[: size.columns] for line in lines)
        self.stream.write(HOME_AND_CLEAR + text)
        self.stream.flush()

    def _rich_frame(self, rich: _RichParts, frame: Frame) -> Any:
        height = self._live.console.size.height
        room = max(height - 5, 1)
        parts: list[Any] = [
            rich.Text(frame.title, style="bold", no_wrap=True, overflow="ellipsis"),
            rich.Text(frame.status, no_wrap=True, overflow="ellipsis"),
            _rich_table(rich, frame.rows[:room]),
        ]
        if len(frame.rows) > room:
            parts.append(rich.Text(f"… {len(frame.rows) - room} more"))
        if frame.warning:
            parts.append(rich.Text(frame.warning, style="yellow", no_wrap=True))
        return rich.Group(*parts)


class _RichParts:
    """The few rich classes the view needs, imported once rich is known to be there."""

    def __init__(self) -> None:
        from rich.console import Console, Group  # noqa: PLC0415 - rich is an optional extra
        from rich.live import Live  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415
        from rich.text import Text  # noqa: PLC0415

        self.Console = Console
        self.Group = Group
        self.Live = Live
        self.Table = Table
        self.Text = Text


def _rich() -> _RichParts | None:
    try:
        return _RichParts()
    except ImportError:
        return None


FOLDING = {"NAME", "HOLDER"}
"""The free-text columns: in a one-off print they fold rather than squeeze the others."""


def _rich_table(rich: _RichParts, rows: list[Row], *, fit: bool = False) -> Any:
    """The table; with ``fit`` (a one-off print) a long name or holder label folds onto
    more lines, and every other column keeps the width of its widest cell, as ``ls`` does."""
    table = rich.Table(box=None, header_style="bold", pad_edge=False)
    texts = [cells(row) for row in rows]
    for index, column in enumerate(COLUMNS):
        folds = fit and column in FOLDING
        widest = max([len(column), *(len(line[index]) for line in texts)])
        table.add_column(
            column,
            justify="right" if column in RIGHT_ALIGNED else "left",
            no_wrap=not folds,
            overflow="fold" if folds else "ellipsis",
            min_width=widest if fit and not folds else None,
        )
    for row, line in zip(rows, texts, strict=True):
        table.add_row(*line, style=None if row.held else "dim")
    return table
