"""One process, no contention: the round-trip reference, lock cycles, and the asyncio twins.

Every timed loop stops at its count or its time budget, whichever comes first. Each
library's cycles are timed right after a fresh EVALSHA reference on the same client, so
``cycle_rtt`` compares numbers taken seconds apart, not minutes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import redis
import redis.asyncio

from counting import client_commands, count_keys, delta, server_commands, server_cpu_s
from peers import LEASE_S, Session
from plan import Plan
from stats import median, ratio, rotated, with_spread

RTT_SCRIPT = "return 1"
RTT_KEY = "rlbench:rtt"
WARMUP = 20
COUNTED_CYCLES = 50


@dataclass
class Timed:
    """Mean microseconds per operation over one timed block: wall clock and process CPU."""

    us: float
    cpu_us: float
    count: int


def time_loop(operation: Callable[[], object], count: int, budget_s: float) -> Timed:
    for _ in range(WARMUP):
        operation()
    start, cpu = time.monotonic(), time.process_time()
    deadline = start + budget_s
    done = 0
    for _ in range(count):
        operation()
        done += 1
        if time.monotonic() > deadline:
            break
    return _timed(start, cpu, done)


def _timed(start: float, cpu: float, done: int) -> Timed:
    wall_us = (time.monotonic() - start) / done * 1e6
    return Timed(wall_us, (time.process_time() - cpu) / done * 1e6, done)


def evalsha_rtt(client: redis.Redis, count: int, budget_s: float) -> Timed:
    """One EVALSHA of a trivial script: the floor every lock operation pays."""
    sha = client.script_load(RTT_SCRIPT)
    return time_loop(lambda: client.evalsha(sha, 1, RTT_KEY), count, budget_s)


def cycle(session: Session, key: str, count: int, budget_s: float) -> Timed:
    return time_loop(lambda: session.cycle(key), count, budget_s)


def commands_per_cycle(session: Session, key: str, admin: redis.Redis) -> dict[str, object]:
    """Client and server commands of one uncontended cycle (exact counts, not timed)."""
    before, cpu_before = server_commands(admin), server_cpu_s(admin)
    with client_commands() as sent:
        for _ in range(COUNTED_CYCLES):
            session.cycle(key)
    cpu_s = server_cpu_s(admin) - cpu_before
    ran = delta(before, server_commands(admin))
    return {
        "cycle_server_cpu_us": cpu_s * 1e6 / COUNTED_CYCLES,
        "cycle_client_commands": sum(sent.values()) / COUNTED_CYCLES,
        "cycle_server_commands": sum(ran.values()) / COUNTED_CYCLES,
        "cycle_commands_breakdown": {k: v / COUNTED_CYCLES for k, v in sorted(ran.items())},
    }


ASYNC_LIBRARIES = ("redlease", "redis-py", "pottery", "aioredlock")
"""Async flavours measured; all but aioredlock (async only) beside their sync twin."""


def _async_cycle(
    library: str, client: redis.asyncio.Redis, url: str, key: str
) -> tuple[Callable[[], Awaitable[object]], Callable[[], Awaitable[object]]]:
    """``(one_cycle, close)`` for one library's idiomatic ``async with`` block.

    * redlease: ``async with AsyncLocks(client).lock(key)`` (30 s lease, renewed);
    * redis-py: ``async with client.lock(key, timeout=10)`` (``redis.asyncio``);
    * pottery: ``async with AIORedlock(key=key, masters={client}, auto_release_time=10)``;
    * aioredlock: ``async with await Aioredlock([url]).lock(key, lock_timeout=10)`` (it
      opens its own aioredis 1.x pool from the URL).
    """
    if library == "redlease":
        import redlease  # noqa: PLC0415

        alocks = redlease.AsyncLocks(client)

        async def redlease_cycle() -> None:
            async with alocks.lock(key):
                pass

        return redlease_cycle, alocks.aclose
    if library == "redis-py":

        async def redis_py_cycle() -> None:
            async with client.lock(key, timeout=LEASE_S):
                pass

        return redis_py_cycle, _nothing
    if library == "pottery":
        from pottery import AIORedlock  # noqa: PLC0415

        async def pottery_cycle() -> None:
            async with AIORedlock(key=key, masters={client}, auto_release_time=LEASE_S):
                pass

        return pottery_cycle, _nothing
    from aioredlock import Aioredlock  # noqa: PLC0415

    manager = Aioredlock([url])

    async def aioredlock_cycle() -> None:
        async with await manager.lock(key, lock_timeout=LEASE_S):
            pass

    return aioredlock_cycle, manager.destroy


async def _nothing() -> None:
    return None


async def _async_block(
    url: str, library: str, key: str, count: int, budget_s: float
) -> tuple[Timed, Timed]:
    """Async EVALSHA reference, then one library's ``async with`` cycles, on one loop."""
    client = redis.asyncio.Redis.from_url(url)
    close = _nothing
    try:
        sha = await client.script_load(RTT_SCRIPT)

        async def one_rtt() -> None:
            await client.evalsha(sha, 1, RTT_KEY)

        one_cycle, close = _async_cycle(library, client, url, key)
        return (
            await _async_time_loop(one_rtt, count, budget_s),
            await _async_time_loop(one_cycle, count, budget_s),
        )
    finally:
        await close()
        await client.aclose()


async def _async_time_loop(
    operation: Callable[[], Awaitable[object]], count: int, budget_s: float
) -> Timed:
    for _ in range(WARMUP):
        await operation()
    start, cpu = time.monotonic(), time.process_time()
    deadline = start + budget_s
    done = 0
    for _ in range(count):
        await operation()
        done += 1
        if time.monotonic() > deadline:
            break
    return _timed(start, cpu, done)


