"""Count Redis commands two ways: as the client sent them, and as the server ran them.

* Client side: redis-py packs every command it sends (plain calls, pipelines, and the
  pub/sub ``send_command`` redlease uses) through one serializer ``pack`` method, and
  redlease packs its own lock commands with hiredis (``redlease._packing``); wrapping
  both counts each command once, by name. A Redlock round is packed once for all its
  masters, so it counts once. Commands run *inside* a Lua script never pass through the
  client, so they are not counted here.
* Server side: ``INFO commandstats`` deltas; these include the commands scripts run.

Connection set-up (HELLO, CLIENT SETINFO/SETNAME, SELECT, AUTH) and the benchmark's own
INFO calls are left out of both counts.
"""

from __future__ import annotations

import queue
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import redis
import redis.connection

import redlease._packing as packing

SETUP_COMMANDS = frozenset({"hello", "client", "select", "auth", "info"})

_counts: Counter[str] = Counter()
_enabled = False
_installed = False


def _command_name(args: tuple[Any, ...]) -> str:
    first = args[0] if args else b""
    text = first.decode() if isinstance(first, bytes) else str(first)
    return text.split(" ", 1)[0].lower()


def _counting(pack: Callable[..., Any]) -> Callable[..., Any]:
    def counted(self: Any, *args: Any) -> Any:
        if _enabled:
            _counts[_command_name(args)] += 1
        return pack(self, *args)

    return counted


def install() -> None:
    """Wrap the serializers once per process; counting stays off until :func:`client_commands`."""
    global _installed
    if _installed:
        return
    for name in ("PythonRespSerializer", "HiredisRespSerializer"):
        serializer = getattr(redis.connection, name, None)
        if serializer is not None and hasattr(serializer, "pack"):
            serializer.pack = _counting(serializer.pack)
    hiredis_pack = packing._hiredis_pack
    if hiredis_pack is not None:

        def counted_hiredis_pack(args: tuple[Any, ...]) -> Any:
            if _enabled:
                _counts[_command_name(args)] += 1
            return hiredis_pack(args)

        packing._hiredis_pack = counted_hiredis_pack
    _installed = True


@contextmanager
def client_commands() -> Iterator[Counter[str]]:
    """Count the commands this process sends inside the block (setup commands dropped)."""
    global _enabled
    install()
    _counts.clear()
    result: Counter[str] = Counter()
    _enabled = True
    try:
        yield result
    finally:
        _enabled = False
        result.update({k: v for k, v in _counts.items() if k not in SETUP_COMMANDS})


def server_commands(client: redis.Redis) -> Counter[str]:
    """Calls per command so far, from ``INFO commandstats`` (setup commands dropped)."""
    stats = client.info("commandstats")
    calls: Counter[str] = Counter()
    for key, value in stats.items():
        name = key.removeprefix("cmdstat_")
        if name.split("|", 1)[0] not in SETUP_COMMANDS:
            calls[name] = int(value["calls"])
    return calls


def server_cpu_s(client: redis.Redis) -> float:
    """The server's CPU time so far (user and system, every thread), in seconds."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def delta(before: Counter[str], after: Counter[str]) -> Counter[str]:
    return Counter({k: after[k] - before.get(k, 0) for k in after if after[k] != before.get(k, 0)})


def count_keys(admin: redis.Redis, pattern: str, limit: int = 10_000_000) -> int:
    """Keys matching ``pattern`` now (SCAN leaves out keys whose time is up); bounded."""
    found = 0
    for _ in admin.scan_iter(match=pattern, count=1000):
        found += 1
        if found >= limit:
            break
    return found


def get_while_alive(channel: Any, processes: list[Any], timeout_s: float) -> Any:
    """``channel.get()``, but give up (``queue.Empty``) as soon as a process has died.

    A child that crashed (an import error, say) would otherwise keep the parent waiting
    for the whole timeout.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return channel.get(timeout=0.25)
        except queue.Empty:
            dead = any(not p.is_alive() and p.exitcode not in (0, None) for p in processes)
            if dead or time.monotonic() > deadline:
                raise


READY_TIMEOUT_S = 60.0
RESULT_GRACE_S = 30.0
START_DELAY_S = 0.2


def start_together(
    processes: list[Any], ready: Any, go: Any, start_at: Any, results: Any, seconds: float
) -> list[Any]:
    """Start spawned workers, release them at one shared start time, collect a report each.

    Each worker puts on ``ready`` once set up, waits for ``go``, reads ``start_at`` (a
    shared ``time.monotonic()`` value) and puts one report on ``results`` after
    ``seconds``. Raises ``queue.Empty`` when one dies or is late.
    """
    for process in processes:
        process.start()
    for _ in processes:
        get_while_alive(ready, processes, READY_TIMEOUT_S)
    start_at.value = time.monotonic() + START_DELAY_S
    go.set()
    deadline = start_at.value + seconds + RESULT_GRACE_S
    return [get_while_alive(results, processes, deadline - time.monotonic()) for _ in processes]
