"""A sync waiter reads its client's pub/sub connection itself while it waits (the client's
reader thread lets go of it, and sleeps while nobody else needs it). What a user relies on
stays: every waiter of a client is woken by the release, whether it reads the connection
or another thread does for it, and a wait cut short (Ctrl-C) leaves the client whole."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import redlease
from conftest import allowing
from redlease.chaos.proxy import Mode, ProxyHub


@pytest.fixture
def clients(redlease_url: str, prefix: str) -> Iterator[Callable[[], redlease.Locks]]:
    made: list[redlease.Locks] = []

    def make() -> redlease.Locks:
        made.append(redlease.Locks(redis.Redis.from_url(redlease_url), prefix=prefix))
        return made[-1]

    yield make
    for locks in made:
        locks.close()


def until(condition: Callable[[], object], within: float) -> bool:
    ends = time.monotonic() + within
    while time.monotonic() < ends:
        if condition():
            return True
        time.sleep(0.01)
    return bool(condition())


def queued(server: redis.Redis, lock: Any) -> int:
    return int(server.llen(lock.keys.queue))


def acquire_in_thread(lock: Any, got: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        got["lease"] = lock.acquire(timeout=10)
        got["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.timeout(60)
def test_every_waiting_thread_of_one_client_is_woken_by_the_releases(clients, server, round_trip):
    holder = clients().lock("ledger", ttl=30)
    waiters = clients()
    holder.acquire()
    first: dict[str, Any] = {}
    second: dict[str, Any] = {}
    threads = [acquire_in_thread(waiters.lock("ledger", ttl=30, owner="first"), first)]
    assert until(lambda: queued(server, holder) == 1, within=5)
    time.sleep(0.1)  # the first reads the connection; the client's thread has gone to sleep
    threads.append(acquire_in_thread(waiters.lock("ledger", ttl=30, owner="second"), second))
    assert until(lambda: queued(server, holder) == 2, within=5)
    at_once = allowing(round_trip, quiet=1.0)

    released_at = time.monotonic()
    holder.release()
    assert until(lambda: "at" in first or "at" in second, within=at_once)
    woken, still = (first, second) if "at" in first else (second, first)
    assert woken["lease"] is not None
    assert woken["at"] - released_at < at_once

    owner = "first" if woken is first else "second"
    released_at = time.monotonic()
    waiters.lock("ledger", owner=owner).release()
    assert until(lambda: "at" in still, within=at_once), (
        "the other thread was not woken by the release: nobody read the connection for it"
    )
    assert still["lease"] is not None
    assert still["at"] - released_at < at_once
    for thread in threads:
        thread.join(5)


@pytest.mark.timeout(60)
def test_a_wait_cut_short_by_ctrl_c_leaves_the_client_woken_in_time_afterwards(
    clients, server, round_trip
):
    holder = clients().lock("payroll", ttl=30)
    waiters = clients()
    holder.acquire()
    interrupt = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    interrupt.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            waiters.lock("payroll", ttl=30).acquire(timeout=10)
    finally:
        interrupt.cancel()

    got: dict[str, Any] = {}
    thread = acquire_in_thread(waiters.lock("payroll", ttl=30, owner="next"), got)
    assert until(lambda: queued(server, holder) == 1, within=5)
    released_at = time.monotonic()
    holder.release()
    thread.join(12)
    assert got.get("lease") is not None, "the next wait of the client was never handed the lock"
    assert got["at"] - released_at < allowing(round_trip, quiet=1.0), (
        "the next wait was woken by its timeout, not by the release"
    )


@pytest.mark.timeout(60)
def test_a_connection_broken_half_way_through_a_hand_off_leaves_the_client_listening(
    clients, server, round_trip, redlease_url, prefix
):
    """The hand-off message to a waiter that reads its connection arrives cut in half and
    the connection breaks: the client reconnects, subscribes again and wakes the waiter,
    and its next wait is still handed the lock by the release (not by the TTL cap)."""
    host, port = (
        server.connection_pool.connection_kwargs["host"],
        server.connection_pool.connection_kwargs["port"],
    )
    with ProxyHub() as hub:
        link = hub.link(host, port)
        waiters = redlease.Locks(redis.Redis.from_url(link.url), prefix=prefix)
        try:
            holder = clients().lock("ledger", ttl=6)
            at_once = allowing(round_trip, quiet=1.0)
            for attempt in ("cut", "after"):
                holder.acquire()
                got: dict[str, Any] = {}
                thread = acquire_in_thread(waiters.lock("ledger", ttl=6, owner="waiter"), got)
                assert until(lambda: queued(server, holder) == 1, within=5)
                time.sleep(0.1)  # the waiter reads its connection
                if attempt == "cut":
                    link.set(mode=Mode.CUT_MESSAGE)
                released_at = time.monotonic()
                holder.release()
                thread.join(12)
                assert got.get("lease") is not None, attempt
                assert got["at"] - released_at < at_once, (
                    f"{attempt}: handed the lock after {got['at'] - released_at:.2f} s, by the "
                    "TTL cap: the client stopped listening"
                )
                waiters.lock("ledger", owner="waiter").release()
        finally:
            waiters.close()
