"""How the ``redlease`` command talks: library warnings as one line, and a closed pipe.

The library only logs (to the ``redlease`` logger); the command is the application, so it
decides where those records go: :func:`install_log_handler` prints each as one
``redlease: …`` line on stderr. The stream is looked up at every write, because a rich
live display (a demo's progress bar, ``redlease top``) swaps ``sys.stderr`` for a proxy
that prints above the display; a handler holding on to the original stream would splice
its line into the bar. A full-screen view that owns the whole terminal (``top``) takes the
lines for itself with :func:`divert_log`.

A reader that goes away (``redlease ls | head -1``) ends the command the way it ends
``seq``: no traceback, status 141 (128 + SIGPIPE), see :func:`quiet_broken_pipe`.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

__all__ = [
    "BROKEN_PIPE_EXIT",
    "OUTPUT_ERRNOS",
    "OUTPUT_FAILED_EXIT",
    "divert_log",
    "install_log_handler",
    "log_handler_installed",
    "mute_log",
    "output_failed",
    "quiet_broken_pipe",
    "rich_gave_up_on_stdout",
    "stdout_identity",
]

BROKEN_PIPE_EXIT = 128 + signal.SIGPIPE
"""What a shell sees of a coreutils command whose reader went away (141)."""

OUTPUT_FAILED_EXIT = 74
"""sysexits.h's EX_IOERR: the output could not be written (a full disk, an I/O error)."""
OUTPUT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""What a write to a regular file or a device can fail with, past the command's control."""

LogSink = Callable[[str], None]


class _LineHandler(logging.Handler):
    """Each record as ``redlease: <message>`` on today's ``sys.stderr``, or a diverted sink."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.sink: LogSink | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = f"redlease: {self.format(record)}"
            if self.sink is not None:
                self.sink(line)
                return
            stream = sys.stderr
            stream.write(line + "\n")
            stream.flush()
        except BrokenPipeError:
            pass  # nobody reads stderr any more; the command goes on
        except Exception:
            self.handleError(record)


_handler = _LineHandler()


def install_log_handler() -> None:
    """Print the library's warnings (once per process, however often it is called)."""
    logger = logging.getLogger("redlease")
    if _handler not in logger.handlers:
        logger.addHandler(_handler)
    logger.propagate = False


@contextmanager
def log_handler_installed() -> Iterator[None]:
    """:func:`install_log_handler` for the block; the logger is as it was afterwards.

    ``main`` may run inside another program (a test, an embedding script), whose own
    logging setup must come back when the command is done.
    """
    logger = logging.getLogger("redlease")
    handlers, propagate = list(logger.handlers), logger.propagate
    install_log_handler()
    try:
        yield
    finally:
        logger.handlers[:] = handlers
        logger.propagate = propagate


@contextmanager
def divert_log(sink: LogSink) -> Iterator[None]:
    """Hand every warning line to ``sink`` instead of stderr for the block."""
    previous, _handler.sink = _handler.sink, sink
    try:
        yield
    finally:
        _handler.sink = previous


@contextmanager
def mute_log(unwanted: Callable[[logging.LogRecord], bool]) -> Iterator[None]:
    """Drop the records ``unwanted`` picks for the block: what the command says itself."""

    def keep(record: logging.LogRecord) -> bool:
        return not unwanted(record)

    _handler.addFilter(keep)
    try:
        yield
    finally:
        _handler.removeFilter(keep)


def stdout_identity() -> tuple[int, int] | None:
    """What file descriptor 1 is now (device, inode), to notice it being replaced later."""
    try:
        status = os.fstat(sys.__stdout__.fileno() if sys.__stdout__ else 1)
    except (OSError, ValueError):
        return None
    return status.st_dev, status.st_ino


def rich_gave_up_on_stdout(before: tuple[int, int] | None) -> bool:
    """Whether rich met a closed pipe: it then points stdout at /dev/null and exits 1.

    rich's ``Console.on_broken_pipe`` does exactly that (the recipe of the Python docs);
    seeing descriptor 1 turned into /dev/null lets the command exit like the others.
    """
    after = stdout_identity()
    if before is None or after is None or after == before:
        return False
    devnull = os.stat(os.devnull)
    return after == (devnull.st_dev, devnull.st_ino)


def output_failed(error: OSError) -> int:
    """After a write to stdout failed (a full disk): say so in one line, return 74."""
    _silence_stdout()
    with suppress(OSError):
        sys.stderr.write(f"redlease: cannot write the output: {error.strerror}\n")
        sys.stderr.flush()
    return OUTPUT_FAILED_EXIT


def quiet_broken_pipe() -> int:
    """After a write to a closed pipe: keep the exit quiet and return :data:`BROKEN_PIPE_EXIT`.

    Python flushes stdout once more at exit; with stdout pointed at /dev/null that flush
    cannot fail and print "Exception ignored" on stderr.
    """
    _silence_stdout()
    return BROKEN_PIPE_EXIT


def _silence_stdout() -> None:
    """Point descriptor 1 at /dev/null, so Python's last flush at exit cannot fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass  # stdout is not a real file (a test harness): nothing will flush to it
    finally:
        os.close(devnull)
