"""Redlock at its edges: fences that never go back, releases that tell the truth.

Faults are timed by what the masters see: a MONITOR on a master fires the fault the
moment it runs a given script, and the project's proxy holds the replies back long
enough for the fault to land between two rounds of one acquisition.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import redlease
from conftest import PRIVATE_SERVERS_ONLY, SyncLocksAdapter, eventually, fence_key
from redlease.chaos.proxy import ProxyHub
from redlease.core.redlock import RECONNECT_PAUSES_S
from redlease.scripts import ScriptName
from redlease.server import EmbeddedServer

pytestmark = [pytest.mark.redlock, pytest.mark.timeout(90), PRIVATE_SERVERS_ONLY]


def when_run(server: EmbeddedServer, script: ScriptName, action: Callable[[], None]) -> Any:
    """Run ``action`` once, the moment ``server`` runs ``script`` (seen by MONITOR)."""
    ready, done = threading.Event(), threading.Event()

    def watch() -> None:
        client = redis.Redis(port=server.port, decode_responses=True)
        with client.monitor() as monitor:
            ready.set()
            for event in monitor.listen():
                if script.sha in event["command"]:
                    action()
                    done.set()
                    return

    threading.Thread(target=watch, daemon=True).start()
    assert ready.wait(5)
    return done


def redlock_over(flavor: str, urls: list[str], prefix: str, **client_options: Any) -> Any:
    if flavor == "async":
        clients: list[Any] = [redis.asyncio.Redis.from_url(u, **client_options) for u in urls]
        return redlease.AsyncRedlock(clients, prefix=prefix)
    sync_clients: list[Any] = [redis.Redis.from_url(u, **client_options) for u in urls]
    return SyncLocksAdapter(redlease.Redlock(sync_clients, prefix=prefix))


async def test_a_fence_never_goes_back_when_raising_the_counters_fails_on_a_majority(
    redlease_servers_factory, flavor, prefix
):
    first, second, _ = masters = redlease_servers_factory(3)
    for server in masters:
        with redis.Redis(port=server.port) as admin:
            admin.execute_command("ACL", "SETUSER", "holder", "on", ">pw", "~*", "&*", "+@all")
            for script in ScriptName:  # so the first EVALSHA is the real one
                admin.script_load(script.source)
    with redis.Redis(port=first.port) as admin:
        admin.set(fence_key(prefix, "job"), 10)
    with ProxyHub() as hub:
        links = [hub.link("127.0.0.1", server.port) for server in masters]
        for link in links[1:]:
            link.set(delay=0.4)  # their grants reach the holder 0.4 s after they ran
        urls = [f"redis://holder:pw@127.0.0.1:{link.port}/0" for link in links]
        holder = redlock_over(flavor, urls, prefix)

        def fail_the_next_step_on_two() -> None:
            time.sleep(0.05)  # their grants have run; the holder's next step will fail there
            for server in masters[1:]:
                with redis.Redis(port=server.port) as admin:
                    admin.execute_command("ACL", "SETUSER", "holder", "-evalsha", "-eval")

        fired = when_run(second, ScriptName.ACQUIRE, fail_the_next_step_on_two)
        try:
            held: Any = await holder.lock("job", ttl=5).acquire(timeout=2)
        except redlease.LockError:
            held = None
        assert fired.wait(5)
        first.stop()  # the next majority is the two masters whose counters stayed low
        later = redlock_over(flavor, [server.url for server in masters], prefix)
        try:
            await asyncio.sleep(5.2)  # the first grant, if any, has expired everywhere
            taken = await later.lock("job", ttl=5).acquire(timeout=5)
            if held is not None:
                assert taken.fence > held.fence, (
                    f"fence went back: {held.fence} was granted, then {taken.fence}"
                )
        finally:
            await later.aclose()
            await holder.aclose()


async def test_a_taken_over_redlock_lease_is_reported_lost_after_a_failed_round(
    redlease_servers_factory, flavor, prefix
):
    masters = redlease_servers_factory(3)
    with ProxyHub() as hub:
        links = [hub.link("127.0.0.1", server.port) for server in masters]
        for link in links:
            link.set(delay=0.3)  # the first round outlasts its 0.2 s lease

        def heal_soon() -> None:
            time.sleep(0.45)  # while the failed round's grants are being given back
            for link in links:
                link.set()

        holder = redlock_over(flavor, [link.url for link in links], prefix)
        healer = threading.Thread(target=heal_soon)
        healer.start()
        lease = await holder.lock("slow", ttl=0.2).acquire(timeout=10)
        healer.join()
        other = redlock_over(flavor, [server.url for server in masters], prefix)
        try:
            await asyncio.sleep(0.3)  # the lease ends
            await other.lock("slow", ttl=10).acquire(timeout=5)
            outcome = await holder.lock("slow", ttl=0.2).release()
            assert outcome is redlease.ReleaseOutcome.EXPIRED, "a taken-over lease released"
            assert lease.lost
        finally:
            await other.aclose()
            await holder.aclose()


def test_a_forked_child_runs_its_own_redlock_rounds(redlease_servers_factory, prefix):
    masters = redlease_servers_factory(3)
    redlock = redlease.Redlock([server.url for server in masters], prefix=prefix)
    with redlock.lock("parent", ttl=5):  # the parent's round started the shared pool
        pass
    pid = os.fork()
    if pid == 0:  # the child: a new client, its own rounds
        code = 1
        try:
            child = redlease.Redlock([server.url for server in masters], prefix=prefix)
            with child.lock("child", ttl=5, timeout=3) as lease:
                code = 0 if lease.fence >= 1 else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 10
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("a Redlock round in the forked child hung")
        time.sleep(0.02)
    redlock.close()
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.parametrize("refusing", [2, 3])
async def test_masters_that_refuse_the_password_are_named_as_such(
    redlease_servers_factory, flavor, prefix, refusing
):
    """Too few masters accepting our credentials is an AuthenticationFailed, at once, as on
    one server: not a ServerUnavailable that sends the user looking at the network."""
    masters = redlease_servers_factory(3, "--requirepass", "right-pass")
    urls = [
        f"redis://:{'wrong-pass' if index < refusing else 'right-pass'}@127.0.0.1:{server.port}/0"
        for index, server in enumerate(masters)
    ]
    redlock = redlock_over(flavor, urls, prefix)
    try:
        started = time.monotonic()
        with pytest.raises(redlease.AuthenticationFailed, match=f"{refusing} of 3") as raised:
            await redlock.lock("payroll").acquire()
        assert time.monotonic() - started < 5, "a refused password is final: no retrying"
        assert "credentials" in str(raised.value)
    finally:
        await redlock.aclose()
    for server in masters:
        with redis.Redis(port=server.port, password="right-pass") as admin:
            assert admin.dbsize() <= 1, "only a fence counter may be left"


async def test_an_evicting_master_is_warned_about(redlease_servers_factory, flavor, prefix, caplog):
    """As a lock client does: an allkeys policy can evict a master's fencing counter, which
    breaks the monotonic tokens a Redlock grant relies on."""
    evicting = redlease_servers_factory(
        1, "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"
    )
    keeping = redlease_servers_factory(2)
    caplog.set_level(logging.WARNING, logger="redlease")
    redlock = redlock_over(flavor, [s.url for s in [*evicting, *keeping]], prefix)
    try:
        lease = await redlock.lock("payroll").acquire()
        assert await redlock.lock("payroll").release() is redlease.ReleaseOutcome.RELEASED
        assert lease.fence >= 1

        def warned() -> list[str]:
            return [
                record.getMessage()
                for record in caplog.records
                if record.name.startswith("redlease") and "allkeys-lru" in record.getMessage()
            ]

        assert await eventually(lambda: len(warned()) == 1, 5), warned()
        assert "fencing counter" in warned()[0]
    finally:
        await redlock.aclose()


async def warmed_redlock(flavor: str, masters: list[EmbeddedServer], prefix: str) -> Any:
    """A Redlock client over ``masters`` that took and released a lock on all of them."""
    redlock = redlock_over(flavor, [server.url for server in masters], prefix)
    await redlock.lock("payroll", ttl=5).acquire()
    await redlock.lock("payroll").release()
    return redlock


@pytest.mark.parametrize("after_restart", ["later", "at once", "at once, loop busy"])
async def test_a_master_back_from_a_restart_counts_in_the_next_acquire(
    redlease_servers_factory, flavor, prefix, after_restart
):
    """A master that refused connections while down and is back (empty, after a restart)
    makes the majority of the next acquire that needs it, even with another master
    silent: an opening that failed rounds ago does not keep it out, nor does its reconnect
    pause keep it out of a round the silent one would hold up to the end (outside testers
    saw both acquires fail after their whole timeout)."""
    first, second, third = redlease_servers_factory(3)
    redlock = await warmed_redlock(flavor, [first, second, third], prefix)
    try:
        third.kill()
        await redlock.lock("payroll", ttl=5).acquire(timeout=2)
        await redlock.lock("payroll").release()
        if after_restart == "at once, loop busy":
            third.restart()  # the client's event loop is held up meanwhile
            second.pause()
        else:
            await asyncio.to_thread(third.restart)  # the client's event loop runs meanwhile
            if after_restart == "later":
                await asyncio.sleep(1.5)  # past the longest reconnect pause
            await asyncio.to_thread(second.pause)
        try:
            started = time.monotonic()
            lease = await redlock.lock("payroll", ttl=5).acquire(timeout=3)
            took = time.monotonic() - started
        finally:
            second.resume()
        assert took < 1.0, f"the acquire took {took:.2f} s"
        assert lease.fence >= 1
        assert await redlock.lock("payroll").release() is redlease.ReleaseOutcome.RELEASED
    finally:
        await redlock.aclose()


async def test_masters_that_refuse_connections_fail_every_acquire_within_their_pause(
    redlease_servers_factory, flavor, prefix
):
    """Two of three down (nothing listening): the first acquire is refused at once; a later
    one finds the masters in their reconnect pause (they may be back by its end) and is
    refused once it ends: within about 1 s, never the acquire's whole timeout."""
    first, second, third = redlease_servers_factory(3)
    redlock = await warmed_redlock(flavor, [first, second, third], prefix)
    try:
        second.kill()
        third.kill()
        took = []
        for _ in range(8):
            started = time.monotonic()
            with pytest.raises(redlease.ServerUnavailable):
                await redlock.lock("payroll", ttl=1).acquire(timeout=10)
            took.append(time.monotonic() - started)
            await asyncio.sleep(0.1)
        assert took[0] < 0.25, took
        assert max(took) < RECONNECT_PAUSES_S[-1] + 0.5, took
    finally:
        await redlock.aclose()
