"""Stop signals for the chaos tools: SIGTERM is a Ctrl-C, and a run cleans up after either.

A long run (``redlease chaos``, the soak) starts worker processes, may have one of them
stopped by a fault, and writes keys under a prefix of its own. Python turns SIGINT into
:class:`KeyboardInterrupt`, so ``finally`` blocks resume and reap the workers and delete the
keys; SIGTERM's default kills the process on the spot and leaves all that behind. Inside
:func:`stop_signals`, both raise :class:`KeyboardInterrupt` once; a second signal while the
run cleans up (bounded in time) is ignored, so the clean-up is not cut short.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stop_signals() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`KeyboardInterrupt`, the first one only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = False

    def interrupt(signum: int, frame: FrameType | None) -> None:
        nonlocal fired
        if not fired:
            fired = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, interrupt) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
