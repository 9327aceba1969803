"""A waiter in its own process, interrupted with Ctrl-C (SIGINT) while it waits, then kept up.

    python tests/proc_interrupted_waiter.py URL PREFIX NAME --flavor sync|async

Prints ``WAITING`` just before it asks for the lock and ``INTERRUPTED`` once SIGINT has
cut the wait short. Its client then stays open, so a test can look at the server while
the process is still alive, until stdin is closed; it then closes the client and exits 0.
``ACQUIRED`` (status 1) if it got the lock instead, ``TIMEOUT`` (status 2) if it gave up.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

import redlease
from proc_common import lock_arguments, run_flavour, say

WAIT_S = 30.0


def ended(word: str, status: int) -> int:
    say(word)
    return status


def run_sync(options: argparse.Namespace) -> int:
    with redlease.Locks(options.url, prefix=options.prefix) as locks:
        say("WAITING")
        try:
            locks.lock(options.name).acquire(timeout=WAIT_S)
        except KeyboardInterrupt:
            say("INTERRUPTED")
        except redlease.LockTimeout:
            return ended("TIMEOUT", 2)
        else:
            return ended("ACQUIRED", 1)
        sys.stdin.readline()
    return 0


async def run_async(options: argparse.Namespace) -> int:
    async with redlease.AsyncLocks(options.url, prefix=options.prefix) as locks:
        say("WAITING")
        try:
            await locks.lock(options.name).acquire(timeout=WAIT_S)
        except asyncio.CancelledError:
            # Ctrl-C under asyncio.run cancels the main task; take it as handled.
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
            say("INTERRUPTED")
        except redlease.LockTimeout:
            return ended("TIMEOUT", 2)
        else:
            return ended("ACQUIRED", 1)
        await asyncio.to_thread(sys.stdin.readline)
    return 0


def main(argv: list[str]) -> int:
    parser = lock_arguments()
    options = parser.parse_args(argv)
    return run_flavour(options, run_sync, run_async)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
