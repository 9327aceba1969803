"""Redis Cluster: every lock lives on its slot's master, and failovers do not lose it.

The docs promise, per slot, what Sentinel promises per server: a lock's keys stay in one
slot; wake-ups travel by sharded pub/sub on that slot's node, over one pub/sub connection
per node; renewals are batched per slot and node; a multi-lock across slots is taken in
order, all or none, without deadlock; and after a failover the holder, its renewals and
its waiters follow the slot's new master.

Non-destructive scenarios share the session cluster. A graceful failover leaves it
healthy (with other masters); the crash test restarts the node it killed and waits until
the cluster is ok again.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster
from redis.crc import key_slot

import redlease
from conftest import (
    PRIVATE_SERVERS_ONLY,
    RENEWAL_ROUND_TRIPS,
    allowing,
    eventually,
    held_with_a_waiter,
    release_all,
    renewed_or_lost,
    renewing_ttl,
    replicas_caught_up,
    take_together,
    token_in,
)
from redlease import Lease, LockTimeout, NotReplicated, ReleaseOutcome
from redlease.server import EmbeddedServer, free_port
from redlease.sync._flavor import refresh_topology
from redlease.topology import LocalCluster
from test_bad_input import documented_acl_rule

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(90), PRIVATE_SERVERS_ONLY]


def node_client(node: EmbeddedServer) -> redis.Redis:
    return redis.Redis(port=node.port, decode_responses=True, socket_timeout=2.0)


def value_on_master(cluster: LocalCluster, key: str) -> str | None:
    """The key as its slot's master (asked directly, not through a cluster client) has it."""
    with node_client(cluster.master_for_key(key)) as client:
        return token_in(client.get(key))


def values_on_masters(cluster: LocalCluster, keys: list[str]) -> list[str | None]:
    """Many keys at once: one GET per key, pipelined to each slot's master.

    The slot map is asked once, not once per key: on a busy machine hundreds of fresh
    connections cost more than the scenario itself.
    """
    masters = {master.port: master for master in cluster.masters()}
    with node_client(next(iter(masters.values()))) as client:
        slot_map = [
            (int(first), int(last), int(owner[1]))
            for first, last, owner, *_ in client.execute_command("CLUSTER", "SLOTS")
        ]

    def owner_of(key: str) -> EmbeddedServer:
        slot = key_slot(key.encode())
        return next(masters[port] for first, last, port in slot_map if first <= slot <= last)

    owners = {key: owner_of(key) for key in keys}
    values: dict[str, str | None] = {}
    for node in set(owners.values()):
        mine = [key for key in keys if owners[key] is node]
        with node_client(node) as client:
            pipe = client.pipeline(transaction=False)
            for key in mine:
                pipe.get(key)
            values.update(zip(mine, pipe.execute(), strict=True))
    return [token_in(values[key]) for key in keys]


async def on_client(locks: Any, call: Callable[[], Any]) -> Any:
    """Run ``call`` the flavour's way: awaited (asyncio) or on the sync client's thread."""
    if isinstance(locks, redlease.AsyncLocks):
        return await call()
    return await locks.run(call)


def names_on_every_master(cluster: LocalCluster, prefix: str, per_master: int) -> list[str]:
    """Lock names whose keys spread over every master, ``per_master`` on each."""
    by_port: dict[int, list[str]] = {master.port: [] for master in cluster.masters()}
    number = 0
    while any(len(names) < per_master for names in by_port.values()):
        name = f"job-{number}"
        number += 1
        port = cluster.master_for_key(f"{prefix}:{{{name}}}").port
        if len(by_port[port]) < per_master:
            by_port[port].append(name)
    return [name for names in by_port.values() for name in names]


@pytest.fixture
def cluster(redlease_cluster: LocalCluster) -> LocalCluster:
    # A previous test may have failed over or crashed a node; start from a settled cluster.
    redlease_cluster.wait_until_ok(timeout=20)
    return redlease_cluster


@pytest.fixture
def make_cluster_locks(make_locks, cluster: LocalCluster) -> Callable[..., Awaitable[Any]]:
    async def make(**options: Any) -> Any:
        return await make_locks(cluster.url, cluster=True, **options)

    return make


