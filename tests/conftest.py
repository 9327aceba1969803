"""Shared fixtures: every scenario runs against a real server, once per flavour.

Scenarios are written once as ``async def`` tests. The ``make_locks`` fixture hands out
either an :class:`~redlease.AsyncLocks` or a sync :class:`~redlease.Locks` behind an
adapter that runs each call on one dedicated thread (so thread ownership behaves as in
a real program) and awaits it. Keys live under a prefix unique to the test, so the
suite can also run against a shared server given by ``REDIS_URL``.

The suite must hold on a busy two-core machine, so a test takes its slack from the
``round_trip`` fixture (how long a round trip to the server takes right now) and the
lease, never from what a quiet machine manages.
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import pytest_asyncio
import redis

import redlease
from redlease.core.lease import Lease
from redlease.core.owner import Owner
from redlease.keys import LockKeys
from redlease.server import EmbeddedServer


class SyncLockAdapter:
    """Awaitable face of a sync :class:`~redlease.Lock`, driven on its client's thread."""

    def __init__(self, owner: SyncLocksAdapter, lock: redlease.Lock) -> None:
        self._owner = owner
        self.lock = lock
        self.name = lock.name
        self.keys = lock.keys

    @property
    def lease(self) -> Lease | None:
        return self.lock._locks._held(self.name, self.lock._explicit_owner or self._owner.thread)

    async def acquire(self, *args: Any, **kwargs: Any) -> Lease:
        return await self._owner.run(self.lock.acquire, *args, **kwargs)

    async def try_acquire(self) -> Lease | None:
        return await self._owner.run(self.lock.try_acquire)

    async def release(self) -> redlease.ReleaseOutcome:
        return await self._owner.run(self.lock.release)

    async def extend(self, *args: Any, **kwargs: Any) -> Lease:
        return await self._owner.run(self.lock.extend, *args, **kwargs)

    async def locked(self) -> bool:
        return await self._owner.run(self.lock.locked)

    async def owned(self) -> bool:
        return await self._owner.run(self.lock.owned)

    async def __aenter__(self) -> Lease:
        return await self._owner.run(self.lock.__enter__)

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._owner.run(self.lock.__exit__, *exc_info)


class SyncLocksAdapter:
    """Awaitable face of a sync :class:`~redlease.Locks`; all calls on one thread."""

    def __init__(self, locks: redlease.Locks) -> None:
        self.locks = locks
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="sync-flavour")
        thread = self._executor.submit(threading.current_thread).result()
        self.thread = Owner("thread", thread)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.locks, name)

    async def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, functools.partial(function, *args, **kwargs)
        )

    def lock(self, name: str, **options: Any) -> SyncLockAdapter:
        return SyncLockAdapter(self, self.locks.lock(name, **options))

    def fair_lock(self, name: str, **options: Any) -> SyncLockAdapter:
        return SyncLockAdapter(self, self.locks.fair_lock(name, **options))

    async def aclose(self) -> None:
        await self.run(self.locks.close)
        self._executor.shutdown(wait=True)


LocksFactory = Callable[..., Awaitable[Any]]

ROUND_TRIP_SAMPLES = 10
RENEWAL_ROUND_TRIPS = 20
"""Round trips a renewal may take to land: with renewal at a third of the TTL, the TTL
then spans 1.5 times as many."""
TAKE_CONCURRENCY = 20
"""Acquisitions in flight at once when a test takes many locks together."""


PRIVATE_SERVERS_ONLY = pytest.mark.skipif(
    bool(os.environ.get("REDIS_URL")) and not os.environ.get("REDLEASE_SERVER_BINARY"),
    reason="runs on private servers whatever REDIS_URL says: the pass without it ran this",
)
"""For tests that never use the test server: a pass against an external server (CI's second
one) would only repeat them, unless ``REDLEASE_SERVER_BINARY`` makes the private servers
another kind (CI's Redis 6.2 pass)."""


@pytest.fixture(scope="session", autouse=True)
def ctrl_c_answered() -> Iterator[None]:
    """Ctrl-C tests need SIGINT to interrupt. A suite started in the background of a shell
    script (``pytest &``) inherits SIGINT ignored, and so would every process it starts:
    Python then leaves it ignored, and those tests wait for an interruption that never
    comes. Answer it as an interactive run does; children started later get the default."""
    if signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def measure_round_trip(url: str, samples: int = ROUND_TRIP_SAMPLES) -> float:
    """The slowest of ``samples`` PINGs to ``url``: what a round trip costs right now.

    On a busy machine most of it is waiting to be scheduled (the server, then us), which
    is what stretches every step a test waits for, so bounds scale with it.
    """
    with redis.Redis.from_url(url, socket_timeout=10) as client:
        client.ping()  # connected before timing
        slowest = 0.0
        for _ in range(samples):
            started = time.perf_counter()
            client.ping()
            slowest = max(slowest, time.perf_counter() - started)
    return slowest


