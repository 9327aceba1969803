"""One process, no contention: the round-trip reference, lock cycles, and the asyncio twin.

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

from counting import client_commands, delta, server_commands
from peers import Session
from stats import median, ratio, spread

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
    before = server_commands(admin)
    with client_commands() as sent:
        for _ in range(COUNTED_CYCLES):
            session.cycle(key)
    ran = delta(before, server_commands(admin))
    return {
        "cycle_client_commands": sum(sent.values()) / COUNTED_CYCLES,
        "cycle_server_commands": sum(ran.values()) / COUNTED_CYCLES,
        "cycle_commands_breakdown": {k: v / COUNTED_CYCLES for k, v in sorted(ran.items())},
    }


def _count_keys(admin: redis.Redis, pattern: str, limit: int = 1_000_000) -> int:
    """Keys still on the server after the cycles (e.g. latches that outlive a release)."""
    found = 0
    for _ in admin.scan_iter(match=pattern, count=1000):
        found += 1
        if found >= limit:
            break
    return found


async def _async_block(url: str, key: str, count: int, budget_s: float) -> tuple[Timed, Timed]:
    """Async EVALSHA reference and ``async with alocks.lock(key)`` cycles on one loop."""
    import redlease  # noqa: PLC0415

    client = redis.asyncio.Redis.from_url(url)
    alocks = redlease.AsyncLocks(client)
    try:
        sha = await client.script_load(RTT_SCRIPT)

        async def one_rtt() -> None:
            await client.evalsha(sha, 1, RTT_KEY)

        async def one_cycle() -> None:
            async with alocks.lock(key):
                pass

        return (
            await _async_time_loop(one_rtt, count, budget_s),
            await _async_time_loop(one_cycle, count, budget_s),
        )
    finally:
        await alocks.aclose()
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


def async_reps(
    url: str, session: Session, reps: int, count: int, budget_s: float, tick: Callable[[], None]
) -> dict[str, object]:
    """Sync and asyncio redlease cycles side by side, order alternating per rep."""
    sync_us, async_us, ratios, async_rtt = [], [], [], []
    key = "rlbench:async"
    for rep in range(reps):
        order = ("sync", "async") if rep % 2 == 0 else ("async", "sync")
        measured: dict[str, float] = {}
        for flavour in order:
            if flavour == "sync":
                measured["sync"] = cycle(session, key, count, budget_s).us
            else:
                rtt, timed = asyncio.run(_async_block(url, key, count, budget_s))
                measured["async"] = timed.us
                async_rtt.append(rtt.us)
        sync_us.append(measured["sync"])
        async_us.append(measured["async"])
        ratios.append(measured["async"] / measured["sync"])
        tick()
    return {
        "async_cycle_us": median(async_us),
        "async_cycle_us_spread": spread(async_us),
        "async_sync_cycle_us": median(sync_us),
        "async_ratio": median(ratios),
        "async_ratio_spread": spread(ratios),
        "async_rtt_us": median(async_rtt),
    }


def cycle_reps(
    sessions: dict[str, Session],
    admin: redis.Redis,
    reps: int,
    rtt_count: int,
    count: int,
    budget_s: float,
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
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            session = sessions[name]
            reference = evalsha_rtt(session.client, rtt_count, budget_s)
            rtt = reference.us
            all_rtts.append(rtt)
            per_library[name]["rtt"].append(rtt)
            per_library[name]["rtt_cpu"].append(reference.cpu_us)
            if with_cycles:
                timed = cycle(session, f"rlbench:cycle:{name}", count, budget_s)
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
                "cycle_us": median(samples["cycle"]),
                "cycle_us_spread": spread(samples["cycle"]),
                "cycle_cpu_us": median(samples["cpu"]),
                "cycle_rtt": median(samples["ratio"]),
                "cycle_rtt_spread": spread(samples["ratio"]),
                "cycle_over_rtt_of_medians": ratio(
                    median(samples["cycle"]), median(samples["rtt"])
                ),
            }
            entry |= commands_per_cycle(sessions[name], f"rlbench:cycle:{name}", admin)
            entry["leftover_keys"] = _count_keys(admin, f"*rlbench:cycle:{name}*")
        results[name] = entry
    return all_rtts, results
