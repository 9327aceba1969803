"""Uncontended cycles on other topologies: Redlock over independent masters, and a cluster.

Both parts start their own private servers (loopback, nothing on disk) and stop them on
the way out, also when something fails.

* ``redlock``: five ``EmbeddedServer`` masters. Per rep, in rotating order: a plain
  ``Locks`` cycle on the first master (the single-master reference), Redlock over the
  first 3 and over all 5 (sync ``redlease.Redlock``), then in ``asyncio.run`` the
  ``AsyncRedlock`` over all 5 and an ``AsyncLocks`` cycle on the first master.
  ``redlock5_ratio`` is the per-rep ratio of the 5-master cycle to the single-master one.
* ``cluster``: ``LocalCluster()`` (3 masters, 3 replicas) and one
  ``redis.cluster.RedisCluster`` client. Cycle keys rotate over ``CLUSTER_NAMES`` lock
  names, whose hash tags spread them over all three masters; the reference is one EVALSHA
  of ``return 1`` through the same cluster client on the same rotation of keys.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

import redis

from plan import Plan
from stats import median, ratio, rotated, with_spread
from uncontended import RTT_SCRIPT, Timed, _async_time_loop, evalsha_rtt, time_loop

REDLOCK_MASTERS = 5
CLUSTER_NAMES = 48
SYNC_FLAVOURS = ("single", "redlock3", "redlock5")


async def _async_redlock_block(
    urls: list[str], key: str, count: int, budget_s: float
) -> tuple[Timed, Timed]:
    """``async with`` cycles: AsyncRedlock over every master, then AsyncLocks on the first."""
    import redlease  # noqa: PLC0415

    redlock = redlease.AsyncRedlock(urls)
    single = redlease.AsyncLocks(urls[0])
    try:

        async def redlock_cycle() -> None:
            async with redlock.lock(key):
                pass

        async def single_cycle() -> None:
            async with single.lock(key + ":single"):
                pass

        return (
            await _async_time_loop(redlock_cycle, count, budget_s),
            await _async_time_loop(single_cycle, count, budget_s),
        )
    finally:
        await redlock.aclose()
        await single.aclose()


def redlock_reps(
    plan: Plan, label: Callable[[str], None], tick: Callable[[], None]
) -> dict[str, Any]:
    import redlease  # noqa: PLC0415
    from redlease.server import EmbeddedServer  # noqa: PLC0415

    reps, rtt_count, count, budget_s = plan.reps, plan.rtt_ops, plan.cycles, plan.budget_s
    samples: dict[str, list[float]] = {
        name: []
        for name in (
            *SYNC_FLAVOURS,
            "rtt",
            "async5",
            "async_single",
            "ratio5",
            "ratio3",
            "async_ratio5",
            "cpu5",
        )
    }
    with ExitStack() as stack:
        label("redlock: starting 5 private servers")
        servers = []
        for _ in range(REDLOCK_MASTERS):
            server = EmbeddedServer()
            stack.callback(server.stop)  # registered first: stopped even if start fails
            server.start()
            servers.append(server)
        urls = [server.url for server in servers]
        client = redis.Redis.from_url(urls[0])
        stack.callback(client.close)
        single = redlease.Locks(client)
        stack.callback(single.close)
        redlock5 = redlease.Redlock(urls)
        stack.callback(redlock5.close)
        redlock3 = redlease.Redlock(urls[:3])
        stack.callback(redlock3.close)
        clients: dict[str, Any] = {"single": single, "redlock3": redlock3, "redlock5": redlock5}
        for rep in range(reps):
            label(f"redlock: rep {rep + 1}/{reps}")
            samples["rtt"].append(evalsha_rtt(client, rtt_count, budget_s).us)
            measured: dict[str, Timed] = {}
            for name in rotated(SYNC_FLAVOURS, rep):
                locks = clients[name]
                key = f"rlbench:redlock:{name}"

                def one(locks: Any = locks, key: str = key) -> None:
                    with locks.lock(key):
                        pass

                measured[name] = time_loop(one, count, budget_s)
                samples[name].append(measured[name].us)
            samples["ratio5"].append(measured["redlock5"].us / measured["single"].us)
            samples["ratio3"].append(measured["redlock3"].us / measured["single"].us)
            samples["cpu5"].append(measured["redlock5"].cpu_us)
            async5, async_single = asyncio.run(
                _async_redlock_block(urls, "rlbench:redlock:async", count, budget_s)
            )
            samples["async5"].append(async5.us)
            samples["async_single"].append(async_single.us)
            samples["async_ratio5"].append(async5.us / async_single.us)
            tick()
        version = servers[0].info.version
    return {
        "redlock_masters": REDLOCK_MASTERS,
        "redlock_server": version,
        "redlock_rtt_us": median(samples["rtt"]),
        **with_spread("redlock_single_cycle_us", samples["single"]),
        **with_spread("redlock3_cycle_us", samples["redlock3"]),
        "redlock3_ratio": median(samples["ratio3"]),
        **with_spread("redlock5_cycle_us", samples["redlock5"]),
        "redlock5_cycle_cpu_us": median(samples["cpu5"]),
        **with_spread("redlock5_ratio", samples["ratio5"]),
        "redlock5_cycle_rtt": ratio(median(samples["redlock5"]), median(samples["rtt"])),
        **with_spread("async_redlock5_cycle_us", samples["async5"]),
        "async_redlock_single_cycle_us": median(samples["async_single"]),
        **with_spread("async_redlock5_ratio", samples["async_ratio5"]),
    }


def cluster_reps(
    plan: Plan, label: Callable[[str], None], tick: Callable[[], None]
) -> dict[str, Any]:
    from redis.cluster import RedisCluster  # noqa: PLC0415

    import redlease  # noqa: PLC0415
    from redlease.topology import LocalCluster  # noqa: PLC0415

    reps, rtt_count, count, budget_s = plan.reps, plan.rtt_ops, plan.cycles, plan.budget_s
    names = [f"rlbench:cluster:{index}" for index in range(CLUSTER_NAMES)]
    samples: dict[str, list[float]] = {"rtt": [], "node_rtt": [], "cycle": [], "ratio": []}
    cpu: list[float] = []
    with ExitStack() as stack:
        label("cluster: starting LocalCluster (3 masters + 3 replicas)")
        cluster = LocalCluster()
        stack.callback(cluster.stop)
        cluster.start()
        client = RedisCluster.from_url(cluster.url)
        stack.callback(client.close)
        node = redis.Redis.from_url(cluster.url)  # one master, plain client: the floor
        stack.callback(node.close)
        locks = redlease.Locks(client)
        stack.callback(locks.close)
        sha = client.script_load(RTT_SCRIPT)
        spread_over = Counter(
            client.get_node_from_key(locks._keys_for(name).lease).port for name in names
        )
        rtt_keys = itertools.cycle(names)
        lock_names = itertools.cycle(names)

        def one_rtt() -> None:
            client.evalsha(sha, 1, next(rtt_keys))

        def one_cycle() -> None:
            with locks.lock(next(lock_names)):
                pass

        for rep in range(reps):
            label(f"cluster: rep {rep + 1}/{reps}")
            rtt = time_loop(one_rtt, rtt_count, budget_s).us
            samples["rtt"].append(rtt)
            samples["node_rtt"].append(evalsha_rtt(node, rtt_count, budget_s).us)
            timed = time_loop(one_cycle, count, budget_s)
            samples["cycle"].append(timed.us)
            samples["ratio"].append(timed.us / rtt)
            cpu.append(timed.cpu_us)
            tick()
    return {
        "cluster_masters": len(spread_over),
        "cluster_names_per_master": sorted(spread_over.values()),
        "cluster_rtt_us": median(samples["rtt"]),
        "cluster_node_rtt_us": median(samples["node_rtt"]),
        **with_spread("cluster_cycle_us", samples["cycle"]),
        "cluster_cycle_cpu_us": median(cpu),
        **with_spread("cluster_cycle_rtt", samples["ratio"]),
    }
