"""What redlease keeps on the server: per held lock, and per distinct name once released.

Both figures count the keys the library really creates, found by scanning a private key
prefix, so a change of key layout is measured as it is, without editing this file.

* ``server_bytes_per_held_lock``: ``HELD_NAMES`` names are each locked and released
  ``CYCLES_BEFORE`` times; once the retry window since those releases is over, they are
  locked again and held (the default lock: 30 s lease, renewed). ``MEMORY USAGE …
  SAMPLES 0`` of every key under the prefix, summed, divided by the locks held;
  ``server_keys_per_held_lock`` counts the keys the same way, and ``held_lock_keys``
  splits both by key shape (the hash tag shown as ``{…}``, a token as ``<token>``), to
  show where the bytes go.
* ``server_bytes_per_recent_release``: what a release keeps for the retry window (its
  latch, so that a release sent again after a lost reply gets the first answer), from the
  same scan taken right after those releases, per release; ``recent_release_keys`` splits
  it by key shape. A name released R times a second keeps about R * window * this.
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
        held_prefix = f"rlbench:footprint:{run}:held"
        names_prefix = f"rlbench:footprint:{run}:names"
        with (
            redlease.Locks(client, prefix=held_prefix) as held_locks,
            redlease.Locks(client, prefix=names_prefix) as name_locks,
        ):
            label(f"footprint: {HELD_NAMES} names locked and released {CYCLES_BEFORE} times")
            names = [f"held:{index}" for index in range(HELD_NAMES)]
            figures = release_bytes(held_locks, admin, held_prefix, names)
            released_at = time.monotonic()
            tick()
            figures |= keys_left(name_locks, admin, names_prefix, plan, label)
            time.sleep(
                max(0.0, released_at + plan.retry_window_s + EXPIRY_SLACK_S - time.monotonic())
            )
            label(f"footprint: {HELD_NAMES} held locks")
            figures |= held_lock_bytes(held_locks, admin, held_prefix, names)
            tick()
    finally:
        client.close()
    return figures


def release_bytes(locks: Any, admin: redis.Redis, prefix: str, names: list[str]) -> dict[str, Any]:
    """Lock and release each name ``CYCLES_BEFORE`` times; what the releases keep meanwhile."""
    for name in names:
        for _ in range(CYCLES_BEFORE):
            with locks.lock(name):
                pass
    releases = len(names) * CYCLES_BEFORE
    shapes = _shapes(admin, prefix, releases)
    kept = {shape: entry for shape, entry in shapes.items() if "<token>" in shape}
    return {
        "server_bytes_per_recent_release": sum(entry["bytes"] for entry in kept.values()),
        "recent_release_keys": kept,
        "held_lock_cycles_before": CYCLES_BEFORE,
    }


def held_lock_bytes(
    locks: Any, admin: redis.Redis, prefix: str, names: list[str]
) -> dict[str, Any]:
    held = [locks.lock(name) for name in names]
    for lock in held:
        lock.acquire()
    try:
        shapes = _shapes(admin, prefix, len(names))
    finally:
        for lock in held:
            lock.release()
    return {
        "server_bytes_per_held_lock": sum(entry["bytes"] for entry in shapes.values()),
        "server_keys_per_held_lock": sum(entry["keys"] for entry in shapes.values()),
        "held_lock_keys": shapes,
    }


def _shapes(admin: redis.Redis, prefix: str, per: int) -> dict[str, dict[str, float]]:
    """Keys and ``MEMORY USAGE`` bytes under ``prefix`` by key shape, divided by ``per``."""
    keys = list(admin.scan_iter(match=f"{prefix}*", count=1000))
    pipe = admin.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    sizes = pipe.execute()
    shapes: dict[str, dict[str, float]] = {}
    for key, size in zip(keys, sizes, strict=True):
        shape = key_shape(key.decode(), prefix)
        entry = shapes.setdefault(shape, {"keys": 0.0, "bytes": 0.0})
        entry["keys"] += 1 / per
        entry["bytes"] += (size or 0) / per
    return dict(sorted(shapes.items()))


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
