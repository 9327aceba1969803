"""Real Redis Cluster and Sentinel topologies on loopback ports, for failover tests.

:class:`LocalCluster` starts N masters with R replicas each and builds the cluster in
Python (no ``redis-cli``): config epochs, slot ranges, ``CLUSTER MEET``, ``CLUSTER
REPLICATE``. :class:`LocalSentinel` starts a master, its replicas and three sentinels.
Every process is an :class:`~redlease.server.EmbeddedServer`, so each one keeps nothing on
disk but its cluster or sentinel state, listens on 127.0.0.1 only, and dies with the
Python process that started it.

Every wait is bounded: when a topology does not settle in time, :class:`TopologyError`
says what was last seen. A failed ``start`` stops whatever it had started.

The cluster lives in :mod:`redlease.topology.cluster`, the sentinels in
:mod:`redlease.topology.sentinel`; both are importable from here.
"""

from __future__ import annotations

from redlease.topology.cluster import LocalCluster
from redlease.topology.errors import TopologyError, TopologyUnsupported
from redlease.topology.sentinel import LocalSentinel

__all__ = [
    "LocalCluster",
    "LocalSentinel",
    "TopologyError",
    "TopologyUnsupported",
]
