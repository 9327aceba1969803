"""``replicas=N``: a grant counts only once N replicas confirmed it, or it is rolled back.

The docs promise that with ``replicas=N`` a grant is confirmed by N replicas before
``acquire`` returns, or rolled back with ``NotReplicated``; the replica timeout bounds how
long that takes; and a lock's own ``replicas=`` overrides the client's.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

import redlease
from conftest import allowing, token_in
from redlease import InvalidArgument, NotReplicated, ReleaseOutcome

pytestmark = pytest.mark.timeout(30)

REPLICA_TIMEOUT = 0.3
"""On a quiet machine; ten round trips when longer, so a grant that waits for no replica
(one round trip) still takes clearly less."""


async def test_grant_is_on_the_replica_when_acquire_returns(make_locks, pair, prefix):
    # a generous timeout: on a busy machine a live replica can take a while to acknowledge
    locks = await make_locks(pair.master.url, replicas=1, replica_timeout=3)

    lease = await locks.lock("invoice", ttl=30).acquire()

    assert token_in(pair.on_replica.get(f"{prefix}:{{invoice}}")) == lease.token
    assert await locks.lock("invoice").release() is ReleaseOutcome.RELEASED


async def test_paused_replica_rolls_the_grant_back_within_the_replica_timeout(
    make_locks, pair, prefix, round_trip
):
    replica_timeout = allowing(round_trip, quiet=REPLICA_TIMEOUT)
    locks = await make_locks(pair.master.url, replicas=1, replica_timeout=replica_timeout)
    plain = await make_locks(pair.master.url)
    pair.replica.pause()
    try:
        started = time.monotonic()
        with pytest.raises(NotReplicated):
            await locks.lock("invoice", ttl=30).acquire(timeout=0)
        elapsed = time.monotonic() - started

        assert pair.on_master.get(f"{prefix}:{{invoice}}") is None, "the grant was rolled back"
        taken = await plain.lock("invoice", ttl=30).acquire(timeout=0)
        assert token_in(pair.on_master.get(f"{prefix}:{{invoice}}")) == taken.token
    finally:
        pair.replica.resume()

    assert replica_timeout <= elapsed < replica_timeout + allowing(round_trip, quiet=1.0), (
        f"NotReplicated after {elapsed:.2f} s with a {replica_timeout} s replica timeout"
    )
    assert await plain.lock("invoice").release() is ReleaseOutcome.RELEASED


async def test_a_locks_replicas_overrides_the_clients(make_locks, pair, prefix, round_trip):
    replica_timeout = allowing(round_trip, quiet=REPLICA_TIMEOUT)
    unacknowledged = await make_locks(pair.master.url, replica_timeout=replica_timeout)
    acknowledged = await make_locks(pair.master.url, replicas=1, replica_timeout=replica_timeout)
    pair.replica.pause()
    try:
        started = time.monotonic()
        with pytest.raises(NotReplicated):
            await unacknowledged.lock("strict", ttl=30, replicas=1).acquire(timeout=0)
        strict_took = time.monotonic() - started
        assert pair.on_master.get(f"{prefix}:{{strict}}") is None

        started = time.monotonic()
        lease = await acknowledged.lock("relaxed", ttl=30, replicas=0).acquire(timeout=0)
        relaxed_took = time.monotonic() - started
        assert token_in(pair.on_master.get(f"{prefix}:{{relaxed}}")) == lease.token
    finally:
        pair.replica.resume()

    assert relaxed_took < strict_took, "replicas=0 on the lock waits for no replica"
    assert replica_timeout <= strict_took < replica_timeout + allowing(round_trip, quiet=1.0), (
        f"the lock's replicas=1 took {strict_took:.2f} s; the client's replica timeout is "
        f"{replica_timeout} s"
    )
    assert await acknowledged.lock("relaxed", replicas=0).release() is ReleaseOutcome.RELEASED


async def test_a_multi_lock_is_rolled_back_unless_the_replicas_confirm_it(
    make_locks, pair, prefix, round_trip, flavor
):
    """A multi-lock on one server is one script: it used to skip the replica check and
    return a grant no replica had."""

    async def take(replica_timeout: float) -> Any:
        locks = await make_locks(pair.master.url, replicas=1, replica_timeout=replica_timeout)
        if flavor == "sync":
            multi = locks.locks.multi_lock(["ledger", "stock"], ttl=30)
            return await locks.run(multi.acquire, timeout=0), lambda: locks.run(multi.release)
        multi = locks.multi_lock(["ledger", "stock"], ttl=30)
        return await multi.acquire(timeout=0), multi.release

    # a generous timeout: on a busy machine a live replica can take a while to acknowledge
    held, release = await take(replica_timeout=3)
    tokens = {lease.name: lease.token for lease in held.leases}
    for name in ("ledger", "stock"):
        assert token_in(pair.on_replica.get(f"{prefix}:{{{name}}}")) == tokens[name]
    assert await release() is ReleaseOutcome.RELEASED

    pair.replica.pause()
    try:
        with pytest.raises(NotReplicated):
            await take(replica_timeout=allowing(round_trip, quiet=REPLICA_TIMEOUT))
        for name in ("ledger", "stock"):
            assert pair.on_master.get(f"{prefix}:{{{name}}}") is None, "the grant was rolled back"
    finally:
        pair.replica.resume()


@pytest.mark.parametrize("where", ["client", "lock"])
def test_a_replica_timeout_the_socket_timeout_would_cut_short_is_refused(pair, prefix, where):
    """WAIT answers only at the end of the replica timeout when a replica is missing; a
    client whose socket timeout is no longer gave up on the reply first and raised
    ``ServerUnavailable`` instead of ``NotReplicated``."""
    socket_timeout = 3.0  # the replica of a busy machine answers well within 0.9 of it
    client = redis.Redis(port=pair.master.port, socket_timeout=socket_timeout)
    options = {"replicas": 1} if where == "client" else {}
    for too_close in (1, 0.95):  # WAIT's reply comes a little after its timeout
        with pytest.raises(InvalidArgument, match="socket_timeout"):
            locks = redlease.Locks(
                client, prefix=prefix, replica_timeout=too_close * socket_timeout, **options
            )
            locks.lock("invoice", replicas=1)
    fits = 0.9 * socket_timeout
    with redlease.Locks(client, prefix=prefix, replica_timeout=fits, replicas=1) as locks:
        assert locks.lock("invoice", ttl=30).acquire(timeout=0).fence > 0
        assert locks.lock("invoice").release() is ReleaseOutcome.RELEASED


def test_an_acquire_sent_again_on_a_new_connection_is_a_write_its_wait_covers(pair, prefix):
    """redis-py sends a pipeline again on a new connection after a socket timeout. The
    acquire found its own grant and wrote nothing, so the WAIT after it, counting only
    that connection's writes, answered at once with the paused replica: the client
    returned a lease no replica had."""
    with redlease.Locks(pair.master.url, prefix=prefix) as locks:
        operation = locks.lock("invoice", ttl=30)._claim("sent-again", "publish").acquire_op("0")
    script = (operation.script.source, len(operation.keys), *operation.keys, *operation.args)
    with redis.Redis(port=pair.master.port) as first:
        assert int(first.eval(*script)[0]) == 1
    pair.replica.pause()
    try:
        with redis.Redis(port=pair.master.port) as again:
            pipe = again.pipeline(transaction=False)
            pipe.eval(*script)
            pipe.execute_command("WAIT", 1, 200)
            granted, confirmed = pipe.execute()
    finally:
        pair.replica.resume()
    assert int(granted[0]) == 1, "the retry finds its own grant"
    assert confirmed == 0, "the WAIT covered the grant: the paused replica did not confirm it"


async def test_a_try_on_a_held_lock_does_not_wait_for_the_replicas(
    make_locks, pair, prefix, round_trip, flavor
):
    """guide.md: the replica confirmation is for a grant, and ``timeout`` bounds the wait for
    the lock. Every attempt sent its WAIT along, so with the replica paused a single try on
    a held lock took the whole replica timeout, and a waiter queued that much later than a
    waiter that came after it (an outside tester: 1.01 s for ``acquire(timeout=0)``)."""
    replica_timeout = max(2.0, allowing(round_trip, quiet=2.0, round_trips=40))
    locks = await make_locks(pair.master.url, replicas=1, replica_timeout=replica_timeout)
    plain = await make_locks(pair.master.url)
    await plain.lock("invoice", ttl=30).acquire()
    pair.replica.pause()
    try:
        started = time.monotonic()
        assert await locks.lock("invoice", ttl=30).try_acquire() is None
        tried = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(redlease.LockTimeout):
            await locks.lock("invoice", ttl=30).acquire(timeout=0.2)
        waited = time.monotonic() - started
        started = time.monotonic()
        family = locks.locks if flavor == "sync" else locks
        multi = family.multi_lock(["invoice", "ledger"], ttl=30)
        with pytest.raises(redlease.LockTimeout):
            if flavor == "sync":
                await locks.run(multi.acquire, timeout=0)
            else:
                await multi.acquire(timeout=0)
        tried_both = time.monotonic() - started
    finally:
        pair.replica.resume()
    assert tried < replica_timeout / 2, f"a try on a held lock took {tried:.2f} s"
    assert waited < 0.2 + replica_timeout / 2, f"acquire(timeout=0.2) took {waited:.2f} s"
    assert tried_both < replica_timeout / 2, f"a multi-lock's try took {tried_both:.2f} s"
    assert await plain.lock("invoice").release() is ReleaseOutcome.RELEASED
