"""The lock family as its users meet it: fair locks, read-write locks, semaphores, latches
and multi-locks, against a real server, with real processes where crashes and races matter.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import redlease
from conftest import subscribed_channels, token_in
from redlease import ReleaseOutcome

pytestmark = pytest.mark.timeout(60)
WORKER = str(Path(__file__).with_name("proc_family_worker.py"))


class OnItsThread:
    """Awaitable face of one sync family object: each call runs on its client's thread."""

    def __init__(self, client: Any, target: Any) -> None:
        self._client = client
        self._target = target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if not callable(value):
            return value
        return functools.partial(self._client.run, value)

    async def __aenter__(self) -> Any:
        return await self._client.run(self._target.__enter__)

    async def __aexit__(self, *exc_info: Any) -> Any:
        return await self._client.run(self._target.__exit__, *exc_info)


class SyncFamily:
    """The lock family of a sync client (behind conftest's adapter), made awaitable."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)

    def fair_lock(self, name: str, **options: Any) -> OnItsThread:
        return OnItsThread(self.client, self.client.locks.fair_lock(name, **options))

    def rw_lock(self, name: str, **options: Any) -> SimpleNamespace:
        rw = self.client.locks.rw_lock(name, **options)
        return SimpleNamespace(
            name=rw.name,
            read=OnItsThread(self.client, rw.read),
            write=OnItsThread(self.client, rw.write),
        )

    def semaphore(self, name: str, permits: int, **options: Any) -> OnItsThread:
        return OnItsThread(self.client, self.client.locks.semaphore(name, permits, **options))

    def latch(self, name: str) -> OnItsThread:
        return OnItsThread(self.client, self.client.locks.latch(name))

    def multi_lock(self, names: list[str], **options: Any) -> OnItsThread:
        return OnItsThread(self.client, self.client.locks.multi_lock(names, **options))


@pytest.fixture
def make_family(make_locks, flavor) -> Callable[..., Awaitable[Any]]:
    """``await make_family()``: a new client of the test's flavour with awaitable family."""

    async def make(**options: Any) -> Any:
        locks = await make_locks(**options)
        return SyncFamily(locks) if flavor == "sync" else locks

    return make


@pytest.fixture
def start_worker(redlease_url, prefix, flavor) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """``start_worker(role, name, *options)``: a family member in its own process.

    Runs ``proc_family_worker.py`` on the test's server, prefix and flavour; whatever is
    still running when the test ends is killed.
    """
    started: list[subprocess.Popen[str]] = []

    def start(role: str, name: str, *options: str) -> subprocess.Popen[str]:
        command = [sys.executable, WORKER, role, redlease_url, prefix, name, "--flavor", flavor]
        process = subprocess.Popen([*command, *options], stdout=subprocess.PIPE, text=True)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait()
        assert process.stdout is not None
        process.stdout.close()


async def next_line(process: subprocess.Popen[str], within: float = 15.0) -> str:
    """The worker's next line, read off the event loop (the clients under test keep running)."""
    assert process.stdout is not None
    return (await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), within)).strip()


