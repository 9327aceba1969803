"""The holder is told by the lease's local deadline, whatever its client's socket settings.

The holder's client is the README's ``redis.Redis()`` with redis-py's defaults, reaching
the server through the project's proxy; the proxy black-holes the link (nothing passes,
nothing is closed), as a partition does. Another client, straight on the server, takes
the lock the moment it can. The holder must know its lease is lost before that moment.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import redlease
from conftest import eventually
from redlease.chaos.proxy import Link, Mode, ProxyHub
from redlease.core.lease import drift_ms

SCHEDULING_SLACK_S = 0.25
"""How late a worker thread or task may be woken on a loaded 2-core machine."""


def readme_client(flavor: str, port: int, prefix: str) -> Any:
    """``redis.Redis()`` as the README writes it, only pointed at the proxy's port."""
    if flavor == "async":
        return redlease.AsyncLocks(redis.asyncio.Redis(port=port), prefix=prefix)
    return redlease.Locks(redis.Redis(port=port), prefix=prefix)


async def call(flavor: str, function: Any, *args: Any, **kwargs: Any) -> Any:
    if flavor == "async":
        return await function(*args, **kwargs)
    return await asyncio.to_thread(function, *args, **kwargs)


def take_when_free(
    url: str, name: str, prefix: str, clock: Any = time.monotonic
) -> tuple[threading.Thread, list[float]]:
    """Another host: tries every 10 ms, straight on the server, until the lock is free."""
    taken: list[float] = []

    def run() -> None:
        with redlease.Locks(url, prefix=prefix) as other:
            lock = other.lock(name, ttl=30)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if lock.try_acquire() is not None:
                    taken.append(clock())
                    lock.release()
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, taken


@pytest.fixture
def link(redlease_url: str) -> Iterator[Link]:
    """A link through the project's proxy to the session's server."""
    target = redis.Redis.from_url(redlease_url).connection_pool.connection_kwargs
    with ProxyHub() as hub:
        yield hub.link(target["host"], target["port"])


@pytest.mark.parametrize("renew", [True, False], ids=["renewed", "fixed-ttl"])
async def test_a_black_holed_holder_is_told_before_anyone_else_can_take_the_lock(
    redlease_url, link, flavor, renew
):
    prefix = f"deadline{os.getpid()}{renew}{flavor}"
    locks = readme_client(flavor, link.port, prefix)
    told: list[float] = []
    try:
        lock = locks.lock("report", ttl=2, renew=renew)
        lease = await call(flavor, lock.acquire)
        lease.on_lost(lambda _: told.append(time.monotonic()))
        if renew:
            await asyncio.sleep(1.0)  # one renewal goes through first
        link.set(mode=Mode.BLACKHOLE)
        blackholed = time.monotonic()
        other, taken = take_when_free(redlease_url, "report", prefix)
        await asyncio.to_thread(other.join, 10)
        flagged_lost = lease.lost
        await asyncio.sleep(SCHEDULING_SLACK_S)
    finally:
        link.set()
        await call(flavor, locks.aclose if flavor == "async" else locks.close)
    assert taken, "the lock never became free"
    assert flagged_lost, "lease.lost was false when another client held the lock"
    assert told, "on_lost never ran"
    assert told[0] <= taken[0] + SCHEDULING_SLACK_S, (
        f"on_lost ran {told[0] - taken[0]:.2f} s after another client took the lock "
        f"({told[0] - blackholed:.2f} s into the black hole)"
    )


async def test_extend_to_a_shorter_ttl_moves_the_deadline_and_the_renewals(
    make_locks, server, prefix
):
    locks = await make_locks()
    lock = locks.lock("shorter")
    lease = await lock.acquire()
    told: list[float] = []
    lease.on_lost(lambda _: told.append(time.monotonic()))
    await lock.extend(1.0)
    extended = time.monotonic()
    await asyncio.sleep(0.5)
    assert lease.renewals >= 1, "renewed at a third of the new TTL, not of the old one"
    server.delete(f"{prefix}:{{shorter}}")
    await asyncio.sleep(1.5)
    assert told, "the loss was not found by the new TTL's schedule"
    assert told[0] - extended < 2.0
    assert await lock.release() is redlease.ReleaseOutcome.EXPIRED


@pytest.mark.parametrize("kind", ["lock", "redlock"])
async def test_renewal_keeps_the_drift_allowance_off_the_deadline(
    make_locks, redlease_servers_factory, redlease_url, prefix, kind, flavor
):
    ttl = 3.0
    if kind == "lock":
        locks = await make_locks()
    else:
        urls = [server.url for server in redlease_servers_factory(3)]
        locks = (
            redlease.AsyncRedlock(urls, prefix=prefix)
            if flavor == "async"
            else _SyncRedlock(redlease.Redlock(urls, prefix=prefix))
        )
    try:
        lock = locks.lock("drift", ttl=ttl, renew=True)
        lease = await lock.acquire()
        while lease.renewals == 0:  # noqa: ASYNC110 - the renewer sets it in another thread
            await asyncio.sleep(0.005)
        left = lease.expires_at - time.monotonic()
        allowed = (ttl * 1000 - drift_ms(round(ttl * 1000))) / 1000
        assert left <= allowed, f"{left:.3f} s left after a renewal; at most {allowed:.3f}"
        await lock.release()
    finally:
        if kind == "redlock":
            await locks.aclose()


