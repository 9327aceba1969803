"""What redlease keeps on the server: per held lock, and per distinct name once released.

Both figures count the keys the library really creates, found by scanning a private key
prefix, so a change of key layout is measured as it is, without editing this file.

* ``server_bytes_per_held_lock``: ``HELD_NAMES`` names are each locked and released
  ``CYCLES_BEFORE`` times, then locked again and held (the default lock: 30 s lease,
  renewed). ``MEMORY USAGE … SAMPLES 0`` of every key under the prefix, summed, divided by
  the locks held; ``server_keys_per_held_lock`` counts the keys the same way, and
  ``held_lock_keys`` splits both by key shape (the hash tag shown as ``{…}``, a token as
  ``<token>``), to show where the bytes go.
* ``keys_left_per_1000_names``: ``plan.footprint_names`` distinct names are each locked
  once and released; after the last release the part waits ``plan.retry_window_s`` (the
  time a release can still be retried, so whatever is kept for a retry may rightly be
  there before) plus ``EXPIRY_SLACK_S``, then counts the keys under the prefix (SCAN leaves
  out keys whose time is up), per 1,000 names. ``keys_left_slots`` is the number of the
  16,384 cluster hash slots the names fall into: what a layout that keeps one key per slot
  and nothing per name would leave. ``keys_at_release_per_1000_names`` is the same count
  taken right after the last release.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from typing import Any

import redis
from redis.crc import key_slot

from counting import count_keys
from plan import Plan

HELD_NAMES = 16
CYCLES_BEFORE = 3
EXPIRY_SLACK_S = 1.0
NAMES_BUDGET_S = 900.0
"""The keys-left run stops locking new names after this long (reported as the names done)."""
FOOTPRINT_STEPS = 2
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,}.*$")
HASH_TAG = re.compile(r"\{[^}]*\}")


def measure_footprint(
    url: str,
    admin: redis.Redis,
    plan: Plan,
    label: Callable[[str], None],
    tick: Callable[[], None],
) -> dict[str, Any]:
    import redlease  # noqa: PLC0415

    run = secrets.token_hex(4)
    client = redis.Redis.from_url(url)
    try:
        label(f"footprint: {HELD_NAMES} held locks")
        held_prefix = f"rlbench:footprint:{run}:held"
        with redlease.Locks(client, prefix=held_prefix) as locks:
            figures = held_lock_bytes(locks, admin, held_prefix)
        tick()
        names_prefix = f"rlbench:footprint:{run}:names"
        with redlease.Locks(client, prefix=names_prefix) as locks:
            figures |= keys_left(locks, admin, names_prefix, plan, label)
        tick()
    finally:
        client.close()
    return figures


def held_lock_bytes(locks: Any, admin: redis.Redis, prefix: str) -> dict[str, Any]:
    names = [f"held:{index}" for index in range(HELD_NAMES)]
    for name in names:
        for _ in range(CYCLES_BEFORE):
            with locks.lock(name):
                pass
    held = [locks.lock(name) for name in names]
    for lock in held:
        lock.acquire()
    try:
        keys = list(admin.scan_iter(match=f"{prefix}*", count=1000))
        pipe = admin.pipeline(transaction=False)
        for key in keys:
            pipe.memory_usage(key, samples=0)
        sizes = pipe.execute()
    finally:
        for lock in held:
            lock.release()
    shapes: dict[str, dict[str, float]] = {}
    for key, size in zip(keys, sizes, strict=True):
        shape = key_shape(key.decode(), prefix)
        entry = shapes.setdefault(shape, {"keys": 0.0, "bytes": 0.0})
        entry["keys"] += 1 / HELD_NAMES
        entry["bytes"] += (size or 0) / HELD_NAMES
    return {
        "server_bytes_per_held_lock": sum(size or 0 for size in sizes) / HELD_NAMES,
        "server_keys_per_held_lock": len(keys) / HELD_NAMES,
        "held_lock_keys": dict(sorted(shapes.items())),
        "held_lock_cycles_before": CYCLES_BEFORE,
    }


def key_shape(key: str, prefix: str) -> str:
    """``<prefix>:{…}:latch:<token>`` for ``rlbench:…:{held:3}:latch:Xy…|host|pid``."""
    return TOKEN.sub("<token>", HASH_TAG.sub("{…}", key.replace(prefix, "<prefix>", 1)))


def keys_left(
    locks: Any, admin: redis.Redis, prefix: str, plan: Plan, label: Callable[[str], None]
) -> dict[str, Any]:
    wanted = plan.footprint_names
    started = time.monotonic()
    done = 0
    while done < wanted and time.monotonic() - started < NAMES_BUDGET_S:
        with locks.lock(f"name:{done}"):
            pass
        done += 1
        if done % 10_000 == 0:
            label(f"footprint: {done:,} of {wanted:,} names locked and released")
    released_at = time.monotonic()
    at_release = count_keys(admin, f"{prefix}*")
    wait_s = plan.retry_window_s + EXPIRY_SLACK_S
    label(f"footprint: waiting {wait_s:g} s (the retry window) before counting the keys")
    time.sleep(max(0.0, released_at + wait_s - time.monotonic()))
    left = count_keys(admin, f"{prefix}*")
    slots = len({key_slot(f"name:{index}".encode()) for index in range(done)})
    per_1000 = 1000 / done if done else 0.0
    return {
        "keys_left_names": done,
        "keys_left_wait_s": round(time.monotonic() - released_at, 1),
        "keys_left_retry_window_s": plan.retry_window_s,
        "keys_left": left,
        "keys_left_slots": slots,
        "keys_left_per_1000_names": left * per_1000,
        "keys_at_release_per_1000_names": at_release * per_1000,
    }
