"""What a soak run is told: its settings, and the two servers it runs against.

Kept apart so that the runner, its checkers and its server inspection read them without
importing each other.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from redlease.server import EmbeddedServer


@dataclass(frozen=True)
class SoakSettings:
    workers: int = 64
    acquisitions: int = 10_000
    names: int = 64
    fault_every: float = 30.0
    ttl: float = 2.0
    hold: float = 0.0
    acquire_timeout: float = 10.0
    deadline: float = 7200.0
    seed: int | None = None
    max_rss_growth_kib: int = 16 * 1024
    max_fd_growth: int = 2

    @property
    def warmup(self) -> int:
        """Acquisitions before a worker's first RSS/fd sample: a tenth, at most 200, and
        at least one but always fewer than ``acquisitions`` (with one acquisition, none:
        the sample comes after the worker has opened its connections)."""
        return max(0, min(200, max(1, self.acquisitions // 10), self.acquisitions - 1))


@dataclass
class Target:
    lock_url: str
    data_url: str
    private: bool


@contextmanager
def private_target() -> Iterator[Target]:
    """A lock server and a separate data server, as a lock and its database would be."""
    with EmbeddedServer() as lock_server, EmbeddedServer() as data_server:
        yield Target(lock_server.url, data_server.url, private=True)
