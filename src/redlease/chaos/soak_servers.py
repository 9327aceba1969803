"""What the soak reads off its servers: the counters' ground truth, the keys a run left on
the lock server (by kind), the lock server's memory and clients, and the clean-up of a
shared server. Everything is bounded: SCANs stop after :data:`SCAN_LIMIT` keys.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

from redlease.chaos.soak_checks import key_kind
from redlease.chaos.soak_settings import Target
from redlease.chaos.soak_worker import data_keys

LATCH_WAIT = 12.0  # release latches live 10 s (RELEASE_LATCH_MS)
SCAN_LIMIT = 1_000_000


class Servers:
    """The soak's view of its lock server and data server, for one run's key prefix."""

    def __init__(self, target: Target, prefix: str, names: list[str]) -> None:
        self.target = target
        self.prefix = prefix
        self.names = names

    @contextmanager
    def client(self, url: str, timeout: float = 5.0) -> Iterator[redis.Redis]:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=5.0)
        try:
            yield client
        finally:
            client.close()

    def counters(self) -> dict[str, Any]:
        """The ground truth on the data server: every hash's ``n`` and its writers' fields."""
        truth: dict[str, Any] = Counter()
        records: dict[int, int] = {}
        with self.client(self.target.data_url) as client:
            pipe = client.pipeline(transaction=False)
            for name in self.names:
                plain, fenced = data_keys(self.prefix, name)
                pipe.hgetall(plain)
                pipe.hgetall(fenced)
                pipe.hget(f"{fenced}:fence", "fence")
            replies = pipe.execute()
        for index in range(len(self.names)):
            plain, fenced, record = replies[3 * index : 3 * index + 3]
            for kind, values in (("plain", plain), ("fenced", fenced)):
                truth[f"{kind}_counter"] += int(values.pop(b"n", 0))
                truth[f"{kind}_writes"] += sum(int(value) for value in values.values())
            records[index] = int(record or 0)
        truth["records"] = records
        return dict(truth)

    def leftovers(self) -> dict[str, Any]:
        """Keys of the run left on the lock server, by kind; waits out the release latches."""
        kinds = self.key_kinds()
        at_stop = kinds.get("latch", 0)
        limit = time.monotonic() + LATCH_WAIT
        while kinds.get("latch", 0) and time.monotonic() < limit:
            time.sleep(0.5)
            kinds = self.key_kinds()
        result: dict[str, Any] = {kind: kinds.get(kind, 0) for kind in ("lease", "fence", "queue")}
        result["latch_at_stop"] = at_stop
        result["latch_after_wait"] = kinds.get("latch", 0)
        result["other"] = sum(
            v for k, v in kinds.items() if k not in ("lease", "fence", "queue", "latch")
        )
        return result

    def key_kinds(self) -> Counter[str]:
        kinds = Counter[str]()
        with self.client(self.target.lock_url) as client:
            keys = client.scan_iter(match=f"{self.prefix}:{{*", count=1000)
            for number, key in enumerate(keys):
                if number >= SCAN_LIMIT:
                    break
                kinds[key_kind(key.decode(), self.prefix)] += 1
        return kinds

    def server_info(self) -> dict[str, Any]:
        """The lock server's version, memory and clients (other than this one)."""
        with self.client(self.target.lock_url) as client:
            info = client.info()
        return {
            "version": info.get("valkey_version") or info.get("redis_version"),
            "used_memory": int(info["used_memory"]),
            "clients": int(info["connected_clients"]) - 1,
        }

    def cleanup(self) -> None:
        """On a shared server, delete the run's keys (SCAN, bounded)."""
        if self.target.private:
            return
        for url in {self.target.lock_url, self.target.data_url}:
            with self.client(url) as client:
                batch: list[bytes] = []
                for number, key in enumerate(
                    client.scan_iter(match=f"{self.prefix}:*", count=1000)
                ):
                    if number >= SCAN_LIMIT:
                        break
                    batch.append(key)
                    if len(batch) >= 1000:
                        client.delete(*batch)
                        batch.clear()
                if batch:
                    client.delete(*batch)
