"""The cluster and sentinel topologies the failover tests stand on.

Each story checks what a failover test relies on: clients reach the topology, a
failover really moves the master, and a client keeps working once it has.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest
import redis
from redis.cluster import RedisCluster
from redis.sentinel import Sentinel

from conftest import PRIVATE_SERVERS_ONLY
from redlease.server import EmbeddedServer
from redlease.testing import SentinelFactory
from redlease.topology import LocalCluster, LocalSentinel, TopologyError, TopologyUnsupported

pytestmark = PRIVATE_SERVERS_ONLY

T = TypeVar("T")

RETRY_SECONDS = 15.0


def eventually(action: Callable[[], T], timeout: float = RETRY_SECONDS) -> T:
    """Run ``action`` until it stops failing on connection or read-only errors."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except (redis.ConnectionError, redis.TimeoutError, redis.ReadOnlyError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def unique(prefix: str) -> str:
    return f"{prefix}:{uuid.uuid4().hex}"


@pytest.fixture
def cluster_client(redlease_cluster: LocalCluster) -> Iterator[RedisCluster]:
    client = RedisCluster.from_url(redlease_cluster.url)
    yield client
    client.close()


@pytest.mark.cluster
def test_cluster_client_reaches_every_master(
    redlease_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    keys = [unique(f"spread{index}") for index in range(30)]
    for key in keys:
        cluster_client.set(key, key)

    assert [cluster_client.get(key) for key in keys] == [key.encode() for key in keys]
    owners = {redlease_cluster.master_for_key(key).port for key in keys}
    assert owners == {master.port for master in redlease_cluster.masters()}
    assert len(redlease_cluster.masters()) == 3
    assert len(redlease_cluster.replicas()) == 3


@pytest.mark.cluster
def test_cluster_failover_promotes_a_replica_and_the_client_follows(
    redlease_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    key = unique("failover")
    cluster_client.set(key, "before")
    old_master = redlease_cluster.master_for_key(key)

    new_master = redlease_cluster.failover(old_master)

    assert new_master is not old_master
    assert redlease_cluster.master_for_key(key) is new_master
    assert old_master in redlease_cluster.replicas()
    assert eventually(lambda: cluster_client.get(key)) == b"before"
    eventually(lambda: cluster_client.set(key, "after"))
    assert cluster_client.get(key) == b"after"


@pytest.mark.cluster
def test_crashed_cluster_master_is_replaced_and_rejoins_as_replica(
    redlease_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    key = unique("crash")
    crashed = redlease_cluster.master_for_key(key)

    redlease_cluster.kill(crashed)
    redlease_cluster.wait_until_ok(timeout=20)

    assert redlease_cluster.master_for_key(key) is not crashed
    eventually(lambda: cluster_client.set(key, "after the crash"))
    crashed.restart()
    redlease_cluster.wait_until_ok(timeout=20)
    assert crashed in redlease_cluster.replicas()
    assert len(redlease_cluster.masters()) == 3


@pytest.mark.cluster
def test_failover_from_a_paused_master_takes_over(
    redlease_cluster: LocalCluster, cluster_client: RedisCluster
) -> None:
    key = unique("paused")
    paused = redlease_cluster.master_for_key(key)
    paused.pause()
    try:
        # The polite failover needs the master's answer; half of 6 s, then TAKEOVER.
        promoted = redlease_cluster.failover(paused, timeout=6)
        eventually(lambda: cluster_client.set(key, "while paused"))
    finally:
        paused.resume()

    assert redlease_cluster.master_for_key(key) is promoted
    redlease_cluster.wait_until_ok(timeout=20)
    assert eventually(lambda: paused in redlease_cluster.replicas(), timeout=5)


@pytest.mark.sentinel
def test_sentinel_client_writes_to_the_master(redlease_sentinel: LocalSentinel) -> None:
    sentinel = Sentinel(redlease_sentinel.sentinel_addresses, socket_timeout=1.0)
    master = sentinel.master_for(redlease_sentinel.service_name, socket_timeout=1.0)

    master.set("key", "value")

    assert master.get("key") == b"value"
    assert sentinel.discover_master(redlease_sentinel.service_name) == (
        redlease_sentinel.master_address()
    )
    assert redlease_sentinel.master() is redlease_sentinel.servers[0]
    master.close()


@pytest.mark.sentinel
def test_sentinel_client_follows_a_failover(redlease_sentinel: LocalSentinel) -> None:
    sentinel = Sentinel(redlease_sentinel.sentinel_addresses, socket_timeout=1.0)
    master = sentinel.master_for(redlease_sentinel.service_name, socket_timeout=1.0)
    master.set("key", "before")
    old_address = redlease_sentinel.master_address()

    new_address = redlease_sentinel.failover()

    assert new_address != old_address
    eventually(lambda: master.set("key", "after"))
    assert master.get("key") == b"after"
    assert sentinel.discover_master(redlease_sentinel.service_name) == new_address
    master.close()


@pytest.mark.sentinel
def test_sentinels_replace_a_crashed_master(redlease_sentinel: LocalSentinel) -> None:
    crashed = redlease_sentinel.kill_master()

    deadline = time.monotonic() + RETRY_SECONDS
    while redlease_sentinel.master_address()[1] == crashed.port:
        assert time.monotonic() < deadline, "the sentinels never replaced the master"
        time.sleep(0.1)

    assert redlease_sentinel.master() is not crashed


@pytest.mark.sentinel
def test_stopped_topology_leaves_no_process(redlease_sentinel_factory: SentinelFactory) -> None:
    topology = redlease_sentinel_factory(replicas=1)
    processes = [*topology.servers, *topology.sentinels]

    topology.stop()

    assert all(process.pid is None for process in processes)


@pytest.mark.cluster
def test_cluster_with_an_unknown_option_is_unsupported() -> None:
    cluster = LocalCluster(masters=1, replicas_per_master=0, args=["--no-such-option", "x"])

    with pytest.raises(TopologyUnsupported, match="Bad directive"):
        cluster.start()


@pytest.mark.cluster
def test_cluster_that_does_not_settle_leaves_no_process() -> None:
    started: list[EmbeddedServer] = []

    class RecordingCluster(LocalCluster):
        def _build(self) -> None:
            started.extend(self.nodes)
            super()._build()

    with pytest.raises(TopologyError) as failed:
        RecordingCluster(masters=2, replicas_per_master=0, timeout=0.0).start()

    if isinstance(failed.value, TopologyUnsupported):
        pytest.skip(f"this server cannot run a cluster: {failed.value}")
    assert "gave up waiting" in str(failed.value)
    assert len(started) == 2
    assert all(node.pid is None for node in started)
