"""How demos show themselves: a staged progress display on stderr, a summary table on stdout.

A run goes through stages (starting a private server, starting the worker processes,
selling, collecting the results), and the display names the stage it is in, with a
count where there is one, so the seconds of interpreter start-up are never a silent bar
at zero. rich draws it when installed (the ``cli`` extra); without rich a ``\\r``-rewritten
status line does the same job. Either way the display owns the terminal's last line while
it runs: whatever else is printed on stderr meanwhile (a demo's timeline, the command's
``redlease: …`` warning lines) lands on lines of its own above it, never joined to it.

Without a terminal on stderr nothing is drawn (nobody watches a log file fill), and with
``--json`` the display is silent except for the lines the demo chooses to print.
"""

from __future__ import annotations

import enum
import shutil
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TextIO

__all__ = [
    "SILENT",
    "Mode",
    "Progress",
    "ProgressUpdate",
    "Stage",
    "counted",
    "progress",
    "rows_of",
    "staged",
]

ProgressUpdate = Callable[[int], None]
Row = tuple[str, str]


class Mode(enum.Enum):
    """What a run shows on stderr: everything, its printed lines only, or nothing."""

    LIVE = "live"
    LINES = "lines"
    QUIET = "quiet"

    @classmethod
    def choose(cls, as_json: bool) -> Mode:
        if as_json:
            return cls.QUIET
        return cls.LIVE if sys.stderr.isatty() else cls.LINES


@dataclass(frozen=True)
class Stage:
    """What a run is doing: ``text``, and ``done`` of ``total`` ``unit`` where it counts."""

    text: str
    total: int | None = None
    unit: str = ""

    def count(self, done: int) -> str:
        """``3/8 ready``, or nothing for a stage without a count."""
        return "" if self.total is None else f"{done}/{self.total} {self.unit}".rstrip()

    def line(self, done: int) -> str:
        """The plain status line: ``starting 8 buyer processes: 3/8 ready``."""
        return f"{self.text} ..." if self.total is None else f"{self.text}: {self.count(done)}"


class Progress:
    """The display of one run: its stage, a count in it, and lines printed above it.

    This base class draws nothing (no terminal, or ``--json``); the live displays
    override :meth:`_draw`.
    """

    def __init__(self, mode: Mode = Mode.QUIET) -> None:
        self.mode = mode
        self.current = Stage("")
        self.done = 0

    def stage(self, text: str, total: int | None = None, unit: str = "") -> None:
        """Enter a new stage; its count starts at zero."""
        self.current, self.done = Stage(text, total, unit), 0
        self._draw()

    def update(self, done: int) -> None:
        """Set the count of the stage; it may run past the total (an oversold sale does)."""
        if done != self.done:
            self.done = done
            self._draw()

    def note(self, line: str) -> None:
        """Print ``line`` on stderr above the display (nothing with ``--json``)."""
        if self.mode is not Mode.QUIET:
            print(line, file=sys.stderr, flush=True)

    def _draw(self) -> None:
        pass


SILENT = Progress()
"""A display that shows nothing, the default for demos run from Python."""


@contextmanager
def staged(mode: Mode) -> Iterator[Progress]:
    """The display for ``mode``: rich or plain on a terminal, else one that draws nothing."""
    if mode is not Mode.LIVE:
        yield Progress(mode)
    elif _rich_available():
        with _rich_display() as display:
            yield display
    else:
        with _plain_display(sys.stderr) as display:
            yield display


@contextmanager
def progress(label: str, total: int, *, enabled: bool = True) -> Iterator[ProgressUpdate]:
    """One counted stage, ``label: done/total``, drawn on a terminal: ``update(done)``."""
    with staged(Mode.choose(not enabled)) as display:
        display.stage(label, total)
        yield display.update


def _rich_available() -> bool:
    try:
        import rich  # noqa: F401, PLC0415 - optional, and slow enough to import only when drawing
    except ImportError:
        return False
    return True


class _RichProgress(Progress):
    def __init__(self, bar: Any) -> None:
        super().__init__(Mode.LIVE)
        self._bar = bar
        self._task: Any = None

    def stage(self, text: str, total: int | None = None, unit: str = "") -> None:
        """A task of its own per stage: rich keeps a total once set, and the clock restarts."""
        self.current, self.done = Stage(text, total, unit), 0
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(text, total=total, unit=unit)

    def _draw(self) -> None:
        if self._task is not None:
            self._bar.update(self._task, completed=self.done)


@contextmanager
def _rich_display() -> Iterator[Progress]:
    """A transient rich bar; rich sends stderr writes above it while it is drawn."""
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import BarColumn, ProgressColumn, Task, TimeElapsedColumn  # noqa: PLC0415
    from rich.progress import Progress as Bar  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    class Count(ProgressColumn):
        """``done/total unit``, or nothing while the stage has no count."""

        def render(self, task: Task) -> Text:
            total = None if task.total is None else int(task.total)
            return Text(Stage("", total, task.fields["unit"]).count(int(task.completed)))

    columns = (
        "[progress.description]{task.description}",
        BarColumn(),
        Count(),
        TimeElapsedColumn(),
    )
    with Bar(*columns, console=Console(stderr=True), transient=True) as bar:
        yield _RichProgress(bar)


class _StatusLine(Progress):
    """The plain display: one status line at the bottom of the terminal, rewritten in place."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(Mode.LIVE)
        self.stream = stream
        self.lock = threading.RLock()
        self.shown = 0
        self.mid_line = False

    def _draw(self) -> None:
        with self.lock:
            if self.mid_line or not self.current.text:
                return  # someone is printing a line (it is drawn again at its end), or no stage
            width = shutil.get_terminal_size().columns - 1
            text = self.current.line(self.done)[:width]
            self.stream.write("\r" + text + " " * max(self.shown - len(text), 0))
            self.stream.flush()
            self.shown = len(text)

    def erase(self) -> None:
        with self.lock:
            if self.shown:
                self.stream.write("\r" + " " * self.shown + "\r")
                self.shown = 0

    def write_above(self, text: str) -> int:
        """Write ``text`` where the status line was, and draw the line again below it."""
        with self.lock:
            if text:
                self.erase()
                self.stream.write(text)
                self.mid_line = not text.endswith("\n")
                self._draw()
            return len(text)


class _AboveStatusLine:
    """``sys.stderr`` while a status line is drawn: every write goes above the line."""

    def __init__(self, line: _StatusLine) -> None:
        self._line = line

    def write(self, text: str) -> int:
        return self._line.write_above(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._line.stream, name)


@contextmanager
def _plain_display(stream: TextIO) -> Iterator[Progress]:
    line = _StatusLine(stream)
    previous = sys.stderr
    sys.stderr = _AboveStatusLine(line)
    try:
        yield line
    finally:
        sys.stderr = previous
        line.erase()
        stream.flush()


def counted(count: int, noun: str) -> str:
    """``1 process``, ``2 processes``."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}{'es' if noun.endswith('s') else 's'}"


def rows_of(result: object, *names: str) -> list[Row]:
    """Table rows for the named attributes of ``result``: ``stock_left`` as "stock left"."""
    return [(name.replace("_", " "), str(getattr(result, name))) for name in names]


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
