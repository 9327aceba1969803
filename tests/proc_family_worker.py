"""One member of the lock family used from its own process, for tests that kill or race them.

    python tests/proc_family_worker.py ROLE URL PREFIX NAME --flavor sync|async [options]

Roles (each prints its progress lines, flushed, and exits 0 unless said otherwise):

``fair``       prints ``WAITING``, waits for the fair lock ``NAME`` (up to ``--timeout``),
               prints ``ACQUIRED <fence>``, holds it ``--hold`` s and appends
               ``<label> <fence> <acquired> <released>`` (wall clock) to ``--log``.
``read``       holds a read lock of ``NAME`` with ``--ttl`` (not renewed) until killed.
``write``      prints ``WAITING``, waits for the write lock of ``NAME``, prints
               ``ACQUIRED <fence>`` and holds it until killed.
``read-loop``  re-takes a read lock of ``NAME`` in a tight loop (each hold ``--hold`` s)
               until the file ``--stop`` exists; ``READING`` after the first, ``LOOPS <n>``
               at the end.
``permit``     holds one of ``--permits`` permits of semaphore ``NAME`` with ``--ttl``
               (not renewed) until killed.
``latch``      prints ``WAITING``, waits on latch ``NAME`` up to ``--timeout`` s, prints
               ``WOKE True|False``.
``multi``      ``NAME`` is a comma-separated list; ``--loops`` times takes all of them as a
               multi-lock, holds ``--hold`` s and appends
               ``<pid> <enter> <exit> <name>=<fence> ...`` to ``--log``.

The asyncio and sync flavours run the same code: :func:`settle` awaits what the asyncio
flavour returns and passes through what the sync one already computed, and :func:`nap`
sleeps the flavour's way. The sync flavour runs outside any event loop (as a sync program
does): its coroutines never suspend, so :func:`run_to_end` drives them in one step.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import os
import sys
import time
from typing import Any

import redlease
from proc_common import lock_arguments, say


def stopped(path: str) -> bool:
    return os.path.exists(path)


async def settle(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


SYNC = {"flavor": "sync"}


async def nap(seconds: float) -> None:
    if SYNC["flavor"] == "sync":
        time.sleep(seconds)  # noqa: ASYNC251 - the sync flavour runs without a loop
    else:
        await asyncio.sleep(seconds)


def run_to_end(coroutine: Any) -> Any:
    """Run a coroutine that never suspends (the sync flavour's) without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        return finished.value
    coroutine.close()
    raise RuntimeError("the sync flavour's scenario suspended")


def append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as log:
        log.write(line + "\n")


async def wait_for_fair_turn(locks: Any, options: argparse.Namespace) -> int:
    lock = locks.fair_lock(options.name)
    say("WAITING")
    try:
        lease = await settle(lock.acquire(timeout=options.timeout))
    except redlease.LockTimeout:
        say("TIMEOUT")
        return 2
    acquired = time.time()
    say(f"ACQUIRED {lease.fence}")
    await nap(options.hold)
    released = time.time()
    append(options.log, f"{options.label} {lease.fence} {acquired:.6f} {released:.6f}")
    await settle(lock.release())
    return 0


async def hold_read_until_killed(locks: Any, options: argparse.Namespace) -> int:
    rw = locks.rw_lock(options.name, ttl=options.ttl)
    lease = await settle(rw.read.acquire(timeout=options.timeout))
    say(f"ACQUIRED {lease.fence}")
    await nap(3600)
    return 0


async def wait_to_write(locks: Any, options: argparse.Namespace) -> int:
    rw = locks.rw_lock(options.name, ttl=options.ttl)
    say("WAITING")
    lease = await settle(rw.write.acquire(timeout=options.timeout))
    say(f"ACQUIRED {lease.fence}")
    await nap(3600)
    return 0


async def read_in_a_loop(locks: Any, options: argparse.Namespace) -> int:
    rw = locks.rw_lock(options.name)
    loops = 0
    while not stopped(options.stop):
        await settle(rw.read.acquire(timeout=options.timeout))
        await nap(options.hold)
        await settle(rw.read.release())
        loops += 1
        if loops == 1:
            say("READING")
    say(f"LOOPS {loops}")
    return 0


async def hold_permit_until_killed(locks: Any, options: argparse.Namespace) -> int:
    semaphore = locks.semaphore(options.name, permits=options.permits, ttl=options.ttl)
    lease = await settle(semaphore.acquire(timeout=options.timeout))
    say(f"ACQUIRED {lease.fence}")
    await nap(3600)
    return 0


async def wait_on_latch(locks: Any, options: argparse.Namespace) -> int:
    latch = locks.latch(options.name)
    say("WAITING")
    woke = await settle(latch.wait(options.timeout))
    say(f"WOKE {woke}")
    return 0


async def take_all_in_a_loop(locks: Any, options: argparse.Namespace) -> int:
    multi = locks.multi_lock(options.name.split(","))
    for _ in range(options.loops):
        held = await settle(multi.acquire(timeout=options.timeout))
        entered = time.time()
        await nap(options.hold)
        fences = " ".join(f"{name}={fence}" for name, fence in held.fences.items())
        append(options.log, f"{os.getpid()} {entered:.6f} {time.time():.6f} {fences}")
        await settle(multi.release())
    say("DONE")
    return 0


ROLES = {
    "fair": wait_for_fair_turn,
    "read": hold_read_until_killed,
    "write": wait_to_write,
    "read-loop": read_in_a_loop,
    "permit": hold_permit_until_killed,
    "latch": wait_on_latch,
    "multi": take_all_in_a_loop,
}


async def run_async(options: argparse.Namespace) -> int:
    async with redlease.AsyncLocks(options.url, prefix=options.prefix) as locks:
        return int(await ROLES[options.role](locks, options))


def run_sync(options: argparse.Namespace) -> int:
    with redlease.Locks(options.url, prefix=options.prefix) as sync_locks:
        return int(run_to_end(ROLES[options.role](sync_locks, options)))


def main(argv: list[str]) -> int:
    parser = lock_arguments("role")
    parser.add_argument("--ttl", type=float, default=None)
    parser.add_argument("--hold", type=float, default=0.1)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--permits", type=int, default=1)
    parser.add_argument("--loops", type=int, default=1)
    parser.add_argument("--label", default=str(os.getpid()))
    parser.add_argument("--log", default=os.devnull)
    parser.add_argument("--stop", default="")
    options = parser.parse_args(argv)
    if options.role not in ROLES:
        parser.error(f"role must be one of {sorted(ROLES)}")
    SYNC["flavor"] = options.flavor
    if options.flavor == "async":
        return asyncio.run(run_async(options))
    return run_sync(options)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
