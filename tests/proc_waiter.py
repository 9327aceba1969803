"""A waiter in its own process that reports how long it believes its new lease lasts.

    python tests/proc_waiter.py URL PREFIX NAME --flavor sync|async --ttl S [--fair]

Prints ``WAITING`` just before it asks for the lock (waiting up to 30 s), then, as soon
as it has the lease, ``ACQUIRED <fence> <local_ms> <server_ms>``: the time left before
``lease.expires_at`` by its own clock, and the lease key's PTTL on the server, measured
right after one another. Releases and exits 0; ``TIMEOUT`` (status 2) if it gave up.
"""

from __future__ import annotations

import argparse
import sys
import time

import redlease
from proc_common import lock_arguments, run_flavour, say


def report(lease: redlease.Lease, server_ms: int) -> None:
    local_ms = round((lease.expires_at - time.monotonic()) * 1000)
    say(f"ACQUIRED {lease.fence} {local_ms} {server_ms}")


def run_sync(options: argparse.Namespace) -> int:
    with redlease.Locks(options.url, prefix=options.prefix) as locks:
        make = locks.fair_lock if options.fair else locks.lock
        lock = make(options.name, ttl=options.ttl, renew=False)
        say("WAITING")
        try:
            lease = lock.acquire(timeout=30)
        except redlease.LockTimeout:
            say("TIMEOUT")
            return 2
        report(lease, locks.client.pttl(lock.keys.lease))
        lock.release()
    return 0


async def run_async(options: argparse.Namespace) -> int:
    async with redlease.AsyncLocks(options.url, prefix=options.prefix) as locks:
        make = locks.fair_lock if options.fair else locks.lock
        lock = make(options.name, ttl=options.ttl, renew=False)
        say("WAITING")
        try:
            lease = await lock.acquire(timeout=30)
        except redlease.LockTimeout:
            say("TIMEOUT")
            return 2
        report(lease, await locks.client.pttl(lock.keys.lease))
        await lock.release()
    return 0


def main(argv: list[str]) -> int:
    parser = lock_arguments()
    parser.add_argument("--ttl", type=float, default=5.0)
    parser.add_argument("--fair", action="store_true")
    options = parser.parse_args(argv)
    return run_flavour(options, run_sync, run_async)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
