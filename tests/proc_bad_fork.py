"""Hold a renewing lock, fork, and report what the child could do to the parent's lease.

    python tests/proc_bad_fork.py URL PREFIX NAME

The child tries to release the lock, to take it, and outlives the lease's TTL (so a
renewal worker it wrongly kept would show), then closes its client and exits normally
(running ``atexit``). The parent then checks that it still holds and renews its lease.
Prints one JSON line: ``{"child": {...}, "child_status": N, "parent": {...}}``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

import redis

import redlease

TTL = 1.0


def child_side(url: str, locks: redlease.Locks, lock: redlease.Lock) -> dict[str, Any]:
    report: dict[str, Any] = {}
    try:
        outcome = lock.release()
        report["release"] = f"returned {outcome.name}"
    except redlease.NotOwned:
        report["release"] = "NotOwned"
    except Exception as exc:
        report["release"] = f"raised {type(exc).__name__}: {exc}"
    with redis.Redis.from_url(url, decode_responses=True) as plain:
        report["key_after_release"] = plain.get(lock.keys.lease).partition(":")[2]
    report["holds_a_lease"] = lock.lease is not None
    try:
        with locks.lock(lock.name, timeout=0.2):
            report["took_the_lock"] = True
    except redlease.LockTimeout:
        report["took_the_lock"] = False
    time.sleep(TTL * 1.5)
    report["renewer_threads"] = [
        thread.name for thread in threading.enumerate() if "renew" in thread.name
    ]
    locks.close()
    return report


def main() -> int:
    url, prefix, name = sys.argv[1:4]
    locks = redlease.Locks(url, prefix=prefix)
    lock = locks.lock(name, ttl=TTL, renew=True)
    lease = lock.acquire(timeout=5)
    time.sleep(0.05)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            report = child_side(url, locks, lock)
        except BaseException as exc:
            report = {"crashed": repr(exc)}
        with os.fdopen(write_end, "w") as pipe:
            pipe.write(json.dumps(report))
        sys.exit(0)
    os.close(write_end)
    renewals_at_fork = lease.renewals
    with os.fdopen(read_end) as pipe:
        child = json.loads(pipe.read() or "{}")
    _, status = os.waitpid(pid, 0)
    time.sleep(TTL * 0.8)
    parent: dict[str, Any] = {"token": lease.token}
    try:
        parent["owned_after_child"] = lock.owned()
        child["left_parent_connections_usable"] = True
    except redlease.ServerUnavailable:
        parent["owned_after_child"] = None
        child["left_parent_connections_usable"] = False
    parent["lost"] = lease.lost
    parent["renewed_since_fork"] = lease.renewals > renewals_at_fork
    parent["release"] = lock.release().name
    locks.close()
    print(
        json.dumps(
            {"child": child, "child_status": os.waitstatus_to_exitcode(status), "parent": parent}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