async def eventually(check: Callable[[], bool], within: float = 5.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "the condition did not come true in time"
        await asyncio.sleep(0.02)


def kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()


def channels_left(server, prefix: str) -> list[str]:
    """Wake-up channels anyone still listens on under ``prefix`` (sharded or not)."""
    return subscribed_channels(server, f"{prefix}:*")


def by_acquired(turn: list[str]) -> float:
    """Fair workers log ``<label> <fence> <acquired> <released>``."""
    return float(turn[2])


async def hand_over(held: Any, waiting: Any, next_lock: Any, server: Any, queue: str) -> None:
    """Release ``held``: the task ``waiting`` for ``next_lock`` gets it within a second,
    and once that is released too, the queue is empty."""
    released_at = time.monotonic()
    await held.release()
    await asyncio.wait_for(waiting, 2.0)
    assert time.monotonic() - released_at < 1.0
    await next_lock.release()
    assert server.llen(queue) == 0


async def held_fair_lock(
    make_family: Any, prefix: str, tmp_path: Any, name: str
) -> tuple[Any, str, Any]:
    """The turns log, the queue key and a client's fair lock ``name``, held."""
    holder = (await make_family()).fair_lock(name)
    await holder.acquire()
    return tmp_path / "turns.log", f"{prefix}:{{{name}}}:queue", holder


async def queue_up(
    start_worker: Any, server: Any, queue: str, labels: list[str], log: Any, hold: float
) -> dict[str, subprocess.Popen[str]]:
    """Fair-lock workers, one per label, each waiting in ``queue`` before the next starts."""
    name = queue.split("{")[1].split("}", maxsplit=1)[0]
    waiters: dict[str, subprocess.Popen[str]] = {}
    for label in labels:
        turn = ["--label", label, "--log", str(log), "--hold", str(hold)]
        waiters[label] = start_worker("fair", name, *turn)
        assert await next_line(waiters[label]) == "WAITING"
        await eventually(lambda n=len(waiters): server.llen(queue) == n)
    return waiters


def pid_of(queue_entry: str) -> int:
    """Queue entries end with the waiter's token, ``<random>|<host>|<pid>|<owner>``."""
    return int(queue_entry.split("|")[2])


# --- fair lock -----------------------------------------------------------------------


async def test_fair_lock_serves_waiting_processes_in_arrival_order(
    make_family, start_worker, server, prefix, tmp_path
):
    log, queue, holder = await held_fair_lock(make_family, prefix, tmp_path, "counter")
    labels = [str(arrival) for arrival in range(5)]
    waiters = list((await queue_up(start_worker, server, queue, labels, log, 0.05)).values())
    assert [pid_of(entry) for entry in server.lrange(queue, 0, -1)] == [w.pid for w in waiters]

    await holder.release()
    assert [await asyncio.to_thread(w.wait, 30) for w in waiters] == [0] * 5

    turns = sorted((line.split() for line in log.read_text().splitlines()), key=by_acquired)
    assert [label for label, *_ in turns] == ["0", "1", "2", "3", "4"]
    fences = [int(fence) for _, fence, *_ in turns]
    assert fences == sorted(set(fences))
    assert server.llen(queue) == 0


async def test_a_killed_waiter_in_the_fair_queue_is_skipped_at_once(
    make_family, start_worker, server, prefix, tmp_path
):
    log, queue, holder = await held_fair_lock(make_family, prefix, tmp_path, "printer")
    waiters = await queue_up(start_worker, server, queue, ["first", "crashed", "third"], log, 0.3)
    crashed = waiters.pop("crashed")
    kill(crashed)

    await holder.release()
    assert [await asyncio.to_thread(w.wait, 20) for w in waiters.values()] == [0, 0]

    turns = {}
    for label, _, acquired, released in map(str.split, log.read_text().splitlines()):
        turns[label] = (float(acquired), float(released))
    assert sorted(turns) == ["first", "third"]
    gap = turns["third"][0] - turns["first"][1]
    assert gap < 1.0, f"the waiter behind the dead one got the lock {gap:.2f} s after release"
    assert not [e for e in server.lrange(queue, 0, -1) if pid_of(e) == crashed.pid]
    assert server.llen(queue) == 0


async def test_a_fair_waiter_that_times_out_leaves_no_trace_and_does_not_stall_the_queue(
    make_family, server, prefix
):
    queue = f"{prefix}:{{desk}}:queue"
    holder, quitter, patient = [await make_family() for _ in range(3)]
    await holder.fair_lock("desk").acquire()
    giving_up = asyncio.create_task(quitter.fair_lock("desk").acquire(timeout=1.0))
    await eventually(lambda: server.llen(queue) == 1)
    desk = patient.fair_lock("desk", owner="patient")  # acquired in a task, released here
    waiting = asyncio.create_task(desk.acquire(timeout=15))
    await eventually(lambda: server.llen(queue) == 2)

    with pytest.raises(redlease.LockTimeout):
        await giving_up
    assert len(channels_left(server, prefix)) <= 2, "one channel per waiting client, no more"
    assert server.llen(queue) == 1

    await hand_over(holder.fair_lock("desk"), waiting, desk, server, queue)
    assert len(channels_left(server, prefix)) <= 2


async def test_a_cancelled_fair_waiter_leaves_no_trace_and_does_not_stall_the_queue(
    redlease_url, server, prefix
):
    queue = f"{prefix}:{{desk}}:queue"
    async with (
        redlease.AsyncLocks(redlease_url, prefix=prefix) as holder,
        redlease.AsyncLocks(redlease_url, prefix=prefix) as quitter,
        redlease.AsyncLocks(redlease_url, prefix=prefix) as patient,
    ):
        await holder.fair_lock("desk").acquire()
        cancelled = asyncio.create_task(quitter.fair_lock("desk").acquire())
        await eventually(lambda: server.llen(queue) == 1)
        desk = patient.fair_lock("desk", owner="patient")
        waiting = asyncio.create_task(desk.acquire(timeout=15))
        await eventually(lambda: server.llen(queue) == 2)

        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        await eventually(lambda: server.llen(queue) == 1, within=1.0)
        assert quitter._notifier.waiting() == 0
        assert len(channels_left(server, prefix)) <= 2, "one channel per waiting client"

        await hand_over(holder.fair_lock("desk"), waiting, desk, server, queue)
        assert not server.exists(f"{prefix}:{{desk}}")
    await eventually(lambda: channels_left(server, prefix) == [], within=1.0)


# --- read-write lock ------------------------------------------------------------------


async def test_readers_share_the_lock_and_a_writer_excludes_them(make_family):
    readers = [(await make_family()).rw_lock("catalog") for _ in range(3)]
    # Acquired in tasks, released from the test: these two name their owner.
    writer = (await make_family()).rw_lock("catalog", owner="writer")
    latecomer = (await make_family()).rw_lock("catalog", owner="latecomer")
    for rw in readers:
        await rw.read.acquire(timeout=1)
    assert await readers[0].read.readers() == 3

    with pytest.raises(redlease.LockTimeout):
        await writer.write.acquire(timeout=0.3)
    writing = asyncio.create_task(writer.write.acquire(timeout=10))
    await asyncio.sleep(0.3)
    assert not writing.done(), "the writer got in while three readers held the lock"
    with pytest.raises(redlease.LockTimeout):
        await latecomer.read.acquire(timeout=0.3)  # a waiting writer keeps new readers out

    for rw in readers:
        await rw.read.release()
    await asyncio.wait_for(writing, 2.0)
    assert await writer.write.owned()
    assert await readers[0].read.readers() == 0

    reading = asyncio.create_task(latecomer.read.acquire(timeout=10))
    await asyncio.sleep(0.3)
    assert not reading.done(), "a reader got in while the writer held the lock"
    await writer.write.release()
    await asyncio.wait_for(reading, 2.0)
    assert await latecomer.read.readers() == 1
    await latecomer.read.release()


async def test_a_writer_is_not_starved_by_eight_looping_reader_processes(
    make_family, start_worker, tmp_path
):
    stop = tmp_path / "stop"
    readers = [
        start_worker("read-loop", "feed", "--hold", "0.02", "--stop", str(stop)) for _ in range(8)
    ]
    try:
        for reader in readers:
            assert await next_line(reader, within=30) == "READING"
        rw = (await make_family()).rw_lock("feed")
        samples = []
        for _ in range(20):
            samples.append(await rw.read.readers())
            await asyncio.sleep(0.01)
        assert sum(n > 0 for n in samples) >= 10, f"readers hardly overlapped: {samples}"

        started = time.monotonic()
        await rw.write.acquire(timeout=10)
        waited = time.monotonic() - started
        assert waited < 2.0, f"the writer waited {waited:.2f} s behind looping readers"
        assert await rw.read.readers() == 0
        await asyncio.sleep(0.2)
        assert await rw.read.readers() == 0
        await rw.write.release()
    finally:
        stop.touch()
        codes = [await asyncio.to_thread(reader.wait, 30) for reader in readers]
    assert codes == [0] * 8
    loops = [int((await next_line(reader)).split()[1]) for reader in readers]
    assert min(loops) >= 2, f"some readers never got back in after the writer: {loops}"


async def test_read_and_write_are_each_reentrant_for_their_owner(make_family):
    rw = (await make_family()).rw_lock("profile")
    other = (await make_family()).rw_lock("profile")

    first = await rw.read.acquire()
    again = await rw.read.acquire()
    assert again is first
    assert first._count == 2
    assert await rw.read.readers() == 1
    assert await other.write.try_acquire() is None
    assert await rw.read.release() is ReleaseOutcome.STILL_HELD
    assert await other.write.try_acquire() is None
    assert await rw.read.release() is ReleaseOutcome.RELEASED

    written = await rw.write.acquire()
    assert await rw.write.acquire() is written
    assert written._count == 2
    assert await other.read.try_acquire() is None
    with pytest.raises(redlease.LockError, match="downgrade"):
        await rw.read.acquire()
    assert await rw.write.release() is ReleaseOutcome.STILL_HELD
    assert await other.read.try_acquire() is None
    assert await rw.write.release() is ReleaseOutcome.RELEASED
    assert await other.read.try_acquire() is not None
    await other.read.release()


async def test_downgrade_lets_a_waiting_reader_in_while_the_holder_keeps_reading(
    make_family, server, prefix
):
    editor = (await make_family()).rw_lock("article")
    viewer = (await make_family()).rw_lock("article", owner="viewer")
    written = await editor.write.acquire()
    viewing = asyncio.create_task(viewer.read.acquire(timeout=10))
    await asyncio.sleep(0.3)
    assert not viewing.done()

    read = await editor.write.downgrade()
    await asyncio.wait_for(viewing, 1.5)
    assert read.token == written.token
    assert read.fence == written.fence
    assert await editor.read.readers() == 2
    assert await editor.read.owned()
    assert not await editor.write.locked()
    assert not server.exists(f"{prefix}:{{article}}:writer")

    assert await editor.read.release() is ReleaseOutcome.RELEASED
    assert await viewer.read.release() is ReleaseOutcome.RELEASED
    assert await editor.read.readers() == 0


async def test_a_crashed_reader_blocks_a_writer_only_until_its_ttl(make_family, start_worker):
    reader = start_worker("read", "ledger", "--ttl", "1")
    assert (await next_line(reader)).startswith("ACQUIRED")
    kill(reader)
    killed_at = time.monotonic()
    rw = (await make_family()).rw_lock("ledger")

    assert await rw.write.try_acquire() is None
    await rw.write.acquire(timeout=5)
    waited = time.monotonic() - killed_at
    assert 0.5 < waited < 2.5, f"the writer got in {waited:.2f} s after the crash"
    await rw.write.release()


async def test_a_writer_that_gives_up_lets_the_readers_queued_behind_it_in(
    make_family, server, prefix
):
    holder = (await make_family()).rw_lock("menu")
    writer = (await make_family()).rw_lock("menu")
    reader = (await make_family()).rw_lock("menu", owner="reader")
    await holder.read.acquire()
    giving_up = asyncio.create_task(writer.write.acquire(timeout=0.8))
    await eventually(lambda: server.llen(f"{prefix}:{{menu}}:queue") == 1)
    reading = asyncio.create_task(reader.read.acquire(timeout=3))
    await eventually(lambda: server.llen(f"{prefix}:{{menu}}:queue") == 2)

    with pytest.raises(redlease.LockTimeout):
        await giving_up
    gave_up_at = time.monotonic()
    await asyncio.wait_for(reading, 15)
    waited = time.monotonic() - gave_up_at
    assert waited < 1.0, f"the reader waited {waited:.2f} s after the writer ahead gave up"
    assert await holder.read.readers() == 2
    await reader.read.release()
    await holder.read.release()


async def test_a_killed_writer_waiting_in_the_queue_does_not_keep_readers_out(
    make_family, start_worker, server, prefix
):
    holder = (await make_family()).rw_lock("wiki")
    await holder.read.acquire()
    writer = start_worker("write", "wiki")
    assert await next_line(writer) == "WAITING"
    await eventually(lambda: server.llen(f"{prefix}:{{wiki}}:queue") == 1)
    kill(writer)

    reader = (await make_family()).rw_lock("wiki")
    started = time.monotonic()
    await reader.read.acquire(timeout=2)
    assert time.monotonic() - started < 1.0
    assert await holder.read.readers() == 2
    await reader.read.release()
    await holder.read.release()


# --- semaphore ------------------------------------------------------------------------


async def test_permits_are_shared_and_a_released_one_is_handed_to_the_waiter(make_family):
    holders = [(await make_family()).semaphore("pool", permits=3) for _ in range(3)]
    late = (await make_family()).semaphore("pool", permits=3)
    assert await late.available() == 3
    leases = []
    for expected_left, semaphore in zip((2, 1, 0), holders, strict=True):
        leases.append(await semaphore.acquire(timeout=1))
        assert await late.available() == expected_left

    waiting = asyncio.create_task(late.acquire(timeout=20))
    await asyncio.sleep(0.3)
    assert not waiting.done(), "a fourth holder got one of three permits"

    released_at = time.monotonic()
    assert await holders[1].release(leases[1]) is ReleaseOutcome.RELEASED
    # Permits last 30 s: only a hand-over (not a re-check on expiry) can be this quick.
    last = await asyncio.wait_for(waiting, 5.0)
    assert time.monotonic() - released_at < 1.0
    assert await late.available() == 0

    await late.release(last)
    for semaphore, lease in ((holders[0], leases[0]), (holders[2], leases[2])):
        await semaphore.release(lease)
    assert await late.available() == 3


async def test_a_crashed_permit_holders_permit_returns_after_its_lease(make_family, start_worker):
    holder = start_worker("permit", "gpu", "--permits", "1", "--ttl", "1")
    assert (await next_line(holder)).startswith("ACQUIRED")
    kill(holder)
    killed_at = time.monotonic()
    semaphore = (await make_family()).semaphore("gpu", permits=1)

    assert await semaphore.available() == 0
    assert await semaphore.try_acquire() is None
    lease = await semaphore.acquire(timeout=5)
    waited = time.monotonic() - killed_at
    assert 0.5 < waited < 2.5, f"the permit came back {waited:.2f} s after the crash"
    await semaphore.release(lease)
    assert await semaphore.available() == 1


async def test_a_renewed_permit_outlives_its_ttl_while_its_worker_holds_it(make_family):
    semaphore = (await make_family()).semaphore("slot", permits=1, ttl=0.6, renew=True)
    other = (await make_family()).semaphore("slot", permits=1)
    lease = await semaphore.acquire(timeout=1)

    await asyncio.sleep(2.0)
    assert not lease.lost
    assert await other.available() == 0
    assert await other.try_acquire() is None
    assert await semaphore.release(lease) is ReleaseOutcome.RELEASED
    assert await other.available() == 1


async def test_async_with_takes_and_returns_a_permit(make_family):
    semaphore = (await make_family()).semaphore("door", permits=2)
    async with semaphore as outer:
        async with semaphore as inner:
            assert outer.token != inner.token
            assert await semaphore.available() == 0
        assert await semaphore.available() == 1
    assert await semaphore.available() == 2


# --- count-down latch -----------------------------------------------------------------


async def test_latch_waiters_in_another_process_and_task_wake_when_the_count_reaches_zero(
    make_family, start_worker
):
    latch = (await make_family()).latch("batch")
    assert await latch.try_set_count(2)
    assert not await latch.try_set_count(5), "a counting latch was restarted"
    waiter = start_worker("latch", "batch", "--timeout", "20")
    assert await next_line(waiter) == "WAITING"
    local = asyncio.create_task((await make_family()).latch("batch").wait(20))
    await asyncio.sleep(0.5)

    assert await latch.count_down() == 1
    await asyncio.sleep(0.3)
    assert waiter.poll() is None
    assert not local.done()

    counted_at = time.monotonic()
    assert await latch.count_down() == 0
    assert await next_line(waiter, within=5) == "WOKE True"
    assert await asyncio.wait_for(local, 5) is True
    assert time.monotonic() - counted_at < 1.5
    assert await asyncio.to_thread(waiter.wait, 5) == 0


async def test_latch_wait_gives_up_with_false_after_its_timeout(make_family):
    latch = (await make_family()).latch("quorum")
    assert await latch.try_set_count(1)
    started = time.monotonic()
    assert await latch.wait(0.3) is False
    assert 0.25 < time.monotonic() - started < 1.5
    assert await latch.count() == 1


@pytest.mark.parametrize("timeout", [float("nan"), "1", True, [1]])
async def test_latch_wait_refuses_a_timeout_that_is_no_number(make_family, timeout):
    """As ``acquire(timeout=...)`` does, in both flavours: the sync one said the server did
    not confirm a subscription, the asyncio one waited for ever, "1" gave a TypeError."""
    latch = (await make_family()).latch("bad-wait")
    assert await latch.try_set_count(1)
    with pytest.raises(redlease.InvalidArgument, match="timeout"):
        await asyncio.wait_for(latch.wait(timeout), 5)
    assert await latch.count() == 1


async def test_a_timeout_beyond_any_float_waits_as_long_as_inf(make_family):
    """An int too large for a float used to escape as OverflowError."""
    family = await make_family()
    latch = family.latch("huge-wait")
    assert await latch.try_set_count(1)
    assert await latch.wait(-(10**400)) is False
    lease = await family.lock("huge-wait", timeout=10**400).acquire(timeout=10**400)
    assert lease.fence > 0


async def test_latch_wait_with_no_time_left_looks_once(make_family):
    latch = (await make_family()).latch("look-once")
    assert await latch.try_set_count(1)
    assert await latch.wait(0) is False
    assert await latch.wait(-1) is False
    assert await latch.count_down() == 0
    assert await latch.wait(-1) is True


async def test_latch_count_never_goes_below_zero(make_family, server, prefix):
    counters = [(await make_family()).latch("votes") for _ in range(6)]
    assert await counters[0].try_set_count(4)
    left = await asyncio.gather(*(latch.count_down() for latch in counters))
    assert sorted(left) == [0, 0, 0, 1, 2, 3]
    assert await counters[0].count() == 0
    assert await counters[0].count_down() == 0
    assert await counters[0].count() == 0
    assert server.get(f"{prefix}:{{votes}}:count") is None
    assert await counters[0].wait(0) is True


# --- multi-lock -----------------------------------------------------------------------


async def test_a_multi_lock_takes_all_or_nothing(make_family, server, prefix):
    mover, other = await make_family(), await make_family()
    busy = await other.lock("b").acquire()
    multi = mover.multi_lock(["a", "b", "c"], owner="mover")
    trying = asyncio.create_task(multi.acquire(timeout=1.0))
    await asyncio.sleep(0.5)
    assert not server.exists(f"{prefix}:{{a}}", f"{prefix}:{{c}}"), "held part while waiting"

    with pytest.raises(redlease.LockTimeout):
        await trying
    assert not server.exists(f"{prefix}:{{a}}", f"{prefix}:{{c}}")
    assert token_in(server.get(f"{prefix}:{{b}}")) == busy.token
    assert server.llen(f"{prefix}:{{b}}:queue") == 0

    taking = asyncio.create_task(multi.acquire(timeout=5))
    await asyncio.sleep(0.2)
    await other.lock("b").release()
    held = await asyncio.wait_for(taking, 5)
    tokens = {token_in(server.get(f"{prefix}:{{{name}}}")) for name in ("a", "b", "c")}
    assert tokens == {held.leases[0].token}
    assert sorted(held.fences) == ["a", "b", "c"]
    assert await multi.release() is ReleaseOutcome.RELEASED
    assert not server.exists(f"{prefix}:{{a}}", f"{prefix}:{{b}}", f"{prefix}:{{c}}")


@pytest.mark.parametrize("timeout", [0, 1], ids=["one-try", "blocking"])
async def test_a_multi_lock_on_a_server_that_is_gone_says_it_could_not_acquire(
    make_locks, flavor, redlease_servers_factory, timeout
):
    """The acquisition's own error, not that of the withdrawal sent after it (which fails
    the same way): "could not acquire", where it said "could not release"."""
    (server,) = redlease_servers_factory(1)
    locks = await make_locks(f"{server.url}?socket_timeout=1&socket_connect_timeout=1")
    family = SyncFamily(locks) if flavor == "sync" else locks
    async with family.lock("warm"):
        pass
    server.kill()
    multi = family.multi_lock(["a", "b"])
    with pytest.raises(redlease.ServerUnavailable, match="could not acquire lock 'a'"):
        await multi.acquire(timeout=timeout)


async def test_a_latch_on_a_server_that_is_gone_says_what_it_could_not_do(
    make_locks, flavor, redlease_servers_factory
):
    (server,) = redlease_servers_factory(1)
    locks = await make_locks(f"{server.url}?socket_timeout=1&socket_connect_timeout=1")
    family = SyncFamily(locks) if flavor == "sync" else locks
    latch = family.latch("gone")
    assert await latch.try_set_count(2)
    server.kill()
    for call, says in [
        (latch.count_down, "could not count down"),
        (latch.count, "could not read"),
        (functools.partial(latch.try_set_count, 3), "could not set the count of"),
    ]:
        with pytest.raises(redlease.ServerUnavailable, match=says):
            await call()


async def test_one_owner_holding_a_name_as_a_lock_and_in_a_multi_lock_is_refused_at_once(
    make_family,
):
    """A multi-lock would wait on its own owner's lock of one of its names (forever, with
    no timeout), and a lock on its owner's multi-lock part: both are refused at once, as a
    read-write lock refuses its own owner's upgrade."""
    family = await make_family()
    single = family.lock("acct:1")
    multi = family.multi_lock(["acct:1", "acct:2"])
    await single.acquire()
    with pytest.raises(redlease.LockError, match="already holds") as refused:
        await multi.acquire(timeout=2)
    assert not isinstance(refused.value, redlease.LockTimeout)
    await single.release()

    await multi.acquire()
    for part in (family.lock("acct:2"), family.fair_lock("acct:2")):
        with pytest.raises(redlease.LockError, match="multi-lock") as refused:
            await part.acquire(timeout=2)
        assert not isinstance(refused.value, redlease.LockTimeout)
    await multi.release()
    await single.acquire()  # both free again
    await single.release()


async def test_a_multi_lock_is_released_by_any_handle_of_its_names_and_owner(
    make_family, server, prefix
):
    """As with a lock's ``owner=``: what one handle took, another handle of the same
    names (in any order) and owner releases; a handle of another owner cannot."""
    client = await make_family()
    held = await client.multi_lock(["a", "b"], owner="job-7").acquire()
    with pytest.raises(redlease.NotOwned):
        await client.multi_lock(["a", "b"], owner="job-8").release()
    with pytest.raises(redlease.LockError, match="already held"):
        await client.multi_lock(["b", "a"], owner="job-7").acquire(timeout=0)
    with pytest.raises(redlease.NotOwned):  # another set of names, though joined alike
        await client.multi_lock(["a+b"], owner="job-7").release()
    assert await client.multi_lock(["b", "a"], owner="job-7").release() is ReleaseOutcome.RELEASED
    assert not server.exists(f"{prefix}:{{a}}", f"{prefix}:{{b}}")
    assert not held.lost


async def test_a_multi_lock_tells_its_on_lost_callback_once_whatever_parts_are_lost(
    make_family, server, prefix
):
    client = await make_family()
    held = await client.multi_lock(["a", "b"], ttl=1, owner="job").acquire()
    told: list[str] = []
    held.on_lost(lambda lease: told.append(lease.name))
    server.delete(f"{prefix}:{{a}}", f"{prefix}:{{b}}")
    await eventually(lambda: all(lease.lost for lease in held.leases))
    await asyncio.sleep(0.2)
    assert len(told) == 1, told
    assert told[0] in ("a", "b")
    held.on_lost(lambda lease: told.append(f"late {lease.name}"))
    assert len(told) == 2, told
    assert told[1].startswith("late ")


async def test_multi_lock_fences_strictly_increase_per_name_across_holders(make_family):
    clients = [await make_family() for _ in range(3)]
    subsets = [["x", "y"], ["y", "z"], ["z", "x"], ["x", "y", "z"]]
    seen: dict[str, list[int]] = {"x": [], "y": [], "z": []}
    for round_, (client, names) in enumerate(zip(itertools.cycle(clients), subsets * 3)):
        multi = client.multi_lock(names)
        async with multi as held:
            for name, fence in held.fences.items():
                seen[name].append(fence)
        if round_ % 4 == 3:
            async with client.lock("y") as lease:
                seen["y"].append(lease.fence)
    for name, fences in seen.items():
        assert fences == sorted(set(fences)), f"fences of {name!r} went back: {fences}"


async def test_two_processes_locking_in_opposite_orders_never_deadlock(start_worker, tmp_path):
    log = tmp_path / "sections.log"
    started = time.monotonic()
    loops = ["--loops", "30", "--hold", "0.005", "--timeout", "20", "--log", str(log)]
    workers = [start_worker("multi", names, *loops) for names in ("a,b", "b,a")]
    codes = [await asyncio.to_thread(worker.wait, 40) for worker in workers]
    assert codes == [0, 0], "a worker failed: its traceback is in the captured stderr"
    assert time.monotonic() - started < 30

    sections = []
    for line in log.read_text().splitlines():
        pid, enter, exit_, *parts = line.split()
        fences = dict(part.split("=") for part in parts)
        sections.append((float(enter), float(exit_), int(pid), fences))
    assert len(sections) == 60
    assert {pid for *_, pid, _ in sections} == {worker.pid for worker in workers}
    sections.sort()
    for (_, previous_exit, _, _), (enter, _, _, _) in itertools.pairwise(sections):
        assert enter >= previous_exit - 0.001, "both processes held a and b at once"
    for name in ("a", "b"):
        fences = [int(fence[name]) for *_, fence in sections]
        assert fences == sorted(set(fences)), f"fences of {name!r} went back"


async def test_a_multi_lock_waits_out_its_busy_parts_one_after_another(make_family, server, prefix):
    mover, other = await make_family(), await make_family()
    await other.lock("a").acquire()
    await other.lock("b").acquire()
    multi = mover.multi_lock(["a", "b"], owner="mover")
    taking = asyncio.create_task(multi.acquire(timeout=10))
    await asyncio.sleep(0.3)
    await other.lock("a").release()
    await asyncio.sleep(0.3)
    assert not taking.done()
    await other.lock("b").release()

    held = await asyncio.wait_for(taking, 5)
    assert {token_in(server.get(f"{prefix}:{{{name}}}")) for name in ("a", "b")} == {
        held.leases[0].token
    }
    assert held.fences == {"a": 2, "b": 2}
    assert await multi.release() is ReleaseOutcome.RELEASED
