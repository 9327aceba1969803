"""Hostile servers and hostile surroundings: every one surfaces as a clear, typed error.

A lock user who gets an auth, permission, read-only, out-of-memory, TLS or network
failure must learn what is wrong (never "busy", never a false "acquired"), promptly, and
find nothing half-written on the server. Cancellation and ``fork()`` must not leave a
lease held by nobody, nor let a child process touch its parent's lease.

Names, TTLs, foreign values at the key, a maxed fence counter and a closed port are in
``test_lock.py``; a cancelled *waiter* is in ``test_waiting.py``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import redis
import redis.asyncio
from redis.backoff import NoBackoff

import redlease
from conftest import SyncLocksAdapter, eventually, subscribed_channels, token_in
from redlease.core.subscriptions import has_sharded_pubsub
from redlease.server import EmbeddedServer, free_port
from redlease.urls import redacted

TESTS = Path(__file__).resolve().parent
FORK_HOLDER = TESTS / "proc_bad_fork.py"
PASSWORD = "s3cret-pass"
DEBIAN_REDIS = "/usr/bin/redis-server"


def no_retry(flavor: str) -> Any:
    """redis-py's own retries off, so the timings measured are the library's."""
    if flavor == "async":
        from redis.asyncio.retry import Retry as AsyncRetry  # noqa: PLC0415

        return AsyncRetry(NoBackoff(), 0)
    from redis.retry import Retry  # noqa: PLC0415

    return Retry(NoBackoff(), 0)


@pytest_asyncio.fixture
async def make_client_locks(flavor: str, prefix: str) -> AsyncIterator[Callable[..., Any]]:
    """``await make_client_locks(port, **redis_options)``: a client of the test's flavour
    over a ``redis.Redis`` built here (so socket and retry options can be set)."""
    made: list[tuple[Any, Any]] = []

    async def make(port: int, **options: Any) -> Any:
        options.setdefault("retry", no_retry(flavor))
        if flavor == "async":
            client: Any = redis.asyncio.Redis(host="127.0.0.1", port=port, **options)
            locks: Any = redlease.AsyncLocks(client, prefix=prefix)
        else:
            client = redis.Redis(host="127.0.0.1", port=port, **options)
            locks = SyncLocksAdapter(redlease.Locks(client, prefix=prefix))
        made.append((locks, client))
        return locks

    yield make
    for locks, client in made:
        await locks.aclose()
        if flavor == "async":
            await client.aclose()
        else:
            client.close()


def warm_up_scripts(url: str) -> None:
    """Load the scripts on the server, so the next EVALSHA is the real lock call."""
    with redlease.Locks(url, prefix="warmup") as locks, locks.lock("warmup"):
        pass
    with redis.Redis.from_url(url) as admin:
        for key in admin.scan_iter("warmup*"):
            admin.delete(key)


async def refusal_of(lock: Any) -> str:
    """Why ``lock.acquire`` failed at once: an error naming the lock, not "busy"."""
    with pytest.raises(redlease.LockError) as raised:
        await lock.acquire(timeout=2)
    assert not isinstance(raised.value, redlease.LockTimeout), "reported as busy"
    assert lock.name in str(raised.value)
    return str(raised.value)


# --- authentication and permissions --------------------------------------------------


@pytest.mark.parametrize("password", [None, "wrong-pass"], ids=["noauth", "wrongpass"])
async def test_a_missing_or_wrong_password_is_named_and_writes_nothing(
    make_locks, redlease_servers_factory, password
):
    (secured,) = redlease_servers_factory(1, "--requirepass", PASSWORD)
    auth = f":{password}@" if password else ""
    locks = await make_locks(f"redis://{auth}127.0.0.1:{secured.port}/0")
    lock = locks.lock("payroll")

    started = time.monotonic()
    message = await refusal_of(lock)
    assert time.monotonic() - started < 1.5, "an auth failure is final: no waiting or retrying"
    assert "auth" in message.lower() or "password" in message.lower(), message
    assert "unreachable" not in message, f"the server was reached and refused us: {message}"
    with redis.Redis(port=secured.port, password=PASSWORD) as admin:
        assert admin.dbsize() == 0


@pytest.mark.parametrize(
    ("rules", "named"),
    [
        (["~*", "&*", "+@all", "-eval", "-evalsha"], "evalsha"),
        (["~elsewhere:*", "&*", "+@all"], "key"),
    ],
    ids=["no-eval", "no-key-access"],
)
async def test_a_user_without_permission_gets_a_permission_error(
    make_locks, redlease_servers_factory, rules, named
):
    (server,) = redlease_servers_factory(1)
    with redis.Redis(port=server.port) as admin:
        admin.execute_command("ACL", "SETUSER", "locker", "on", ">pw", *rules)
    locks = await make_locks(f"redis://locker:pw@127.0.0.1:{server.port}/0")
    lock = locks.lock("payroll")

    message = await refusal_of(lock)
    assert "permission" in message.lower(), message
    assert named in message.lower(), message
    with redis.Redis(port=server.port) as admin:
        assert admin.dbsize() == 0


def documented_acl_rule(has_sharded_pubsub: bool) -> list[str]:
    """The ``ACL SETUSER`` words of guide.md's Permissions section (its sharded pub/sub
    line left out on a server without it, as the guide says)."""
    guide = (TESTS.parent / "docs" / "guide.md").read_text(encoding="utf-8")
    block = guide.split("<!-- acl-rule -->", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    lines = block.strip().splitlines()
    if not has_sharded_pubsub:
        lines = [line for line in lines if "+spublish" not in line]
    words = " ".join(lines).split()
    assert words[:3] == ["ACL", "SETUSER", "locker"], words[:3]
    return words[2:]


@pytest.mark.timeout(120)
async def test_a_user_with_the_documented_permissions_uses_every_primitive(
    redlease_servers_factory,
):
    """guide.md lists the commands a locking user needs; with exactly those, every
    primitive works, waiting and hand-offs included, and so do ``ls``, ``show`` and
    ``run``."""
    (server,) = redlease_servers_factory(1)
    with redis.Redis(port=server.port) as admin:
        sharded = has_sharded_pubsub(admin.info("server"))
        admin.execute_command("ACL", "SETUSER", *documented_acl_rule(sharded))
    url = f"redis://locker:secret@127.0.0.1:{server.port}/0"
    async with redlease.AsyncLocks(url) as mine, redlease.AsyncLocks(url) as theirs:
        for make in (mine.lock, mine.fair_lock):
            held = make("job", ttl=1, renew=True)
            lease = await held.acquire()
            waiter = asyncio.create_task(theirs.lock("job", owner="w").acquire(timeout=20))
            await asyncio.sleep(1.2)  # a renewal, and the waiter queued
            assert not lease.lost
            assert lease.renewals >= 1
            assert await held.owned()
            assert await held.locked()
            await held.extend(5)
            await held.release()
            assert (await waiter).fence > lease.fence
            await theirs.lock("job", owner="w").release()
        rw = mine.rw_lock("doc")
        await rw.write.acquire()
        reader = asyncio.create_task(theirs.rw_lock("doc", owner="r").read.acquire(timeout=20))
        await asyncio.sleep(0.2)
        await rw.write.release()
        await reader
        await theirs.rw_lock("doc", owner="r").read.release()
        semaphore = mine.semaphore("pool", permits=1)
        permit = await semaphore.acquire()
        other = asyncio.create_task(theirs.semaphore("pool", permits=1).acquire(timeout=20))
        await asyncio.sleep(0.2)
        await semaphore.release(permit)
        await theirs.semaphore("pool", permits=1).release(await other)
        latch = mine.latch("batch")
        await latch.try_set_count(1)
        opened = asyncio.create_task(theirs.latch("batch").wait(20))
        await asyncio.sleep(0.2)
        await latch.count_down()
        assert await opened
        async with mine.multi_lock(["a", "b"]):
            pass
        held = mine.lock("shown", ttl=30)
        await held.acquire()
        for args in (("ls",), ("show", "shown"), ("run", "ran", "--", sys.executable, "-c", "")):
            completed = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-m", "redlease", *args[:2], "--url", url, *args[2:]],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert completed.returncode == 0, (args, completed.stderr)
        await held.release()


# --- TLS (needs Debian's redis-server, built with TLS) -------------------------------


def make_certificates(directory: Path) -> None:
    """A CA, another CA, a server cert for 127.0.0.1, one for another host, a client cert."""

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-new", "-nodes", "-newkey", "rsa:2048", "-days", "2",
            "-keyout", f"{ca}.key", "-out", f"{ca}.crt", "-subj", f"/CN={ca}")  # fmt: skip
    for name, alt in (
        ("server", "IP:127.0.0.1,DNS:localhost"),
        ("elsewhere", "DNS:elsewhere.example"),
        ("client", "DNS:client"),
    ):
        (directory / f"{name}.ext").write_text(f"subjectAltName={alt}\n")
        run("req", "-new", "-nodes", "-newkey", "rsa:2048", "-keyout", f"{name}.key",
            "-out", f"{name}.csr", "-subj", f"/CN={name}")  # fmt: skip
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-out", f"{name}.crt",
            "-extfile", f"{name}.ext")  # fmt: skip


class TlsServers:
    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.servers: dict[str, tuple[EmbeddedServer, int]] = {}

    def start(self, label: str, cert: str, auth_clients: str) -> None:
        tls_port = free_port()
        server = EmbeddedServer(
            binary=DEBIAN_REDIS,
            args=[
                "--tls-port", str(tls_port),
                "--tls-cert-file", str(self.dir / f"{cert}.crt"),
                "--tls-key-file", str(self.dir / f"{cert}.key"),
                "--tls-ca-cert-file", str(self.dir / "ca.crt"),
                "--tls-auth-clients", auth_clients,
            ],
        )  # fmt: skip
        server.start()
        self.servers[label] = (server, tls_port)

    def url(self, label: str, ca: str = "ca", client_cert: bool = True) -> str:
        _, tls_port = self.servers[label]
        query = f"socket_timeout=2&socket_connect_timeout=2&ssl_ca_certs={self.dir / ca}.crt"
        if client_cert:
            query += f"&ssl_certfile={self.dir}/client.crt&ssl_keyfile={self.dir}/client.key"
        return f"rediss://127.0.0.1:{tls_port}/0?{query}"

    def plain(self, label: str) -> redis.Redis:
        server, _ = self.servers[label]
        return redis.Redis(port=server.port, decode_responses=True)

    def stop(self) -> None:
        for server, _ in self.servers.values():
            server.stop()


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Any:
    if not os.access(DEBIAN_REDIS, os.X_OK):
        pytest.skip(f"{DEBIAN_REDIS} (built with TLS) is not installed")
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    directory = tmp_path_factory.mktemp("tls")
    make_certificates(directory)
    servers = TlsServers(directory)
    try:
        servers.start("strict", "server", "yes")
        servers.start("optional", "server", "optional")
        servers.start("misnamed", "elsewhere", "optional")
        yield servers
    finally:
        servers.stop()


@pytest.mark.parametrize(
    ("label", "client_cert"), [("strict", True), ("optional", False)], ids=["mutual", "server"]
)
async def test_locks_work_over_tls_with_the_right_ca(make_locks, tls, prefix, label, client_cert):
    locks = await make_locks(tls.url(label, client_cert=client_cert))
    lock = locks.lock("over-tls")
    async with lock as lease:
        with tls.plain(label) as plain:
            assert token_in(plain.get(lock.keys.lease)) == lease.token
    with tls.plain(label) as plain:
        assert not plain.exists(lock.keys.lease)


@pytest.mark.parametrize(
    ("label", "ca", "client_cert", "named"),
    [
        ("strict", "other-ca", True, "certificate verify failed"),
        ("strict", "ca", False, ""),
        ("misnamed", "ca", True, "mismatch"),
    ],
    ids=["wrong-ca", "no-client-cert", "hostname-mismatch"],
)
async def test_a_tls_setup_that_does_not_verify_is_refused_promptly(
    make_locks, tls, label, ca, client_cert, named
):
    locks = await make_locks(tls.url(label, ca=ca, client_cert=client_cert))
    lock = locks.lock("over-tls")

    started = time.monotonic()
    with pytest.raises(redlease.ServerUnavailable) as raised:
        await lock.acquire(timeout=2)

    assert time.monotonic() - started < 2.5, "a TLS failure must not hang"
    # The server's refusal of a missing client cert reaches a TLS 1.3 client only as a
    # reset or an EOF, so only the two verification failures can be named for sure.
    assert named in str(raised.value).lower(), raised.value
    with tls.plain(label) as plain:
        assert not plain.exists(lock.keys.lease)


# --- server states: read-only replica, out of memory, eviction ------------------------


async def test_a_read_only_replica_refuses_clearly_and_nothing_is_written(
    make_locks, redlease_servers_factory
):
    (master,) = redlease_servers_factory(1)
    (replica,) = redlease_servers_factory(1, "--replicaof", "127.0.0.1", str(master.port))
    lock = (await make_locks(replica.url)).lock("payroll")

    message = await refusal_of(lock)
    assert "read only" in message.lower() or "readonly" in message.lower(), message
    for server in (master, replica):
        with redis.Redis(port=server.port) as plain:
            assert plain.dbsize() == 0


async def test_out_of_memory_under_noeviction_is_an_error_with_no_partial_lock(
    make_locks, redlease_servers_factory
):
    (full,) = redlease_servers_factory(1, "--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    with redis.Redis(port=full.port) as plain:
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            for index in range(2000):
                plain.set(f"ballast:{index}", b"x" * 10_000)
        lock = (await make_locks(full.url)).lock("payroll")

        message = await refusal_of(lock)
        assert "memory" in message.lower(), message
        assert not plain.exists(lock.keys.lease)
        assert not plain.exists(lock.keys.fence)


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru"])
async def test_an_evicting_server_is_warned_about(
    make_locks, redlease_servers_factory, caplog, policy
):
    (server,) = redlease_servers_factory(1, "--maxmemory", "64mb", "--maxmemory-policy", policy)
    caplog.set_level(logging.WARNING, logger="redlease")
    async with (await make_locks(server.url)).lock("payroll"):
        pass
    warnings = [
        record.getMessage()
        for record in caplog.records
        if record.name.startswith("redlease") and record.levelno == logging.WARNING
    ]
    assert any(policy in text and "evict" in text for text in warnings), warnings
    counter_named = any("fencing counter" in text for text in warnings)
    assert counter_named == policy.startswith("allkeys"), (
        "only an allkeys policy evicts the fencing counter (it has no expiry)",
        warnings,
    )


async def test_a_noeviction_server_gets_no_eviction_warning(make_locks, caplog):
    caplog.set_level(logging.WARNING, logger="redlease")
    async with (await make_locks()).lock("payroll"):
        pass
    assert not [r for r in caplog.records if "evict" in r.getMessage()]


# --- the network: a black hole, a reply cut short ------------------------------------


class BlackHole:
    """A loopback TCP listener that accepts connections and never answers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(connection)

    def close(self) -> None:
        self.listener.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def black_hole() -> Any:
    hole = BlackHole()
    yield hole
    hole.close()