async def test_locks_in_different_slots_live_on_their_own_masters(
    make_cluster_locks, cluster, prefix
):
    locks = await make_cluster_locks()
    names = names_on_every_master(cluster, prefix, per_master=2)
    assert len({key_slot(f"{prefix}:{{{name}}}".encode()) for name in names}) == len(names)

    leases = [await locks.lock(name, ttl=10).acquire() for name in names]

    for name, lease in zip(names, leases, strict=True):
        assert value_on_master(cluster, f"{prefix}:{{{name}}}") == lease.token
    for name in names:
        assert await locks.lock(name).release() is ReleaseOutcome.RELEASED
        assert value_on_master(cluster, f"{prefix}:{{{name}}}") is None


async def test_waiters_on_every_node_wake_by_hand_off_over_one_connection_per_node(
    make_cluster_locks, cluster, prefix, round_trip
):
    holder = await make_cluster_locks()
    waiting = await make_cluster_locks()
    names = names_on_every_master(cluster, prefix, per_master=2)
    held = {name: await holder.lock(name, ttl=30).acquire() for name in names}

    if isinstance(waiting, redlease.AsyncLocks):
        tasks = [
            asyncio.create_task(waiting.lock(name, owner=name).acquire(timeout=20))
            for name in names
        ]

        async def woken() -> list[Lease]:
            return list(await asyncio.gather(*tasks))
    else:
        # One thread per waiter: a sync acquire blocks its thread while it waits.
        loop = asyncio.get_running_loop()
        futures = [
            loop.run_in_executor(
                None,
                lambda name=name: waiting.locks.lock(name, owner=name).acquire(timeout=20),
            )
            for name in names
        ]

        async def woken() -> list[Lease]:
            return list(await asyncio.gather(*futures))

    assert await eventually(lambda: len(waiting._notifier.channels()) == len(names), 5)
    connections = waiting._notifier.connections()
    assert 1 <= connections <= len(cluster.masters()), f"{connections} pub/sub connections"

    released_at = time.monotonic()
    for name in names:
        await holder.lock(name).release()
    leases = await asyncio.wait_for(woken(), 10)
    waited = time.monotonic() - released_at

    assert waited < allowing(round_trip, quiet=1.0), (
        f"hand-off took {waited:.2f} s; the holders' TTL was 30 s"
    )
    for name, lease in zip(names, leases, strict=True):
        assert lease.fence > held[name].fence
        assert value_on_master(cluster, f"{prefix}:{{{name}}}") == lease.token
    for name in names:  # taken with an explicit owner, so any task or thread may release
        assert await waiting.lock(name, owner=name).release() is ReleaseOutcome.RELEASED


async def test_two_hundred_renewing_leases_renew_in_few_round_trips(
    make_cluster_locks, cluster, prefix, round_trip
):
    locks = await make_cluster_locks()
    names = [f"shard-{number}" for number in range(200)]
    assert len({key_slot(f"{prefix}:{{{name}}}".encode()) for name in names}) > 150

    ttl = renewing_ttl(round_trip, quiet=0.6)
    # Taken within a third of the TTL: at most three batches of renewals.
    leases = await take_together(locks, names, owner="shards", ttl=ttl, within=1 / 3)
    ttl = leases[0].ttl  # longer than asked if the machine was too busy to take them together
    # Three renewals, a third of the TTL apart, are done about one TTL after the last grant.
    assert await eventually(
        lambda: renewed_or_lost(leases, 3),
        within=ttl + allowing(round_trip, quiet=1.0, round_trips=RENEWAL_ROUND_TRIPS),
    )

    assert [lease.name for lease in leases if lease.lost] == []
    assert min(lease.renewals for lease in leases) >= 3
    renewed = sum(lease.renewals for lease in leases)
    round_trips = locks._renewer.round_trips
    assert 0 < round_trips <= renewed / 50, f"{renewed} renewals took {round_trips} round trips"
    keys = [f"{prefix}:{{{name}}}" for name in names]
    # In a thread: the asyncio flavour's renewal task must keep running meanwhile.
    on_server = await asyncio.to_thread(values_on_masters, cluster, keys)
    assert on_server == [lease.token for lease in leases]
    outcomes = await release_all(locks, names, owner="shards")
    assert set(outcomes) == {ReleaseOutcome.RELEASED}


def multi_lock(locks: Any, names: list[str], **options: Any) -> Any:
    """The flavour's multi-lock (the sync one is driven through :func:`on_client`)."""
    if isinstance(locks, redlease.AsyncLocks):
        return locks.multi_lock(names, **options)
    return locks.locks.multi_lock(names, **options)


def two_names_in_different_slots(cluster: LocalCluster, prefix: str) -> tuple[str, str]:
    first, second = names_on_every_master(cluster, prefix, per_master=1)[:2]
    return first, second


