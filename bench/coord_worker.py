"""The contended worker of bench/coordination.py: acquire, critical section, release, repeat.

Started with ``spawn`` (no inherited threads or sockets). Per acquisition it logs three
``time.monotonic()`` readings, system-wide on Linux, so the parent lines up all workers'
logs on one axis: ``requested`` (before the lock call), ``acquired`` (when it returned)
and ``releasing`` (before the release call). The critical section GETs a shared counter
from a separate Valkey and SETs it plus one: two holders at once lose an increment.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import redis

from coord_clients import ClientSpec, open_client
from timelog import TimeLog

MAX_ACQUISITIONS = 100_000
WAIT_FOR_GO_S = 120.0
WAIT_FOR_LEAVE_S = 60.0


@dataclass(frozen=True)
class WorkerSpec:
    client: ClientSpec
    name: str
    counter_url: str
    counter_key: str
    duration_s: float


def coordination_worker(
    spec: WorkerSpec, ready: Any, go: Any, start_at: Any, results: Any, leave: Any
) -> None:
    """Loop between the parent's start time and start + duration, then report the log.

    Ctrl-C is left to the parent, which ends the run and stops the workers itself.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    client = open_client(spec.client)
    counter = redis.Redis.from_url(spec.counter_url)
    try:
        client.release(client.acquire(f"{spec.name}-warmup-{os.getpid()}"))
        counter.get(spec.counter_key)
        ready.put(os.getpid())
        if not go.wait(WAIT_FOR_GO_S):
            return
        end = start_at.value + spec.duration_s
        time.sleep(max(0.0, start_at.value - time.monotonic()))
        log, error = _loop(client, counter, spec, end)
        results.put({"pid": os.getpid(), "log": log.rows(), "error": error})
        leave.wait(WAIT_FOR_LEAVE_S)
    finally:
        client.close()
        counter.close()


def _loop(
    client: Any, counter: redis.Redis, spec: WorkerSpec, end: float
) -> tuple[TimeLog, str | None]:
    log = TimeLog()
    while len(log) < MAX_ACQUISITIONS and time.monotonic() < end:
        requested = time.monotonic()
        try:
            handle = client.acquire(spec.name)
        except Exception as exc:  # reported, not raised: the parent must see it
            return log, f"acquire: {type(exc).__name__}: {exc}"
        acquired = time.monotonic()
        value = int(counter.get(spec.counter_key) or 0)
        counter.set(spec.counter_key, value + 1)
        releasing = time.monotonic()
        log.add(requested, acquired, releasing)
        try:
            client.release(handle)
        except Exception as exc:
            return log, f"release: {type(exc).__name__}: {exc}"
    return log, None