def allowing(round_trip: float, quiet: float, round_trips: float = 10) -> float:
    """A bound on a step: ``quiet`` seconds, or ``round_trips`` round trips when longer."""
    return max(quiet, round_trips * round_trip)


def renewing_ttl(round_trip: float, quiet: float) -> float:
    """A TTL renewal keeps alive on this machine now: ``quiet``, or longer when it is busy.

    Renewal goes out at a third of the TTL; the other two thirds must cover the renewal
    worker being scheduled and its round trip, :data:`RENEWAL_ROUND_TRIPS` round trips.
    """
    return max(quiet, 1.5 * RENEWAL_ROUND_TRIPS * round_trip)


@pytest.fixture
def round_trip(redlease_url: str) -> float:
    """Seconds one round trip to the test server takes now (see :func:`measure_round_trip`)."""
    return measure_round_trip(redlease_url)


def renewed_or_lost(leases: list[Lease], times: int) -> bool:
    """Every lease renewed ``times`` times, or one lost (then waiting longer is pointless)."""
    return all(lease.renewals >= times for lease in leases) or any(lease.lost for lease in leases)


async def acquire_all(
    locks: Any, names: list[str], *, owner: Hashable, **options: Any
) -> list[Lease]:
    """Take every lock in ``names`` for ``owner``, :data:`TAKE_CONCURRENCY` at a time.

    Concurrent, so that on a busy machine the leases are still taken close together;
    the flavour's own way: tasks for asyncio, threads for sync.
    """
    if isinstance(locks, redlease.AsyncLocks):
        gate = asyncio.Semaphore(TAKE_CONCURRENCY)

        async def take(name: str) -> Lease:
            async with gate:
                lease: Lease = await locks.lock(name, owner=owner, **options).acquire()
                return lease

        return list(await asyncio.gather(*(take(name) for name in names)))
    client: redlease.Locks = locks.locks

    def take(name: str) -> Lease:
        return client.lock(name, owner=owner, **options).acquire()

    def take_all() -> list[Lease]:
        if not names:
            return []
        # The first grant alone: threads that each take a client's first renewing lease
        # race to start its renewal thread and may start several (a library bug, reported).
        first = take(names[0])
        with ThreadPoolExecutor(TAKE_CONCURRENCY, thread_name_prefix="take-all") as pool:
            return [first, *pool.map(take, names[1:])]

    return await asyncio.to_thread(take_all)


async def release_all(locks: Any, names: list[str], *, owner: Hashable) -> list[Any]:
    """Release every lock in ``names`` held by ``owner``, as :func:`acquire_all` took them."""
    if isinstance(locks, redlease.AsyncLocks):
        gate = asyncio.Semaphore(TAKE_CONCURRENCY)

        async def give_back(name: str) -> Any:
            async with gate:
                return await locks.lock(name, owner=owner).release()

        return list(await asyncio.gather(*(give_back(name) for name in names)))
    client: redlease.Locks = locks.locks

    def give_all_back() -> list[Any]:
        with ThreadPoolExecutor(TAKE_CONCURRENCY, thread_name_prefix="release-all") as pool:
            return list(pool.map(lambda name: client.lock(name, owner=owner).release(), names))

    return await asyncio.to_thread(give_all_back)


async def take_together(
    locks: Any,
    names: list[str],
    *,
    owner: Hashable,
    ttl: float,
    within: float = 1 / 3,
    **options: Any,
) -> list[Lease]:
    """Take ``names`` as renewing leases, all within ``within`` of a TTL of each other.

    Renewals batch leases taken at nearby moments (due within a sixth of the TTL of each
    other), so a test of batching needs its leases taken close together *relative to the
    TTL*. When the machine is too busy for that at ``ttl``, the leases are given back and
    taken again with a TTL long enough for the time taking them took (twice at most).
    """
    for _ in range(3):
        leases = await acquire_all(locks, names, owner=owner, ttl=ttl, renew=True, **options)
        taken = [lease.acquired_at for lease in leases]
        spread = max(taken) - min(taken)
        if spread <= within * ttl:
            return leases
        await release_all(locks, names, owner=owner)
        ttl = 1.5 * spread / within
    raise AssertionError(f"could not take {len(names)} leases within {within:g} of a {ttl:g} s TTL")


def fence_key(prefix: str, name: str) -> str:
    """The fencing counter a lock draws from: its cluster slot's, shared by the slot's names."""
    return LockKeys(name, prefix).fence


def token_in(value: Any) -> Any:
    """The owner token in a lock key's value (``<fence>:<token>``); other values as they are."""
    if not isinstance(value, str):
        return value
    fence, separator, token = value.partition(":")
    return token if separator and fence.isdigit() else value


