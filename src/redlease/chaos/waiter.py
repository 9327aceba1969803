"""A scripted waiter: takes and releases one lock when the harness says, sync or asyncio.

Run as ``python -m redlease.chaos.waiter --lock-url URL --prefix P --name N --flavour F
--worker W --log FILE``; :mod:`redlease.chaos.wake` starts one per flavour. It reads one
command a line on stdin:

* ``acquire TTL RENEW TIMEOUT``: take the lock, waiting up to ``TIMEOUT`` seconds (the
  library's blocking wait, no polling); ``TTL`` ``default`` is the lock's default lease
  (30 s, renewed), and ``RENEW`` is ``1`` to renew a lease of an explicit TTL;
* ``release``: release the lease taken last;
* ``quit``.

Each step is a JSON line in the log (``ready``, ``req``, ``acq`` with the fence,
``timeout``, ``error``, ``rel`` with the outcome), so the harness can tell when the lock
reached this waiter. The client is the README's: ``redis.Redis.from_url(url)`` (or its
asyncio twin) with redis-py's defaults.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

import redis
import redis.asyncio

from redlease.aio.lock import AsyncLock, AsyncLocks
from redlease.chaos.eventlog import EventLog
from redlease.core.lease import Lease, ReleaseOutcome
from redlease.errors import LockError, LockTimeout
from redlease.sync.lock import Lock, Locks

ERRORS = (LockError, redis.RedisError)


@dataclass(frozen=True)
class Command:
    verb: str
    ttl: float | None = None
    renew: bool = False
    timeout: float = 0.0

    @classmethod
    def parse(cls, line: str) -> Command:
        words = line.split()
        if not words:
            return cls("quit")
        if words[0] != "acquire":
            return cls(words[0])
        ttl = None if words[1] == "default" else float(words[1])
        return cls("acquire", ttl, words[2] == "1", float(words[3]))


class Script:
    """What both flavours log: the outcome of each command."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def requested(self, command: Command) -> None:
        self.log.event("req", 0, ttl=command.ttl, timeout=command.timeout)

    def acquired(self, lease: Lease) -> None:
        self.log.event("acq", 0, fence=lease.fence, deadline=lease.expires_at, lost=lease.lost)

    def failed(self, where: str, error: BaseException) -> None:
        if isinstance(error, LockTimeout):
            self.log.event("timeout", 0)
        else:
            self.log.event("error", 0, where=where, error=str(error)[:200])

    def released(self, outcome: ReleaseOutcome) -> None:
        self.log.event("rel", 0, outcome=outcome.value)


def _sync(args: argparse.Namespace, script: Script) -> None:
    client = redis.Redis.from_url(args.lock_url)
    with Locks(client, prefix=args.prefix) as locks:
        lock: Lock | None = None
        script.log.event("ready", 0)
        while line := sys.stdin.readline():
            command = Command.parse(line)
            try:
                if command.verb == "acquire":
                    lock = locks.lock(args.name, ttl=command.ttl, renew=command.renew or None)
                    script.requested(command)
                    script.acquired(lock.acquire(timeout=command.timeout))
                elif command.verb == "release" and lock is not None:
                    script.released(lock.release())
                elif command.verb == "quit":
                    break
            except ERRORS as error:
                script.failed(command.verb, error)
    client.close()


async def _asyncio(args: argparse.Namespace, script: Script) -> None:
    loop = asyncio.get_running_loop()
    client = redis.asyncio.Redis.from_url(args.lock_url)
    async with AsyncLocks(client, prefix=args.prefix) as locks:
        lock: AsyncLock | None = None
        script.log.event("ready", 0)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command = Command.parse(line)
            try:
                if command.verb == "acquire":
                    lock = locks.lock(args.name, ttl=command.ttl, renew=command.renew or None)
                    script.requested(command)
                    script.acquired(await lock.acquire(timeout=command.timeout))
                elif command.verb == "release" and lock is not None:
                    script.released(await lock.release())
                elif command.verb == "quit":
                    break
            except ERRORS as error:
                script.failed(command.verb, error)
    await client.aclose()


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="redlease.chaos.waiter")
    parser.add_argument("--lock-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--flavour", choices=("sync", "asyncio"), required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--log", required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    with Path(args.log).open("a", encoding="utf-8") as stream:
        script = Script(EventLog(stream, args.worker))
        if args.flavour == "sync":
            _sync(args, script)
        else:
            asyncio.run(_asyncio(args, script))
        script.log.event("stop", 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