async def test_a_black_holed_server_fails_within_the_socket_timeout(make_client_locks, black_hole):
    locks = await make_client_locks(black_hole.port, socket_timeout=1, socket_connect_timeout=1)
    lock = locks.lock("payroll")

    started = time.monotonic()
    with pytest.raises(redlease.ServerUnavailable) as raised:
        await lock.acquire(timeout=5)
    took = time.monotonic() - started

    assert black_hole.accepted, "the client never reached the listener"
    assert "payroll" in str(raised.value)
    assert took < 1.6, f"acquire took {took:.2f} s against a 1 s socket timeout"


class FaultyProxy:
    """A TCP proxy to a real server that can spoil the reply to the next lock script call.

    ``cut()``: the next EVALSHA is forwarded (the server runs it), then the client gets
    one byte of the reply and a connection reset. ``stall(s)``: its reply is held back.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.faults: deque[tuple[str, float]] = deque()
        self.applied: list[str] = []
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self.faults.append(("cut", 0.0))

    def stall(self, seconds: float) -> None:
        self.faults.append(("stall", seconds))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            except OSError:
                client.close()
                continue
            self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, client: socket.socket, upstream: socket.socket) -> None:
        """Both directions on one thread, so a reset is sent the moment it is decided."""
        pending: deque[tuple[str, float]] = deque()
        try:
            while True:
                readable, _, _ = select.select([client, upstream], [], [])
                if client in readable:
                    data = client.recv(65536)
                    if not data:
                        break
                    if b"EVALSHA" in data.upper() and self.faults:
                        pending.append(self.faults.popleft())
                    upstream.sendall(data)
                if upstream in readable:
                    data = upstream.recv(65536)
                    if not data:
                        break
                    if not pending:
                        client.sendall(data)
                        continue
                    fault, seconds = pending.popleft()
                    self.applied.append(fault)
                    if fault == "stall":
                        time.sleep(seconds)
                        client.sendall(data)
                        continue
                    client.sendall(data[:1])
                    linger = struct.pack("ii", 1, 0)
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                    break
        except (OSError, ValueError):  # ValueError: the proxy was closed under us (fd -1)
            pass
        _close(client)
        _close(upstream)

    def close(self) -> None:
        self.listener.close()
        for connection in self.sockets:
            _close(connection)


def _close(connection: socket.socket) -> None:
    try:
        connection.close()
    except OSError:
        pass


@pytest.fixture
def proxied(redlease_servers_factory) -> Any:
    (server,) = redlease_servers_factory(1)
    warm_up_scripts(server.url)
    proxy = FaultyProxy(server.port)
    yield proxy, redis.Redis(port=server.port, decode_responses=True)
    proxy.close()


@pytest.mark.parametrize("timeout", [0, 1], ids=["one-try", "blocking"])
@pytest.mark.parametrize("client_retries", [False, True], ids=["no-retry", "redis-py-retry"])
async def test_a_reply_cut_short_on_acquire_is_never_reported_as_busy(
    make_client_locks, proxied, flavor, client_retries, timeout
):
    """The server granted the lock, the reply was lost. Either the client learns it holds
    the lock (a retry of the same token is granted at once), or it gets ServerUnavailable
    and the grant is given back; never "held by another owner" about its own token."""
    proxy, plain = proxied
    options: dict[str, Any] = {"socket_timeout": 2}
    if client_retries:
        options["retry"] = (
            redis.asyncio.retry.Retry(NoBackoff(), 2)
            if flavor == "async"
            else redis.retry.Retry(NoBackoff(), 2)
        )
    locks = await make_client_locks(proxy.port, **options)
    lock = locks.lock("payroll", ttl=20)
    await lock.locked()  # the client's own setup calls go through first
    proxy.cut()

    started = time.monotonic()
    try:
        lease = await lock.acquire(timeout=timeout)
    except redlease.LockTimeout:
        pytest.fail(
            "a lost reply was reported as 'held by another owner': the lock is held by "
            f"our own orphaned token {plain.get(lock.keys.lease)!r}"
        )
    except redlease.ServerUnavailable:
        assert proxy.applied == ["cut"]
        # The server ran the grant we never heard of: it must be given back, not left to
        # block everyone for the whole TTL.
        assert await eventually(lambda: not plain.exists(lock.keys.lease), within=1.5), (
            f"orphaned grant {plain.get(lock.keys.lease)!r} left for its TTL of "
            f"{plain.pttl(lock.keys.lease)} ms"
        )
    else:
        took = time.monotonic() - started
        assert proxy.applied == ["cut"]
        assert token_in(plain.get(lock.keys.lease)) == lease.token
        assert took < 0.5, f"the client waited {took:.2f} s on its own grant"
        assert await lock.release() is redlease.ReleaseOutcome.RELEASED
        assert not plain.exists(lock.keys.lease)


async def test_a_reply_cut_short_on_release_gives_the_real_answer(make_client_locks, proxied):
    proxy, plain = proxied
    locks = await make_client_locks(proxy.port, socket_timeout=2)
    lock = locks.lock("payroll", ttl=20)
    lease = await lock.acquire()
    proxy.cut()

    outcome = await lock.release()

    assert proxy.applied == ["cut"]
    assert outcome is redlease.ReleaseOutcome.RELEASED, "the release did happen"
    assert not lease.lost
    assert not plain.exists(lock.keys.lease)


# --- cancellation and fork -----------------------------------------------------------


@pytest.mark.timeout(30)
async def test_cancelled_during_the_first_try_holds_nothing(proxied, prefix):
    """The grant reached the server but not the client: it must be given back."""
    proxy, plain = proxied
    async with redlease.AsyncLocks(
        redis.asyncio.Redis(port=proxy.port, socket_timeout=5), prefix=prefix
    ) as locks:
        lock = locks.lock("payroll", ttl=20)
        await lock.locked()
        proxy.stall(1.0)
        trying = asyncio.create_task(lock.acquire(timeout=5))
        assert await eventually(lambda: plain.exists(lock.keys.lease), within=2)

        trying.cancel()
        await asyncio.wait({trying}, timeout=5)
        assert trying.cancelled(), f"the cancelled acquire ended with {trying}"
        assert proxy.applied == ["stall"]

        assert lock.lease is None
        assert await eventually(lambda: not plain.exists(lock.keys.lease), within=2), (
            "the grant the cancelled task never saw is left held for its TTL"
        )
        assert not plain.exists(lock.keys.queue)
        assert locks._notifier.channels() == []
        assert not subscribed_channels(plain, f"{prefix}*")
        # and the lock is usable again right away
        async with lock:
            assert await lock.owned()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_forked_child_neither_releases_nor_renews_the_parents_lease(redlease_url, prefix):
    done = subprocess.run(
        [sys.executable, str(FORK_HOLDER), redlease_url, prefix, "payroll"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    child, parent = report["child"], report["parent"]

    assert child["release"] == "NotOwned", child
    assert child["holds_a_lease"] is False
    assert child["took_the_lock"] is False, "the child got the lock its parent holds"
    assert child["key_after_release"] == parent["token"], "the child deleted the parent's lease"
    assert child["renewer_threads"] == []
    assert report["child_status"] == 0
    assert parent["owned_after_child"] is True
    assert parent["lost"] is False
    assert parent["renewed_since_fork"] is True, "the parent stopped renewing after the fork"
    assert parent["release"] == "RELEASED"
    assert child["left_parent_connections_usable"] is True


@pytest.mark.parametrize(
    "url",
    [
        "localhost:6379",
        "http://127.0.0.1:6379/0",
        "redis://h:99999/0",
        "redis://h/abc",
        "redis://h/-1",
        "redis://[::1:6379/0",
    ],
)
@pytest.mark.parametrize("make", [redlease.Locks, redlease.AsyncLocks, redlease.Redlock])
def test_a_url_that_is_no_server_url_is_invalid_input(make, url):
    """Every error is a LockError: a mistyped URL too, with what a URL looks like."""
    with pytest.raises(redlease.InvalidArgument, match="redis://HOST:PORT/DB"):
        make([url] if make is redlease.Redlock else url)


@pytest.mark.parametrize("owner", [[1], {"job": 1}, {1}])
async def test_an_unhashable_owner_is_invalid_input(make_locks, owner):
    locks = await make_locks()
    makers = (locks.lock, locks.fair_lock, functools.partial(locks.semaphore, permits=2))
    for make in makers:
        with pytest.raises(redlease.InvalidArgument, match="owner must be hashable"):
            make("job", owner=owner)


@pytest.mark.parametrize(
    "location",
    [
        "redis://:pw1@127.0.0.1:6379/0,redis://:pw2@127.0.0.1:6380/0",
        "redis://127.0.0.1:6379/0, rediss://127.0.0.1:6380/0",
        "redis://:pw1@127.0.0.1:6379/0;redis://:pw2@127.0.0.1:6380/0",
        ["redis://127.0.0.1:6379/0", "redis://127.0.0.1:6380/0"],
        ("redis://127.0.0.1:6379/0",),
    ],
)
@pytest.mark.parametrize("make", [redlease.Locks, redlease.AsyncLocks])
def test_several_urls_for_one_client_say_to_give_one(make, location):
    """Django's cache ``LOCATION`` may list servers, in one comma-separated string or a
    list (the first is the one Django writes to); integrations.md says to pass it. Locks
    live on one server: the error says to give one URL, and never shows a password."""
    with pytest.raises(redlease.InvalidArgument, match="one server's URL") as refused:
        make(location)
    assert "pw1" not in str(refused.value)
    assert "pw2" not in str(refused.value)


@pytest.mark.parametrize(("location", "said"), [([], "an empty list"), (["redis://h/0"], "itself")])
@pytest.mark.parametrize("make", [redlease.Locks, redlease.AsyncLocks])
def test_a_list_of_fewer_than_two_urls_says_what_to_give(make, location, said):
    with pytest.raises(redlease.InvalidArgument, match=said):
        make(location)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("bogus=1", "bogus"),
        ("socket_timeout=2&sockettimeout=2", "sockettimeout"),
        ("socket-timeout=2", "socket-timeout"),
        ("protocol=9", "protocol"),
        ("=1", "''"),
        ("foo", "foo"),
        ("foo=", "foo"),
        ("retry=x", "retry"),
    ],
)
@pytest.mark.parametrize("make", [redlease.Locks, redlease.AsyncLocks, redlease.Redlock])
def test_an_unknown_url_option_is_invalid_input_at_once(make, query, named, redlease_url):
    """redis-py keeps an option it does not know and fails on it at the first connection,
    with a TypeError, and an option it knows with a value it refuses with its own error: a
    typo in a URL is refused where the URL is given, by name."""
    url = f"{redlease_url}?{query}"
    with pytest.raises(redlease.InvalidArgument, match=named):
        make([url] if make is redlease.Redlock else url)


def test_a_known_url_option_written_blank_is_dropped_as_redis_py_does(redlease_url, prefix):
    for query in ("max_connections=", "max_connections", "socket_timeout="):
        redlease.Locks(f"{redlease_url}?{query}", prefix=prefix).close()


@pytest.mark.parametrize("make", [redlease.Locks, redlease.AsyncLocks])
def test_an_unknown_url_option_of_a_cluster_is_invalid_input(make):
    """The sync cluster client drops options it does not know without a word."""
    for query, named in [("bogus=1", "bogus"), ("retry=x", "retry")]:
        with pytest.raises(redlease.InvalidArgument, match=named):
            make(f"redis://127.0.0.1:1/0?{query}", cluster=True)


async def test_cluster_mode_on_a_server_that_is_no_cluster_is_invalid_input(
    flavor, redlease_url, prefix
):
    """The server answered, and said it is no cluster node: a setting to change, not a
    server to wait for (which ``ServerUnavailable`` would say)."""
    with pytest.raises(redlease.InvalidArgument, match="not a cluster node"):
        if flavor == "sync":
            redlease.Locks(redlease_url, cluster=True, prefix=prefix)
        else:
            async with redlease.AsyncLocks(redlease_url, cluster=True, prefix=prefix) as locks:
                await locks.lock("x").try_acquire()


@pytest.mark.parametrize(
    "query",
    [
        "pasword=hunter2",
        "passwd=hunter2",
        "pwd=hunter2",
        "foo=1&pssword=hunter2",
        "foo=1&pässwort=hunter2",
        "%70assword=hunter2&foo=1",
        "%70assword=hunter2&protocol=9",
        "=hunter2",
    ],
)
def test_a_password_in_a_query_is_never_echoed(query, redlease_url):
    """Whatever the option is called (redis-py decodes ``%70assword`` to ``password``), an
    error about the URL shows no value of its query."""
    with pytest.raises(redlease.InvalidArgument) as raised:
        redlease.Locks(f"{redlease_url}?{query}")
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    "url",
    [
        "redis://user:s3cr#et@h:6379/0",
        "redis://user:s3cr/et@h:6379/0",
        "redis://user:s3cr?et@h:6379/0",
        "redis://:s3cr@et@h:6379/0",
        "redis://h:6379/0?password=s3cret#x",
        "redis://[::1:6379/0?password=s3cret",
        "redis:/user:s3cret@h:6379/0",
        "user:s3cret@h:6379/0",
        "//user:s3cr#et@h:6379/0",
        "redis:user:s3cret@h:6379/0",
        "redis://h:6379/x?password=9999#s3cret",
    ],
)
@pytest.mark.parametrize("make", [redlease.Locks, redlease.AsyncLocks, redlease.Redlock])
def test_a_url_is_never_echoed_with_its_password(make, url):
    """Whatever the password holds, and whether a parser accepts the URL or not, an error
    about it shows ``***`` where the password was, and no piece of it."""
    try:
        client = make([url] if make is redlease.Redlock else url)
    except redlease.InvalidArgument as error:
        message = str(error)
    else:
        if make is not redlease.AsyncLocks:
            client.close()
        message = redacted(url)
    assert "s3cr" not in message, message
    assert "***" in message


@pytest.mark.parametrize("make", [redlease.Locks, redlease.AsyncLocks, redlease.Redlock])
def test_a_url_scheme_is_read_in_either_case(make, redlease_url, prefix):
    """URL schemes ignore case (RFC 3986): ``REDIS://`` names the same server to every
    flavour, where redis-py's sync parser alone would refuse it."""
    url = "REDIS" + redlease_url[len("redis") :]
    locks = make([url] if make is redlease.Redlock else url, prefix=prefix)

    async def take_async() -> int:
        try:
            async with locks.lock("upper") as lease:
                return int(lease.fence)
        finally:
            await locks.aclose()

    if make is redlease.AsyncLocks:
        assert asyncio.run(take_async()) >= 1
        return
    with locks, locks.lock("upper") as lease:
        assert lease.fence >= 1


