"""One chaos worker process: lock, slow read-modify-write of two counters, log, repeat.

Run as ``python -m redlease.chaos.worker``; the harness starts several and injects faults
into them (SIGSTOP, SIGKILL) or into the servers. Every critical section writes two
counters on the *data* server: a plain ``GET``/``SET`` one (unfenced) and one written
through :class:`~redlease.RedisGuard` (``claim`` before the read, ``set`` after). Events
go to a JSON-lines log, one line each, flushed at once, so a killed worker leaves
everything it did up to the kill. Times come from ``time.monotonic()``, which on Linux is
one clock for every process of the host.

On one lock server the lock client is the README's: ``redis.Redis.from_url(url)`` with
redis-py's defaults (no socket timeout, the default retry). With ``--probe-url`` the
worker also keeps the probe leases of :mod:`redlease.chaos.probes`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import redis
import redis.sentinel
from redis.cluster import RedisCluster

from redlease.chaos.eventlog import EventLog
from redlease.chaos.probes import Probes
from redlease.errors import FenceRejected, LockError
from redlease.fencing import RedisGuard
from redlease.sync.lock import Locks
from redlease.sync.redlock import Redlock

RETRY_PAUSE = 0.005
ERROR_PAUSE = 0.01
MAX_SECTIONS = 100_000


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="redlease.chaos.worker")
    parser.add_argument(
        "--lock-url", action="append", default=[], help="one: a lock server; several: Redlock"
    )
    parser.add_argument("--cluster", action="store_true", help="the lock URL names a cluster node")
    parser.add_argument("--sentinel", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--service", default="redlease", help="the Sentinel service name")
    parser.add_argument("--renew", action="store_true", help="renew the lease while held")
    parser.add_argument("--data-url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--worker", required=True)
    parser.add_argument("--ttl", type=float, required=True)
    parser.add_argument("--hold", type=float, required=True)
    parser.add_argument("--deadline", type=float, required=True, help="monotonic time to stop")
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--probe-url", help="keep probe leases on this server (see probes)")
    return parser.parse_args(argv)


# Long enough to outlast a server stall (DEBUG SLEEP) without an ambiguous timeout.
SOCKET_TIMEOUT = 10.0
CONNECT_TIMEOUT = 2.0


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, socket_timeout=SOCKET_TIMEOUT, socket_connect_timeout=CONNECT_TIMEOUT
    )


def _locks(args: argparse.Namespace) -> Locks | Redlock:
    """The lock client the arguments describe: one server, a cluster, Sentinel or Redlock."""
    options: dict[str, Any] = {
        "socket_timeout": SOCKET_TIMEOUT,
        "socket_connect_timeout": CONNECT_TIMEOUT,
    }
    if args.sentinel:
        split = (address.rpartition(":") for address in args.sentinel)
        addresses = [(host, int(port)) for host, _, port in split]
        sentinels: Any = redis.sentinel.Sentinel  # redis-py leaves Sentinel untyped
        master = sentinels(addresses, **options).master_for(args.service, **options)
        return Locks(master, prefix=args.prefix)
    if len(args.lock_url) > 1:
        return Redlock([_client(url) for url in args.lock_url], prefix=args.prefix)
    if args.cluster:
        return Locks(RedisCluster.from_url(args.lock_url[0], **options), prefix=args.prefix)
    return Locks(redis.Redis.from_url(args.lock_url[0]), prefix=args.prefix)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    parent = os.getppid()
    stop_file = Path(args.stop_file)
    counter_key = f"{args.prefix}:counter"
    fenced_key = f"{args.prefix}:fenced"
    data = _client(args.data_url)
    guard = RedisGuard(data)
    with (
        Path(args.log).open("a", encoding="utf-8") as stream,
        _locks(args) as locks,
        ExitStack() as probes,
    ):
        log = EventLog(stream, args.worker)
        log.event("start", 0, pid=os.getpid())
        if args.probe_url:
            probes.enter_context(Probes(args.probe_url, args.prefix, args.worker, args.ttl, log))
        lock = locks.lock(args.name, ttl=args.ttl, renew=args.renew)
        for seq in range(1, MAX_SECTIONS + 1):
            if time.monotonic() > args.deadline or stop_file.exists() or os.getppid() != parent:
                break
            try:
                lease = lock.try_acquire()
            except (LockError, redis.RedisError) as error:
                log.event("error", seq, where="acquire", error=str(error)[:200])
                time.sleep(ERROR_PAUSE)
                continue
            if lease is None:
                time.sleep(RETRY_PAUSE)
                continue
            log.event("acq", seq, fence=lease.fence, pid=os.getpid())
            _section(
                args,
                log,
                seq,
                data=data,
                guard=guard,
                lease=lease,
                counter_key=counter_key,
                fenced_key=fenced_key,
            )
            try:
                outcome = lock.release()
                log.event("rel", seq, outcome=outcome.value)
            except (LockError, redis.RedisError) as error:
                log.event("rel", seq, outcome="error", error=str(error)[:200])
        log.event("stop", 0)
    data.close()
    return 0


def _section(
    args: argparse.Namespace,
    log: EventLog,
    seq: int,
    *,
    data: redis.Redis,
    guard: RedisGuard,
    lease: Any,
    counter_key: str,
    fenced_key: str,
) -> None:
    """Read both counters, sleep ``hold``, write both back plus one; log each step."""
    fenced_ok = True
    try:
        guard.claim(lease, fenced_key)
    except FenceRejected:
        fenced_ok = False
        log.event("fenced", seq, result="rejected", at="claim")
    except (LockError, redis.RedisError) as error:
        fenced_ok = False
        log.event("fenced", seq, result="error", at="claim", error=str(error)[:200])
    try:
        plain = int(data.get(counter_key) or 0)
        fenced = int(data.get(fenced_key) or 0)
    except redis.RedisError as error:
        log.event("exit", seq, read_error=str(error)[:200])
        return
    log.event("enter", seq)
    time.sleep(args.hold)
    try:
        data.set(counter_key, plain + 1)
        log.event("plain", seq, result="wrote")
    except redis.RedisError as error:
        log.event("plain", seq, result="error", error=str(error)[:200])
    if fenced_ok:
        try:
            guard.set(lease, fenced_key, fenced + 1)
            log.event("fenced", seq, result="accepted")
        except FenceRejected:
            log.event("fenced", seq, result="rejected", at="set")
        except (LockError, redis.RedisError) as error:
            log.event("fenced", seq, result="error", at="set", error=str(error)[:200])
    log.event("exit", seq)


if __name__ == "__main__":
    sys.exit(main())
