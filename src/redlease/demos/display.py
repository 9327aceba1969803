"""How demos show themselves: a progress bar on stderr and a summary table on stdout.

rich draws both when it is installed (the ``cli`` extra); without it a plain one-line
counter and an aligned text table do the same job, so the core install needs nothing more.
Machine-readable output (``--json``) bypasses this module entirely.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TextIO

__all__ = ["ProgressUpdate", "progress", "summary_table"]

ProgressUpdate = Callable[[int], None]
Row = tuple[str, str]


def _rich_available() -> bool:
    try:
        import rich  # noqa: F401, PLC0415 - optional, and slow enough to import only when drawing
    except ImportError:
        return False
    return True


@contextmanager
def progress(label: str, total: int, *, enabled: bool = True) -> Iterator[ProgressUpdate]:
    """Yield ``update(done)``; the bar may run past ``total`` (an oversold sale does)."""
    if not enabled:
        yield lambda done: None
    elif _rich_available():
        with _rich_progress(label, total) as update:
            yield update
    else:
        with _plain_progress(label, total, sys.stderr) as update:
            yield update


@contextmanager
def _rich_progress(label: str, total: int) -> Iterator[ProgressUpdate]:
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn  # noqa: PLC0415

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda done: bar.update(task, completed=done)


@contextmanager
def _plain_progress(label: str, total: int, stream: TextIO) -> Iterator[ProgressUpdate]:
    """A ``\\r``-rewritten counter, drawn only on a terminal, where someone watches it."""
    shown = -1
    live = stream.isatty()

    def update(done: int) -> None:
        nonlocal shown
        if live and done != shown:
            shown = done
            stream.write(f"\r{label}: {done}/{total}")
            stream.flush()

    try:
        yield update
    finally:
        if live and shown >= 0:
            stream.write("\n")
            stream.flush()


def summary_table(title: str, rows: Sequence[Row], stream: TextIO | None = None) -> None:
    """Print ``rows`` as a two-column table titled ``title`` (on stdout by default)."""
    out = stream if stream is not None else sys.stdout
    if _rich_available():
        from rich.console import Console  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415

        table = Table(title=title, show_header=False, title_justify="left")
        table.add_column(style="bold")
        table.add_column(justify="right")
        for name, value in rows:
            table.add_row(name, value)
        Console(file=out).print(table)
        return
    width = max(len(name) for name, _ in rows)
    out.write(f"{title}\n")
    for name, value in rows:
        out.write(f"  {name:<{width}}  {value}\n")