def test_a_lock_name_template_that_is_no_format_pattern_is_refused(redlease_url, prefix):
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        with pytest.raises(redlease.InvalidArgument, match=r"str\.format"):

            @locks.locked("invoice:{customer_id")
            def bill(customer_id: int) -> None: ...


def test_redlock_masters_are_a_collection_of_distinct_servers(redlease_servers_factory):
    """One client gave a bare ``TypeError``; an iterator was refused although any
    iterable would do; the same server given thrice made a "majority" of one."""
    first, second, third = redlease_servers_factory(3)
    with pytest.raises(redlease.InvalidArgument, match="list of masters"):
        redlease.Redlock(redis.Redis(port=first.port))
    with pytest.raises(redlease.InvalidArgument, match="twice"):
        redlease.Redlock([first.url, first.url, second.url])
    with pytest.raises(redlease.InvalidArgument, match="twice"):
        redlease.Redlock([f"redis://127.0.0.1:{first.port}/{db}" for db in (1, 2)] + [second.url])
    client = redis.Redis(port=first.port)
    with pytest.raises(redlease.InvalidArgument, match="twice"):
        redlease.Redlock([client, client, redis.Redis(port=second.port)])
    with pytest.raises(redlease.InvalidArgument, match="twice"):  # a port read from the env
        redlease.Redlock([redis.Redis(port=str(first.port)), client, redis.Redis(port=second.port)])
    with redlease.Redlock(iter([first.url, second.url, third.url])) as redlock:
        with redlock.lock("order") as lease:
            assert lease.fence > 0