def async_available() -> dict[str, str]:
    """Async libraries that cannot run here, with the exact import error."""
    skipped = {}
    for library, module in (("pottery", "pottery"), ("aioredlock", "aioredlock")):
        try:
            __import__(module)
        except Exception as exc:  # ImportError, or an old package failing on this Python
            skipped[library] = f"import {module} failed: {type(exc).__name__}: {exc}"
    return skipped


def async_reps(url: str, plan: Plan, tick: Callable[[], None]) -> dict[str, object]:
    """Sync and asyncio cycles of each library side by side, order rotating per rep.

    Per rep and library, the sync cycle (the ``cycle`` part's session) and the asyncio
    cycle run back to back, which comes first alternating per rep; ``async_ratio`` is the
    per-rep asyncio / sync ratio. A library that fails is skipped with its error.
    """
    from peers import open_session  # noqa: PLC0415

    skipped = async_available()
    names = [name for name in ASYNC_LIBRARIES if name not in skipped]
    sessions = {name: open_session(name, url) for name in names if name != "aioredlock"}
    samples: dict[str, dict[str, list[float]]] = {
        name: {"sync": [], "async": [], "ratio": [], "rtt": [], "cpu": []} for name in names
    }
    count, budget_s = plan.async_cycles, plan.budget_s
    try:
        for rep in range(plan.async_reps):
            for name in rotated(names, rep):
                if name in skipped:
                    continue
                try:
                    _async_rep(url, name, sessions.get(name), rep, count, budget_s, samples[name])
                except Exception as exc:  # a peer broken on this stack: skip it, keep the rest
                    skipped[name] = f"{type(exc).__name__}: {exc}"
            tick()
    finally:
        for session in sessions.values():
            session.close()
    figures: dict[str, object] = {
        name: _async_summary(values) for name, values in samples.items() if name not in skipped
    }
    return {"libraries": figures, "skipped": skipped}


def _async_rep(
    url: str,
    name: str,
    session: Session | None,
    rep: int,
    count: int,
    budget_s: float,
    out: dict[str, list[float]],
) -> None:
    key = f"rlbench:async:{name}"
    order = ("sync", "async") if rep % 2 == 0 else ("async", "sync")
    for flavour in order:
        if flavour == "sync" and session is not None:
            out["sync"].append(cycle(session, key + ":sync", count, budget_s).us)
        elif flavour == "async":
            rtt, timed = asyncio.run(_async_block(url, name, key, count, budget_s))
            out["async"].append(timed.us)
            out["cpu"].append(timed.cpu_us)
            out["rtt"].append(rtt.us)
    if session is not None:
        out["ratio"].append(out["async"][-1] / out["sync"][-1])


def _async_summary(values: dict[str, list[float]]) -> dict[str, object]:
    return {
        **with_spread("async_cycle_us", values["async"]),
        "async_cycle_cpu_us": median(values["cpu"]),
        "async_sync_cycle_us": median(values["sync"]),
        **with_spread("async_ratio", values["ratio"]),
        "async_rtt_us": median(values["rtt"]),
        "async_cycle_rtt": ratio(median(values["async"]), median(values["rtt"])),
    }


def cycle_reps(
    sessions: dict[str, Session],
    admin: redis.Redis,
    plan: Plan,
    with_cycles: bool,
    tick: Callable[[], None],
) -> tuple[list[float], dict[str, dict[str, object]]]:
    """Per rep and library (rotated order): an EVALSHA reference, then the library's cycles.

    Returns every RTT sample and, per library, its medians and ranges.
    """
    names = list(sessions)
    all_rtts: list[float] = []
    per_library: dict[str, dict[str, list[float]]] = {
        name: {"rtt": [], "cycle": [], "ratio": [], "cpu": [], "rtt_cpu": []} for name in names
    }
    budget_s = plan.budget_s
    for rep in range(plan.reps):
        for name in rotated(names, rep):
            session = sessions[name]
            reference = evalsha_rtt(session.client, plan.rtt_ops, budget_s)
            rtt = reference.us
            all_rtts.append(rtt)
            per_library[name]["rtt"].append(rtt)
            per_library[name]["rtt_cpu"].append(reference.cpu_us)
            if with_cycles:
                timed = cycle(session, f"rlbench:cycle:{name}", plan.cycles, budget_s)
                per_library[name]["cycle"].append(timed.us)
                per_library[name]["cpu"].append(timed.cpu_us)
                per_library[name]["ratio"].append(timed.us / rtt)
            tick()
    results: dict[str, dict[str, object]] = {}
    for name, samples in per_library.items():
        entry: dict[str, object] = {
            "rtt_us": median(samples["rtt"]),
            "rtt_cpu_us": median(samples["rtt_cpu"]),
        }
        if with_cycles:
            entry |= {
                **with_spread("cycle_us", samples["cycle"]),
                **with_spread("cycle_cpu_us", samples["cpu"]),
                **with_spread("cycle_rtt", samples["ratio"]),
                "cycle_over_rtt_of_medians": ratio(
                    median(samples["cycle"]), median(samples["rtt"])
                ),
            }
            entry |= commands_per_cycle(sessions[name], f"rlbench:cycle:{name}", admin)
            entry["leftover_keys"] = count_keys(admin, f"*rlbench:cycle:{name}*")
        results[name] = entry
    return all_rtts, results