async def test_multi_lock_across_slots_takes_all_or_none(make_cluster_locks, cluster, prefix):
    locks = await make_cluster_locks()
    rival = await make_cluster_locks()
    first, second = two_names_in_different_slots(cluster, prefix)
    multi = multi_lock(locks, [first, second])
    await rival.lock(second, ttl=30).acquire()

    with pytest.raises(LockTimeout):
        await on_client(locks, lambda: multi.acquire(timeout=0.3))

    assert value_on_master(cluster, f"{prefix}:{{{first}}}") is None, "nothing kept on failure"
    await rival.lock(second).release()
    held = await on_client(locks, lambda: multi.acquire(timeout=5))
    assert len(held.fences) == 2
    assert value_on_master(cluster, f"{prefix}:{{{first}}}") is not None
    assert value_on_master(cluster, f"{prefix}:{{{second}}}") is not None
    assert await on_client(locks, multi.release) is ReleaseOutcome.RELEASED
    assert value_on_master(cluster, f"{prefix}:{{{first}}}") is None
    assert value_on_master(cluster, f"{prefix}:{{{second}}}") is None


async def test_multi_locks_in_opposite_orders_do_not_deadlock(make_cluster_locks, cluster, prefix):
    first, second = two_names_in_different_slots(cluster, prefix)
    inside: list[str] = []
    overlaps: list[tuple[str, ...]] = []

    async def worker(label: str, names: list[str], rounds: int) -> int:
        locks = await make_cluster_locks()
        multi = multi_lock(locks, names)
        for _ in range(rounds):
            await on_client(locks, lambda: multi.acquire(timeout=10))
            inside.append(label)
            if len(inside) > 1:
                overlaps.append(tuple(inside))
            await asyncio.sleep(0.005)
            inside.remove(label)
            await on_client(locks, multi.release)
        return rounds

    done = await asyncio.wait_for(
        asyncio.gather(
            worker("ab", [first, second], 15),
            worker("ba", [second, first], 15),
        ),
        30,
    )

    assert done == [15, 15]
    assert overlaps == [], "both multi-locks were held at once"


async def test_holder_waiter_and_renewal_follow_a_graceful_failover(
    make_cluster_locks, cluster, prefix, round_trip
):
    key = f"{prefix}:{{payroll}}"
    ttl = renewing_ttl(round_trip, quiet=3)
    holder, waiting, lease, waiter = await held_with_a_waiter(
        make_cluster_locks, "payroll", ttl, 30, {"ttl": ttl, "renew": True}
    )
    old_master = cluster.master_for_key(key)

    new_master = await asyncio.to_thread(cluster.failover, old_master)

    assert cluster.master_for_key(key) is new_master is not old_master
    assert value_on_master(cluster, key) == lease.token, "the grant was replicated"
    renewals_before = lease.renewals
    await asyncio.sleep(5 * ttl / 6)  # past where an unrenewed lease would have ended
    assert not lease.lost, lease.lost_reason
    assert lease.renewals > renewals_before, "renewal continues on the new master"
    assert not waiter.done(), "the waiter keeps waiting while the lock is held"
    with node_client(new_master) as client:
        assert client.pttl(key) > ttl * 1000 / 3

    released_at = time.monotonic()
    assert await holder.lock("payroll").release() is ReleaseOutcome.RELEASED
    handed = await asyncio.wait_for(waiter, 10)
    waited = time.monotonic() - released_at

    assert handed.fence > lease.fence
    assert waited < allowing(round_trip, quiet=1.0), (
        f"the waiter took {waited:.2f} s; its wake-up did not follow the slot"
    )
    # A failover that ends in a takeover can leave the old master accepting writes for a
    # moment (Redis Cluster's documented window); a grant made there vanishes. What the
    # library promises is that its holder then learns the lease is lost.
    assert await eventually(
        lambda: value_on_master(cluster, key) == handed.token or handed.lost, 5
    ), "the waiter's lease is neither on the slot's master nor reported lost"
    await waiting.lock("payroll", owner="w").release()


