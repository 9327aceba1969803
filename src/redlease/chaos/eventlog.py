"""The JSON-lines log every chaos process writes: one event a line, flushed at once.

Each line is written whole under a lock, so threads of one worker (its probes) can log
too, and a ``kill -9`` leaves every event logged before it. Times are
``time.monotonic()``: on Linux one clock for every process of the host, the harness's
included.
"""

from __future__ import annotations

import json
import threading
import time
from typing import IO, Any


class EventLog:
    def __init__(self, stream: IO[str], worker: str) -> None:
        self.stream = stream
        self.worker = worker
        self.guard = threading.Lock()

    def event(self, kind: str, seq: int, **fields: Any) -> None:
        record = {"ev": kind, "w": self.worker, "seq": seq, "t": time.monotonic(), **fields}
        with self.guard:
            self.stream.write(json.dumps(record) + "\n")
            self.stream.flush()
