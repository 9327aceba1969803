"""Where a demo run keeps its data in Redis: a namespace of its own, removed afterwards.

Every key of a run carries the run's id, so that runs on one server never mix and
:func:`remove_keys` can delete all of them, the locks' included, when the run is over.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Generic, TypeVar

import redis

__all__ = ["Plan", "RunKeys", "as_text", "remove_keys"]

SettingsT = TypeVar("SettingsT")


@dataclass(frozen=True)
class RunKeys:
    """The keys of one run of one demo, unique to it.

    The demo's own keys share one hash tag (one Redis Cluster slot, so fenced writes stay
    single-slot scripts); the locks live under :attr:`lock_prefix`, tagged by redlease.
    """

    demo: str
    run_id: str

    @classmethod
    def fresh(cls, demo: str) -> RunKeys:
        return cls(demo, uuid.uuid4().hex[:12])

    @property
    def base(self) -> str:
        return f"redlease-demo:{{{self.demo}:{self.run_id}}}"

    def key(self, *parts: object) -> str:
        """``base:part:part...``, e.g. ``key("orders", 42)``."""
        return ":".join([self.base, *(str(part) for part in parts)])

    @property
    def lock_prefix(self) -> str:
        return f"redlease-demo:{self.demo}:{self.run_id}"

    @property
    def pattern(self) -> str:
        """Matches every key of the run: the demo's and its locks'."""
        return f"redlease-demo:*{self.run_id}*"


@dataclass(frozen=True)
class Plan(Generic[SettingsT]):
    """What a worker process gets: the run's keys and the demo's settings, plain data."""

    keys: RunKeys
    settings: SettingsT

    def key(self, *parts: object) -> str:
        """One key of the run, e.g. ``plan.key("orders", 42)``."""
        return self.keys.key(*parts)


def remove_keys(client: redis.Redis, pattern: str) -> None:
    """Delete every key matching ``pattern``, in batches."""
    batch: list[str | bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 500:
            client.unlink(*batch)
            batch.clear()
    if batch:
        client.unlink(*batch)


def as_text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