@pytest.mark.timeout(120)
async def test_clients_recover_after_their_slots_master_crashes(
    make_cluster_locks, cluster, prefix
):
    locks = await make_cluster_locks()
    key = f"{prefix}:{{ledger}}"
    crashed = cluster.master_for_key(key)
    # The lease must outlive the failover, which on a loaded machine can take several
    # elections (a master votes for one failover of a given master per 2 x node timeout):
    # longer than the 20 s the test waits for the cluster to be ok (at 20 s a CI run saw
    # the lease expire on the promoted replica before its first renewal got there).
    ttl = 30
    lease = await locks.lock("ledger", ttl=ttl, renew=True).acquire()
    with node_client(crashed) as client:
        assert replicas_caught_up(client, key, 1, 5000) == 1, "the replica has the grant"

    cluster.kill(crashed)
    try:
        await asyncio.to_thread(cluster.wait_until_ok, 20)
        promoted = cluster.master_for_key(key)
        assert promoted is not crashed

        renewed = lease.renewals
        assert await eventually(lambda: lease.renewals > renewed or lease.lost, ttl / 3 + 8)
        assert not lease.lost, lease.lost_reason
        assert value_on_master(cluster, key) == lease.token
        assert await locks.lock("ledger").release() is ReleaseOutcome.RELEASED

        again = await locks.lock("ledger", ttl=5).acquire(timeout=10)
        assert value_on_master(cluster, key) == again.token
        assert again.fence > lease.fence
        assert await locks.lock("ledger").release() is ReleaseOutcome.RELEASED
    finally:
        crashed.restart()
        await asyncio.to_thread(cluster.wait_until_ok, 20)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("fault", ["crash", "freeze"])
async def test_waiters_are_handed_the_lock_after_their_slots_master_fails(
    make_cluster_locks, cluster, prefix, round_trip, fault
):
    """The waiter's wake-up channel moves to the promoted replica with its slot: the release
    after the failover hands it the lock within seconds, not at the holder's TTL (as when
    the channel stayed behind on the old node). A crashed master breaks the wake-up
    connection; a frozen one (paused or cut off) keeps it open and silent, and the waiter's
    unanswered PING makes the client ask where its slot lives now."""
    key = f"{prefix}:{{wages}}"
    failed = cluster.master_for_key(key)
    holder, waiting, lease, waiter = await held_with_a_waiter(
        make_cluster_locks, "wages", 30, 60, {"ttl": 30}
    )
    with node_client(failed) as client:
        # queued before the fault: one that starts waiting during it may fail (guarantees.md)
        assert await eventually(lambda: client.llen(f"{key}:queue") == 1, 5)
        assert replicas_caught_up(client, key, 1, 5000) == 1, (
            "the replica has the grant and the queue"
        )
    if fault == "crash":
        cluster.kill(failed)
    else:
        failed.pause()
    try:
        await asyncio.to_thread(cluster.wait_until_ok, 40)
        assert cluster.master_for_key(key) is not failed
        # the holder's client may still send its release to a frozen master first
        assert await holder.lock("wages").release() is ReleaseOutcome.RELEASED
        released_at = time.monotonic()
        handed = await asyncio.wait_for(waiter, 40)
        waited = time.monotonic() - released_at
        quiet = 3.0 if fault == "crash" else 5.0
        assert waited < allowing(round_trip, quiet=quiet), f"the hand-off took {waited:.2f} s"
        assert handed.fence > lease.fence
        assert await waiting.lock("wages", owner="w").release() is ReleaseOutcome.RELEASED
    finally:
        if fault == "crash":
            failed.restart()
        else:
            failed.resume()
        await asyncio.to_thread(cluster.wait_until_ok, 30)


@pytest.mark.timeout(120)
async def test_a_waiter_behind_a_silent_cluster_ends_by_its_timeout(
    make_cluster_locks, cluster, prefix, round_trip
):
    """A waiter that finds its wake-up connection silent has the client ask where the
    slots went, which waits on silent nodes for the client's socket timeout (5 s). That
    runs in the background: with every node paused, a waiter whose time runs out meanwhile
    still ends within about a second of its timeout (it was held up by the asking)."""
    timeout = 3.0
    began = time.monotonic()
    *_, waiter = await held_with_a_waiter(make_cluster_locks, "hush", 30, timeout, {"ttl": 30})
    key = f"{prefix}:{{hush}}"
    with node_client(cluster.master_for_key(key)) as client:  # subscribed, then queued
        assert await eventually(lambda: client.llen(f"{key}:queue") == 1, 5)
    for node in cluster.nodes:
        node.pause()
    try:
        with pytest.raises((LockTimeout, redlease.ServerUnavailable)):
            await asyncio.wait_for(waiter, 60)
        took = time.monotonic() - began
    finally:
        for node in cluster.nodes:
            node.resume()
        await asyncio.to_thread(cluster.wait_until_ok, 30)
    assert took < timeout + 1 + allowing(round_trip, quiet=1.0), f"it ended after {took:.2f} s"