class _SyncRedlock:
    """The sync Redlock behind the awaitable face the scenario uses (one thread)."""

    def __init__(self, redlock: redlease.Redlock) -> None:
        from conftest import SyncLocksAdapter  # noqa: PLC0415

        self._adapter = SyncLocksAdapter(redlock)

    def lock(self, name: str, **options: Any) -> Any:
        return self._adapter.lock(name, **options)

    async def aclose(self) -> None:
        await self._adapter.aclose()


RUN_CHILD = "trap 'date +%s.%N > \"$0\"; exit 0' TERM; sleep 60 & wait"
"""A child that writes the wall-clock time it got SIGTERM into the file named by ``$0``."""


def test_redlease_run_stops_its_child_by_the_deadline_on_a_black_holed_link(
    redlease_url, link, tmp_path: Path
):
    prefix = f"runbh{os.getpid()}"
    stamp = tmp_path / "terminated"
    process = subprocess.Popen(
        [
            sys.executable, "-m", "redlease", "run", "nightly",
            "--url", link.url, "--prefix", prefix, "--ttl", "2", "--grace", "1",
            "--", "sh", "-c", RUN_CHILD, str(stamp),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        with redis.Redis.from_url(redlease_url) as plain:
            deadline = time.monotonic() + 60  # a loaded machine starts Python slowly
            while not plain.exists(f"{prefix}:{{nightly}}"):
                assert process.poll() is None, process.communicate()
                assert time.monotonic() < deadline, "run never took the lock"
                time.sleep(0.01)
        time.sleep(1.0)  # a renewal or two go through
        link.set(mode=Mode.BLACKHOLE)
        other, taken = take_when_free(redlease_url, "nightly", prefix, clock=time.time)
        other.join(10)
        status = process.wait(20)
    finally:
        link.set()
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
    assert taken, "the lock never became free"
    assert status == 75, (status, process.stderr.read() if process.stderr else "")
    terminated = float(stamp.read_text())
    assert terminated <= taken[0] + SCHEDULING_SLACK_S, (
        f"the child ran {terminated - taken[0]:.2f} s beside another host's holder"
    )


async def test_a_release_sent_at_the_deadline_tells_the_holder_before_its_reply(
    redlease_url, link, flavor
):
    prefix = f"atdeadline{os.getpid()}{flavor}"
    locks = readme_client(flavor, link.port, prefix)
    told: list[float] = []
    try:
        lock = locks.lock("report", ttl=1, renew=True, owner="holder")
        lease = await call(flavor, lock.acquire)
        lease.on_lost(lambda _: told.append(time.monotonic()))
        link.set(mode=Mode.BLACKHOLE)
        while not lease.lost:  # noqa: ASYNC110 - the lease's own clock turns it
            await asyncio.sleep(0.001)
        released = asyncio.create_task(call(flavor, lock.release))
        await asyncio.sleep(0.3)
        assert told, "on_lost waited for the release's reply on a black-holed link"
        link.set()
        await released
    finally:
        link.set()
        await call(flavor, locks.aclose if flavor == "async" else locks.close)


async def test_a_block_whose_lease_was_lost_exits_with_lease_lost_at_once(
    redlease_url, link, flavor
):
    """Once the lease is lost, its release can only tidy up: the block ends at once with
    LeaseLost, not when a release to an unreachable server gives up (never, without a
    socket timeout)."""
    prefix = f"exitlost{os.getpid()}{flavor}"
    locks = readme_client(flavor, link.port, prefix)
    lock = locks.lock("audit", ttl=1)
    body_ended: list[float] = []
    told: list[float] = []

    def on_lost(_: Any) -> None:
        told.append(time.monotonic())

    def hold_past_the_deadline() -> None:
        with lock as lease:
            lease.on_lost(on_lost)
            link.set(mode=Mode.BLACKHOLE)
            while not lease.lost:
                time.sleep(0.001)
            body_ended.append(time.monotonic())

    async def hold_past_the_deadline_async() -> None:
        async with lock as lease:
            lease.on_lost(on_lost)
            link.set(mode=Mode.BLACKHOLE)
            while not lease.lost:  # noqa: ASYNC110 - the lease's own clock turns it
                await asyncio.sleep(0.001)
            body_ended.append(time.monotonic())

    try:
        with pytest.raises(redlease.LeaseLost):
            if flavor == "async":
                await hold_past_the_deadline_async()
            else:
                await asyncio.to_thread(hold_past_the_deadline)
        exited = time.monotonic() - body_ended[0]
        assert exited < SCHEDULING_SLACK_S, f"the block ended {exited:.2f} s after its body"
        # the renewal worker runs callbacks of a loss it finds on a thread of their own
        assert await eventually(lambda: bool(told), SCHEDULING_SLACK_S), "on_lost did not run"
    finally:
        link.set()
        await call(flavor, locks.aclose if flavor == "async" else locks.close)
