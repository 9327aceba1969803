"""A worker process for the ``redlease top`` tests: real clients doing real lock work.

    python proc_top_worker.py URL PREFIX contend NAME HOLD_S   # take, hold, release, again
    python proc_top_worker.py URL PREFIX hold NAME             # take once, keep renewing
    python proc_top_worker.py URL PREFIX lapse NAME TTL_S      # take, let it run out, again

Each runs until killed. ``lapse`` takes an unrenewed lease and releases it only well after
it ran out (its release says EXPIRED), so each lease ends while its holder still lives:
the lost leases ``top`` must count.
"""

from __future__ import annotations

import sys
import time

import redlease


def main(url: str, prefix: str, mode: str, name: str, *rest: str) -> None:
    with redlease.Locks(url, prefix=prefix) as locks:
        if mode == "contend":
            hold = float(rest[0])
            while True:
                with locks.lock(name):
                    time.sleep(hold)
        elif mode == "hold":
            locks.lock(name).acquire()
        elif mode == "lapse":
            ttl = float(rest[0])
            lock = locks.lock(name, ttl=ttl, renew=False)
            while True:
                lock.acquire()
                time.sleep(ttl * 2)
                lock.release()
        else:
            raise SystemExit(f"unknown mode {mode!r}")
        while True:
            time.sleep(60)


if __name__ == "__main__":
    main(*sys.argv[1:])