@pytest.mark.timeout(120)
async def test_close_leaves_a_move_off_a_silent_cluster_behind(
    make_cluster_locks, cluster, prefix, round_trip, flavor
):
    """guide.md: ``close()`` waits up to 1 s for background work. A client moving its
    wake-up channels off a silent node asks the nodes for the slot map, each for up to the
    socket timeout (5 s): with every node paused, its close() still returns within a second,
    and the move, once the nodes answer again, finds the client closed and opens nothing."""
    timeout = 3.0
    *_, waiting, _, waiter = await held_with_a_waiter(
        make_cluster_locks, "mute", 30, timeout, {"ttl": 30}
    )
    locks = waiting if flavor == "async" else waiting.locks
    notifier = locks._notifier
    with node_client(cluster.master_for_key(f"{prefix}:{{mute}}")) as client:
        assert await eventually(lambda: client.llen(f"{prefix}:{{mute}}:queue") == 1, 5)
    for node in cluster.nodes:
        node.pause()
    try:
        with pytest.raises((LockTimeout, redlease.ServerUnavailable)):
            await asyncio.wait_for(waiter, 60)
        movers = [link.mover for link in notifier._links.values() if link.moving()]
        assert movers, "the client is moving its channels off the silent node"
        started = time.monotonic()
        await (locks.aclose() if flavor == "async" else asyncio.to_thread(locks.close))
        took = time.monotonic() - started
    finally:
        for node in cluster.nodes:
            node.resume()
        await asyncio.to_thread(cluster.wait_until_ok, 30)
    assert took < 1 + allowing(round_trip, quiet=1.0), f"close() took {took:.2f} s"
    assert await eventually(lambda: not any(mover.alive() for mover in movers), 30)
    assert notifier.connections() == 0, "the late move opened a link"
    assert not notifier._links


async def test_a_client_made_from_a_url_closes_its_connections_on_every_node(
    cluster, prefix, flavor
):
    """guide.md: a client made from a URL closes the connections it opened. redis-py's sync
    cluster client leaves its nodes' connections open at close(), until it is collected."""
    name = f"closing-{prefix}"
    url = f"{cluster.url}?client_name={name}"
    names = names_on_every_master(cluster, prefix, per_master=1)

    def ours() -> int:
        count = 0
        for node in cluster.nodes:
            with node_client(node) as admin:
                count += sum(client["name"] == name for client in admin.client_list())
        return count

    if flavor == "async":
        locks: Any = redlease.AsyncLocks(url, cluster=True, prefix=prefix)
        for lock_name in names:
            async with locks.lock(lock_name):
                pass
        await locks.aclose()
    else:

        def cycle_and_close() -> None:
            with redlease.Locks(url, cluster=True, prefix=prefix) as locks:
                for lock_name in names:
                    with locks.lock(lock_name):
                        pass
                assert ours() >= len(names)

        await asyncio.to_thread(cycle_and_close)
    assert await eventually(lambda: ours() == 0, 5), f"{ours()} connections left open"


def test_a_slot_map_refresh_asks_a_silent_node_last(cluster, monkeypatch):
    """Asking a paused node for the slot map waits out the socket timeout; the refresh
    made when a node is found silent asks it last. (The node is put first in the client's
    startup nodes and redis-py's shuffle of them is fixed, so it would be asked first.)"""
    client = redis.cluster.RedisCluster.from_url(cluster.url, socket_timeout=3)
    silent = cluster.masters()[0]
    startup = client.nodes_manager.startup_nodes
    name = next(node for node in startup if node.endswith(f":{silent.port}"))
    for other in [node for node in startup if node != name]:
        startup[other] = startup.pop(other)
    monkeypatch.setattr(random, "shuffle", lambda nodes: None)
    silent.pause()
    try:
        started = time.monotonic()
        refresh_topology(client, avoid=name)
        took = time.monotonic() - started
    finally:
        silent.resume()
        client.close()
        cluster.wait_until_ok(30)
    assert took < 1.5, f"the refresh took {took:.2f} s"


