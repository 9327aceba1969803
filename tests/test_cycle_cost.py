"""What keeps a lock cycle cheap must not change what it does.

A client remembers the keys of the names it locks, makes the host and pid part of its
tokens once, and releases without an asyncio shield (an interrupted release is sent again
in the background), and an asyncio send waits only for what the socket did not take at
once. Each of these is checked here against a real server.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import redis
import redis.asyncio
from hiredis import pack_command as hiredis_pack

import redlease
from conftest import fence_key
from redlease.aio._flavor import send_now
from redlease.core.client_state import KEYS_CACHE_SIZE
from redlease.server import EmbeddedServer

TOKEN = re.compile(r"^[A-Za-z0-9_-]{22}\|(?P<host>[^|]+)\|(?P<pid>\d+)\|(?P<owner>.+)$")


def test_a_token_names_a_random_part_the_host_the_pid_and_the_thread(redlease_url, prefix):
    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        tokens = set()
        for _ in range(3):
            with locks.lock("shape", ttl=5) as lease:
                tokens.add(lease.token)
    assert len(tokens) == 3, "every acquisition must get a token of its own"
    for token in tokens:
        shape = TOKEN.match(token)
        assert shape, token
        assert shape["host"] == socket.gethostname()
        assert shape["pid"] == str(os.getpid())
        assert shape["owner"] == f"thread {threading.current_thread().name}"


FORKED_CHILD = """
import json, os, sys
import redlease
locks = redlease.Locks(sys.argv[1], prefix=sys.argv[2])
with locks.lock("parent", ttl=5) as lease:
    parent_token = lease.token
pid = os.fork()
if pid == 0:
    with locks.lock("child", ttl=5) as lease:
        os.write(1, (json.dumps({"pid": os.getpid(), "token": lease.token}) + "\\n").encode())
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"pid": os.getpid(), "token": parent_token}))
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_signs_its_tokens_with_its_own_pid(redlease_url, prefix):
    done = subprocess.run(
        [sys.executable, "-c", FORKED_CHILD, redlease_url, prefix],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(reports) == 2, done.stdout + done.stderr
    for report in reports:
        shape = TOKEN.match(report["token"])
        assert shape, report
        assert shape["pid"] == str(report["pid"])
    assert reports[0]["pid"] != reports[1]["pid"]


def test_every_name_is_checked_each_time_and_keys_follow_the_prefix(redlease_url, prefix):
    with (
        redlease.Locks(redlease_url, prefix=prefix) as first,
        redlease.Locks(redlease_url, prefix=f"{prefix}x") as second,
    ):
        for _ in range(2):
            with pytest.raises(redlease.InvalidName):
                first.lock("")
            with pytest.raises(redlease.InvalidName):
                first.lock("a{b}")
        assert first.lock("orders:42").keys.lease == f"{prefix}:{{orders:42}}"
        assert second.lock("orders:42").keys.lease == f"{prefix}x:{{orders:42}}"
        names = [f"n{index}" for index in range(KEYS_CACHE_SIZE + 10)]
        for name in names:
            assert first.lock(name).keys.fence == fence_key(prefix, name)
        assert first.lock(names[0]).keys.queue == f"{prefix}:{{{names[0]}}}:queue"


async def test_a_release_cancelled_in_flight_still_lands(prefix):
    with EmbeddedServer() as server:
        locks = redlease.AsyncLocks(server.url, prefix=prefix)
        admin = redis.Redis.from_url(server.url)
        try:
            lock = locks.lock("cancelled-release", owner="the test")
            await lock.acquire()
            server.pause()
            try:
                releasing = asyncio.create_task(lock.release())
                await asyncio.sleep(0.2)
                assert not releasing.done(), "the release did not wait for the paused server"
                started = time.monotonic()
                releasing.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await releasing
                assert time.monotonic() - started < 1.0, "the cancellation was held up"
                assert lock.lease is None, "a cancelled release must still forget the lease"
            finally:
                server.resume()
            for _ in range(500):  # at most about 10 s
                if not admin.exists(lock.keys.lease):
                    break
                await asyncio.sleep(0.02)
            assert not admin.exists(lock.keys.lease), "the interrupted release never landed"
            assert await locks.lock("cancelled-release").try_acquire() is not None
        finally:
            admin.close()
            await locks.aclose()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_a_release_interrupted_by_ctrl_c_still_lands(prefix):
    with EmbeddedServer() as server, redis.Redis.from_url(server.url) as admin:
        with redlease.Locks(server.url, prefix=prefix) as locks:
            lock = locks.lock("interrupted-release")
            lock.acquire()
            previous = signal.signal(signal.SIGUSR1, _interrupt)
            server.pause()
            try:
                threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
                with pytest.raises(KeyboardInterrupt):
                    lock.release()
                assert lock.lease is None, "an interrupted release must still forget the lease"
            finally:
                signal.signal(signal.SIGUSR1, previous)
                server.resume()
            for _ in range(500):  # at most about 10 s
                if not admin.exists(lock.keys.lease):
                    break
                time.sleep(0.02)
            assert not admin.exists(lock.keys.lease), "the interrupted release never landed"
            assert locks.lock("interrupted-release").try_acquire() is not None


BIG = 16 * 1024 * 1024
"""Bytes no socket takes in one write, so the send must wait for the server to read."""


async def test_an_asyncio_send_the_socket_cannot_take_at_once_arrives_whole(redlease_url, prefix):
    client = redis.asyncio.Redis.from_url(redlease_url)
    connection = await client.connection_pool.get_connection()
    try:
        await connection.connect()
        value = b"v" * BIG
        await send_now(connection, [hiredis_pack(("SET", f"{prefix}:big", value))])
        assert await connection.read_response() == b"OK"
        assert await client.strlen(f"{prefix}:big") == BIG
    finally:
        await client.connection_pool.release(connection)
        await client.delete(f"{prefix}:big")
        await client.aclose()


async def test_an_asyncio_send_to_a_stopped_server_ends_at_the_socket_timeout(prefix):
    timeout = 0.5
    with EmbeddedServer() as server:
        client = redis.asyncio.Redis.from_url(server.url, socket_timeout=timeout)
        connection = await client.connection_pool.get_connection()
        await connection.connect()
        server.pause()
        try:
            started = time.monotonic()
            with pytest.raises(redis.exceptions.TimeoutError):
                await send_now(connection, [hiredis_pack(("SET", f"{prefix}:big", b"v" * BIG))])
            waited = time.monotonic() - started
            assert waited >= timeout * 0.9, f"gave up after {waited:.2f} s"
            assert waited < timeout + 5, f"the send was held {waited:.2f} s"
            assert not connection.is_connected, "a send cut short must close its connection"
        finally:
            server.resume()
            await client.connection_pool.release(connection)
            await client.aclose()
