"""The contended worker: one process looping acquire -> critical section -> release.

Workers are started with the ``spawn`` method (no inherited threads or sockets). Each one
logs, per acquisition, three ``time.monotonic()`` readings; on Linux that clock is
system-wide, so the parent can line up all workers' logs on one time axis:

* ``requested``: just before the lock object is built and ``acquire`` is called;
* ``acquired``: when ``acquire`` returned;
* ``releasing``: just before ``release`` is called (after the critical section).

The critical section reads a shared counter with GET and writes it back plus one with SET
on a separate client, so lost mutual exclusion shows up as a counter that falls short.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import redis

from counting import client_commands
from peers import open_session
from timelog import TimeLog

MAX_ACQUISITIONS = 200_000
WAIT_FOR_GO_S = 120.0
WAIT_FOR_LEAVE_S = 60.0


@dataclass(frozen=True)
class WorkerSpec:
    library: str
    url: str
    key: str
    counter_key: str
    duration_s: float


def contended_worker(
    spec: WorkerSpec, ready: Any, go: Any, start_at: Any, results: Any, leave: Any
) -> None:
    """Run the loop between the parent's start time and start + duration, then report."""
    session = open_session(spec.library, spec.url, client_name=f"rlbench-worker-{os.getpid()}")
    counter = redis.Redis.from_url(spec.url, client_name="rlbench-counter")
    try:
        session.warm_up(spec.key)
        counter.get(spec.counter_key)
        ready.put(os.getpid())
        if not go.wait(WAIT_FOR_GO_S):
            return
        begin = start_at.value
        end = begin + spec.duration_s
        time.sleep(max(0.0, begin - time.monotonic()))
        log = TimeLog()
        error = None
        with client_commands() as sent:
            while len(log) < MAX_ACQUISITIONS and time.monotonic() < end:
                requested = time.monotonic()
                try:
                    handle = session.acquire(spec.key)
                except Exception as exc:  # reported, not raised: the parent must see it
                    error = f"{type(exc).__name__}: {exc}"
                    break
                acquired = time.monotonic()
                value = int(counter.get(spec.counter_key) or 0)
                counter.set(spec.counter_key, value + 1)
                releasing = time.monotonic()
                try:
                    session.release(handle)
                except Exception as exc:
                    error = f"release: {type(exc).__name__}: {exc}"
                    log.add(requested, acquired, releasing)
                    break
                log.add(requested, acquired, releasing)
        # The counter's own GET and SET are the benchmark's, not the lock's.
        sent["get"] -= len(log)
        sent["set"] -= len(log)
        results.put({"pid": os.getpid(), "log": log.rows(), "sent": dict(+sent), "error": error})
        leave.wait(WAIT_FOR_LEAVE_S)
    finally:
        session.close()
        counter.close()