@pytest.mark.timeout(180)
async def test_two_waiters_of_one_client_are_handed_the_lock_in_turn_after_a_master_crash(
    make_cluster_locks, cluster, prefix, round_trip, flavor
):
    """Two waiters of one client share its channel in the slot; the second joined the
    queue just before the crash. Each release after the failover hands the lock on within
    round trips and the notifier's move to the new owner: neither waits out a lease.
    (Their order can change: a release before the move finds nobody listening, and both
    try again once woken.)"""
    key = f"{prefix}:{{salary}}"
    queue = f"{prefix}:{{salary}}:queue"
    crashed = cluster.master_for_key(key)
    holder, waiting, lease, first = await held_with_a_waiter(
        make_cluster_locks, "salary", 30, 90, {"ttl": 30}
    )
    with node_client(crashed) as client:
        assert await eventually(lambda: client.llen(queue) == 1, 5)
        other = waiting.locks if flavor == "sync" else waiting  # its own thread
        acquire = other.lock("salary", owner="w2", ttl=30).acquire
        second = asyncio.create_task(
            asyncio.to_thread(acquire, timeout=90) if flavor == "sync" else acquire(timeout=90)
        )
        assert await eventually(lambda: client.llen(queue) == 2, 5)
    cluster.kill(crashed)
    try:
        await asyncio.to_thread(cluster.wait_until_ok, 30)
        assert cluster.master_for_key(key) is not crashed
        bound = allowing(round_trip, quiet=3.0)
        owners = {first: "w", second: "w2"}
        fences = [lease.fence]
        releasing = holder.lock("salary")
        for turn in ("first", "second"):
            released_at = time.monotonic()
            assert await releasing.release() is ReleaseOutcome.RELEASED
            done, _ = await asyncio.wait(owners, timeout=60, return_when=asyncio.FIRST_COMPLETED)
            waited = time.monotonic() - released_at
            assert waited < bound, f"the {turn} hand-off took {waited:.2f} s"
            task = done.pop()
            fences.append(task.result().fence)
            releasing = other.lock("salary", owner=owners.pop(task))
            if flavor == "sync":  # not on the client's test thread, busy with a waiter
                releasing.release = functools.partial(asyncio.to_thread, releasing.release)
        assert await releasing.release() is ReleaseOutcome.RELEASED
        assert fences == sorted(set(fences))
    finally:
        crashed.restart()
        await asyncio.to_thread(cluster.wait_until_ok, 20)


async def test_a_multi_lock_across_slots_a_replica_does_not_confirm_is_not_replicated(
    make_cluster_locks, cluster, prefix, round_trip
):
    """It raised the client's internal ``ReplicaShortfall``, which neither ``except
    NotReplicated`` nor ``except LockError`` catches."""
    locks = await make_cluster_locks(replicas=1, replica_timeout=allowing(round_trip, quiet=0.3))
    first, second = sorted(two_names_in_different_slots(cluster, prefix))
    (replica,) = cluster.replicas_of(cluster.master_for_key(f"{prefix}:{{{second}}}"))
    replica.pause()
    try:
        with pytest.raises(NotReplicated):
            await on_client(locks, lambda: multi_lock(locks, [first, second]).acquire(timeout=0))
    finally:
        replica.resume()
    assert value_on_master(cluster, f"{prefix}:{{{first}}}") is None, "every part given back"
    assert value_on_master(cluster, f"{prefix}:{{{second}}}") is None


async def test_a_multi_lock_keeps_the_parts_it_holds_alive_while_it_waits_for_the_rest(
    make_cluster_locks, cluster, prefix
):
    locks, rival, thief = [await make_cluster_locks() for _ in range(3)]
    first, second = sorted(two_names_in_different_slots(cluster, prefix))  # taken in this order
    await rival.lock(second, ttl=30).acquire()
    multi = multi_lock(locks, [first, second], ttl=2, owner="multi")
    pending = asyncio.create_task(on_client(locks, lambda: multi.acquire(timeout=15)))
    assert await eventually(lambda: value_on_master(cluster, f"{prefix}:{{{first}}}"), 5)
    stolen = None
    deadline = time.monotonic() + 3.5  # well past the parts' 2 s TTL
    while time.monotonic() < deadline and stolen is None:
        stolen = await thief.lock(first, ttl=30).try_acquire()
        await asyncio.sleep(0.05)
    await rival.lock(second).release()
    held = await pending
    assert stolen is None, "the part taken first expired while the multi-lock waited"
    tokens = {lease.name: lease.token for lease in held.leases}
    assert value_on_master(cluster, f"{prefix}:{{{first}}}") == tokens[first]
    assert value_on_master(cluster, f"{prefix}:{{{second}}}") == tokens[second]
    assert await on_client(locks, multi.release) is ReleaseOutcome.RELEASED