def replicas_caught_up(master: redis.Redis, near: str, replicas: int, timeout_ms: int) -> int:
    """How many replicas confirm, within ``timeout_ms``, everything ``master`` wrote so far.

    ``WAIT`` counts its own connection's writes: on one that wrote nothing it answers at once
    with every connected replica, however far behind. A write first (a marker in ``near``'s
    cluster slot, deleted again) makes it wait for all the writes before it.
    """
    marker = f"{near}:caught-up"
    master.set(marker, "")
    master.delete(marker)
    return int(master.wait(replicas, timeout_ms))


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=["sync", "async"])
def flavor(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest_asyncio.fixture
async def make_locks(flavor: str, redlease_url: str, prefix: str) -> AsyncIterator[LocksFactory]:
    """``await make_locks(**options)``: a new client of the test's flavour (closed after)."""
    made: list[Any] = []

    async def make(url: str | None = None, **options: Any) -> Any:
        options.setdefault("prefix", prefix)
        target = url or redlease_url
        if flavor == "async":
            locks: Any = redlease.AsyncLocks(target, **options)
        else:
            locks = SyncLocksAdapter(redlease.Locks(target, **options))
        made.append(locks)
        return locks

    yield make
    for locks in made:
        await locks.aclose()


def subscribed_channels(client: redis.Redis, pattern: str) -> list[Any]:
    """The channels matching ``pattern`` someone listens on, sharded or classic, sorted.

    ``PUBSUB SHARDCHANNELS`` came with Redis 7.0. A server before it (6.2 is our floor)
    has no sharded channels, so its "unknown subcommand" means none, not a failure.
    """
    try:
        sharded = list(client.execute_command("PUBSUB", "SHARDCHANNELS", pattern))
    except redis.ResponseError as error:
        if "unknown subcommand" not in str(error).lower():
            raise
        sharded = []
    return sorted(sharded + list(client.pubsub_channels(pattern)))


@pytest.fixture
def server(redlease_url: str) -> redis.Redis:
    """A plain client on the test server, for looking behind the library's back."""
    client = redis.Redis.from_url(redlease_url, decode_responses=True)
    yield client
    client.close()


class Pair:
    """A master and one replica, each with a plain client for looking behind our back."""

    def __init__(self, master: EmbeddedServer, replica: EmbeddedServer) -> None:
        self.master = master
        self.replica = replica
        self.on_master = redis.Redis(port=master.port, decode_responses=True)
        self.on_replica = redis.Redis(port=replica.port, decode_responses=True)


@pytest.fixture
def pair(redlease_servers_factory) -> Iterator[Pair]:
    (master,) = redlease_servers_factory(1, "--repl-diskless-sync-delay", "0")
    replica = EmbeddedServer(args=["--replicaof", "127.0.0.1", str(master.port)])
    replica.start()
    servers = Pair(master, replica)
    try:
        deadline = time.monotonic() + 10
        while servers.on_replica.info("replication").get("master_link_status") != "up" or (
            "online" not in str(servers.on_master.info("replication").get("slave0", ""))
        ):
            assert time.monotonic() < deadline, "the replica never synced"
            time.sleep(0.02)
        yield servers
    finally:
        servers.on_master.close()
        servers.on_replica.close()
        replica.stop()


async def eventually(condition: Callable[[], object], within: float, every: float = 0.01) -> bool:
    """Poll ``condition`` until it holds (True) or ``within`` seconds pass (False)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(every)
    return True


def redlease_command(*args: str) -> list[str]:
    """The ``redlease`` command line, run by this interpreter."""
    return [sys.executable, "-m", "redlease", *args]


def cli_environment(url: str | None) -> dict[str, str]:
    """This process's environment with ``REDIS_URL`` set to ``url`` (or unset for None)."""
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    if url is not None:
        env["REDIS_URL"] = url
    return env


def run_redlease(*args: str, url: str | None, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``redlease ARGS`` against ``url`` to its end; its exit code and output."""
    return subprocess.run(
        redlease_command(*args),
        env=cli_environment(url),
        check=False,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


async def held_with_a_waiter(
    make: Callable[[], Awaitable[Any]],
    name: str,
    lease_ttl: float,
    timeout: float,
    waiting: dict[str, Any] | None = None,
) -> tuple[Any, Any, Any, asyncio.Task[Any]]:
    """Two new clients from ``make``: the first holds ``name`` (a renewing lease of
    ``lease_ttl``), the second waits for it (owner ``"w"``, lock options ``waiting``) in a
    task, subscribed already. The holder, the waiting client, the lease and the task."""
    holder, other = await make(), await make()
    lease = await holder.lock(name, ttl=lease_ttl, renew=True).acquire()
    waiting_lock = other.lock(name, owner="w", **(waiting or {}))
    waiter = asyncio.create_task(waiting_lock.acquire(timeout=timeout))
    assert await eventually(lambda: len(other._notifier.channels()) == 1, 5)
    return holder, other, lease, waiter
