"""A lock holder in its own process, for tests that kill, pause or race real processes.

    python tests/holder.py URL PREFIX NAME --flavor sync|async [--ttl S] [--hold S]
        [--timeout S] [--renew] [--loops N] [--log FILE]

Prints ``ACQUIRED <fence>`` when it holds the lock, then holds it for ``--hold`` seconds
(or until killed), prints ``RELEASED <outcome>`` and exits 0; ``LOST <reason>`` is printed
when the lease is found lost and the exit status is then 3. ``TIMEOUT`` (status 2) when
the lock could not be had. With ``--log`` each critical section is appended to FILE as
``<pid> <fence> <enter> <exit>`` (wall-clock, for overlap checks across processes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import redlease
from proc_common import lock_arguments, run_flavour, say


def parse(argv: list[str]) -> argparse.Namespace:
    parser = lock_arguments()
    parser.add_argument("--ttl", type=float, default=None)
    parser.add_argument("--hold", type=float, default=3600.0)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--renew", action="store_true")
    parser.add_argument("--loops", type=int, default=1)
    parser.add_argument("--log", default=None)
    return parser.parse_args(argv)


def record(options: argparse.Namespace, fence: int, entered: float) -> None:
    if options.log:
        with open(options.log, "a", encoding="utf-8") as log:
            log.write(f"{os.getpid()} {fence} {entered:.6f} {time.time():.6f}\n")


def held(lease: redlease.Lease) -> float:
    """Announce the grant; the wall-clock time the critical section began."""
    entered = time.time()
    lease.on_lost(lambda lost: say(f"LOST {lost.lost_reason}"))
    say(f"ACQUIRED {lease.fence}")
    return entered


def released(lease: redlease.Lease, outcome: redlease.ReleaseOutcome) -> bool:
    """Report the release; whether the lease was lost."""
    say(f"RELEASED {outcome.value}")
    return lease.lost


def run_sync(options: argparse.Namespace) -> int:
    renew = True if options.renew else None
    with redlease.Locks(options.url, prefix=options.prefix) as locks:
        lock = locks.lock(options.name, ttl=options.ttl, renew=renew, timeout=options.timeout)
        for _ in range(options.loops):
            try:
                lease = lock.acquire()
            except redlease.LockTimeout:
                say("TIMEOUT")
                return 2
            entered = held(lease)
            time.sleep(options.hold)
            record(options, lease.fence, entered)  # the section ends before the release
            if released(lease, lock.release()):
                return 3
    return 0


async def run_async(options: argparse.Namespace) -> int:
    renew = True if options.renew else None
    async with redlease.AsyncLocks(options.url, prefix=options.prefix) as locks:
        lock = locks.lock(options.name, ttl=options.ttl, renew=renew, timeout=options.timeout)
        for _ in range(options.loops):
            try:
                lease = await lock.acquire()
            except redlease.LockTimeout:
                say("TIMEOUT")
                return 2
            entered = held(lease)
            await asyncio.sleep(options.hold)
            record(options, lease.fence, entered)  # the section ends before the release
            if released(lease, await lock.release()):
                return 3
    return 0


def main(argv: list[str]) -> int:
    options = parse(argv)
    return run_flavour(options, run_sync, run_async)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