def two_names_in_one_slot(prefix: str) -> tuple[str, str]:
    """Two lock names whose keys hash to the same cluster slot."""
    seen: dict[int, str] = {}
    number = 0
    while True:
        name = f"same-{number}"
        number += 1
        slot = key_slot(f"{prefix}:{{{name}}}".encode())
        if slot in seen:
            return seen[slot], name
        seen[slot] = name


async def test_a_multi_lock_whose_names_share_a_slot_is_taken_in_one_script(
    make_cluster_locks, cluster, prefix
):
    locks = await make_cluster_locks()
    first, second = two_names_in_one_slot(prefix)
    node = cluster.master_for_key(f"{prefix}:{{{first}}}")
    seen: list[str] = []
    stop = asyncio.Event()

    def watch() -> None:
        with node_client(node) as client, client.monitor() as monitor:
            for event in monitor.listen():
                seen.append(event["command"])
                if "PING" in event["command"] and stop.is_set():
                    return

    watcher = asyncio.create_task(asyncio.to_thread(watch))
    await asyncio.sleep(0.2)
    multi = multi_lock(locks, [first, second])
    held = await on_client(locks, lambda: multi.acquire(timeout=5))
    await on_client(locks, multi.release)
    stop.set()
    with node_client(node) as client:
        client.ping()
    await asyncio.wait_for(watcher, 10)
    scripts = [command for command in seen if "EVALSHA" in command.upper()]
    assert any(redlease_multi_sha() in command for command in scripts), scripts
    assert len(held.fences) == 2


def redlease_multi_sha() -> str:
    from redlease.scripts import ScriptName  # noqa: PLC0415

    return ScriptName.MULTI_ACQUIRE.sha


async def test_a_cluster_node_url_without_cluster_true_is_followed(cluster, prefix, flavor):
    names = names_on_every_master(cluster, prefix, per_master=1)
    if flavor == "async":
        locks: Any = redlease.AsyncLocks(cluster.url, prefix=prefix)
        leases = [await locks.lock(name, ttl=10).acquire() for name in names]
        for name in names:
            await locks.lock(name).release()
        await locks.aclose()
    else:
        sync_locks = redlease.Locks(cluster.url, prefix=prefix)
        leases = await asyncio.to_thread(
            lambda: [sync_locks.lock(name, ttl=10, owner="test").acquire() for name in names]
        )  # released from another executor thread: the owner is named, not the thread
        await asyncio.to_thread(lambda: [sync_locks.lock(n, owner="test").release() for n in names])
        sync_locks.close()
    assert [lease.fence for lease in leases] == [1] * len(names)


async def test_first_calls_at_once_on_a_client_made_from_a_node_url(
    make_locks, cluster, prefix, flavor
):
    """A client made from one node's URL, without ``cluster=True``, finds the cluster at its
    first call of any kind and switches to a cluster client. Calls that start together all
    wait for that switch: each used to make it on its own, closing the client the others
    were in the middle of using (``ServerUnavailable``: connection lost, bad file
    descriptor), and a look (``locked()``) made none and met MOVED (``ServerRefused``)."""
    names = [f"first-{number}" for number in range(9)]
    url = cluster.masters()[0].url
    alone = await make_locks(url, prefix=prefix)
    assert await alone.lock("looked-at-first").locked() is False
    locks = await make_locks(url, prefix=prefix)
    if flavor == "async":

        async def take(name: str) -> object:
            lock = locks.lock(name, ttl=30, owner="o")
            if name.endswith(("1", "3", "5", "7")):
                return await lock.locked() is False
            lease = await lock.try_acquire()
            await lock.release()
            return lease

        results = await asyncio.gather(*(take(name) for name in names))
    else:
        plain = locks.locks

        def take_in_thread(name: str) -> object:
            lock = plain.lock(name, ttl=30)
            if name.endswith(("1", "3", "5", "7")):
                return lock.locked() is False
            lease = lock.try_acquire()
            lock.release()
            return lease

        with ThreadPoolExecutor(len(names)) as pool:
            results = await asyncio.to_thread(lambda: list(pool.map(take_in_thread, names)))
    assert all(result for result in results), results


def test_the_documented_permissions_work_on_a_cluster(cluster):
    """guide.md: the locking user's rule, plus ``+cluster|slots +command`` on a cluster;
    without them the client says which permission it lacks, not that the server is no
    cluster node (redis-py calls any error on CLUSTER SLOTS "cluster mode not enabled")."""
    for node in cluster.nodes:
        with node_client(node) as admin:
            admin.execute_command("ACL", "SETUSER", *documented_acl_rule(True))
    url = f"redis://locker:secret@127.0.0.1:{cluster.masters()[0].port}/0"
    with pytest.raises(redlease.ServerRefused, match=r"cluster\|slots"):
        redlease.Locks(url, cluster=True)
    for node in cluster.nodes:
        with node_client(node) as admin:
            admin.execute_command("ACL", "SETUSER", "locker", "+cluster|slots", "+command")
    with redlease.Locks(url, cluster=True) as locks:
        lease = locks.lock("granted", ttl=10).acquire(timeout=5)
        assert locks.lock("granted").release() is ReleaseOutcome.RELEASED
        assert lease.fence > 0
    no_info = pytest.raises(redlease.InvalidArgument, match="cluster=True")
    with redlease.Locks(url) as plain, no_info:
        for number in range(20):  # some land on another node than the URL's
            plain.lock(f"elsewhere-{number}", ttl=10).try_acquire()


def test_a_plain_client_on_a_cluster_node_gets_a_clear_error(cluster, prefix):
    node = cluster.masters()[0]
    with redlease.Locks(redis.Redis(port=node.port), prefix=prefix) as locks:
        with pytest.raises(redlease.InvalidArgument, match="cluster=True"):
            locks.lock("anything").acquire(timeout=0)


@pytest.mark.timeout(120)
async def test_a_cluster_with_no_node_left_is_server_unavailable_to_every_call(make_locks, prefix):
    """redis-py says "Redis Cluster cannot be connected" with an exception of its own (no
    ConnectionError); to the caller it is the server being unreachable, on the plain try
    and on the subscription of a client that met contention on the name lately."""
    cluster = LocalCluster(masters=3, replicas_per_master=0).start()
    try:
        url = cluster.url  # asked of a live node
        locks = await make_locks(url, cluster=True, prefix=prefix)
        lock = locks.lock("gone")
        await lock.acquire()
        await lock.release()
        for node in cluster.nodes:
            node.kill()
        for look in (lock.locked, lock.owned):
            with pytest.raises(redlease.ServerUnavailable):
                await look()
        with pytest.raises(redlease.ServerUnavailable):
            await lock.acquire(timeout=2)
        locks._note_contention(lock.keys.lease)  # its next acquire listens first
        with pytest.raises(redlease.ServerUnavailable):
            await lock.acquire(timeout=2)
        nowhere = f"redis://127.0.0.1:{free_port()}/0"
        for url, first_use in itertools.product((url, nowhere), ("locked", "try_acquire")):
            with pytest.raises(redlease.ServerUnavailable):  # made now: at once or at first use
                fresh = await make_locks(url, cluster=True, prefix=prefix)
                await getattr(fresh.lock("new"), first_use)()
    finally:
        cluster.stop()


async def test_a_cluster_clients_socket_timeout_bounds_the_replica_timeout(cluster, prefix):
    """Only a plain or Sentinel client's pool was read: a cluster client got
    ``ServerUnavailable`` instead of ``NotReplicated`` when a replica was missing."""
    client = redis.cluster.RedisCluster.from_url(cluster.url, socket_timeout=1)
    try:
        with pytest.raises(redlease.InvalidArgument, match="socket_timeout"):
            redlease.Locks(client, prefix=prefix, replicas=1)
    finally:
        client.close()
    on_loop = redis.asyncio.RedisCluster.from_url(cluster.url, socket_timeout=1)
    try:
        with pytest.raises(redlease.InvalidArgument, match="socket_timeout"):
            redlease.AsyncLocks(on_loop, prefix=prefix, replicas=1)
    finally:
        await on_loop.aclose()


def test_an_asyncio_cluster_client_on_a_new_event_loop_uses_no_connection_of_an_old_one(
    cluster, prefix
):
    """The per-node clients that carry pipelines (renewal rounds, WAIT after a grant) were
    kept for the whole process: a client made under a later ``asyncio.run`` was handed
    connections of a closed loop ("Event loop is closed")."""

    async def take() -> int:
        async with redlease.AsyncLocks(
            cluster.url, cluster=True, prefix=prefix, replicas=1, replica_timeout=3
        ) as locks:
            async with locks.lock("ledger", ttl=10) as lease:
                return lease.fence

    fences = [asyncio.run(take()) for _ in range(2)]
    assert fences[1] > fences[0]
