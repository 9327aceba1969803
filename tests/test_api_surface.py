"""Only the documented API is public: what a user can reach without a leading underscore is
exactly what docs/guide.md's "The public API" names, and every name a public module exports
is one the docs tell users about.

No server is needed: clients made from a URL connect only when first used.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redlease

ROOT = Path(__file__).resolve().parent.parent
DOCS = "\n".join(
    path.read_text(encoding="utf-8") for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
)
URL = "redis://127.0.0.1:1/0"

CLIENT = {"client", "prefix", "lock", "fair_lock", "rw_lock", "semaphore", "latch"}
CLIENT |= {"multi_lock", "locked"}
LOCK = {"acquire", "try_acquire", "release", "extend", "locked", "owned", "lease", "name", "keys"}
PUBLIC_MODULES = [
    "redlease",
    "redlease.fencing",
    "redlease.core.hooks",
    "redlease.metrics",
    "redlease.tracing",
    "redlease.integrations.celery",
    "redlease.integrations.fastapi",
    "redlease.testing",
    "redlease.sync.lock",
    "redlease.aio.lock",
]


def public(thing: object) -> set[str]:
    return {name for name in dir(thing) if not name.startswith("_")}


@pytest.fixture
def locks() -> Iterator[redlease.Locks]:
    with redlease.Locks(URL) as client:
        yield client


@pytest.fixture
def redlock() -> Iterator[redlease.Redlock]:
    with redlease.Redlock([URL, URL.replace(":1/", ":2/"), URL.replace(":1/", ":3/")]) as client:
        yield client


def test_the_clients_show_only_their_documented_methods(
    locks: redlease.Locks, redlock: redlease.Redlock
) -> None:
    alocks = redlease.AsyncLocks(URL)

    assert public(locks) == CLIENT | {"close"}
    assert public(alocks) == CLIENT | {"aclose"}
    assert public(redlock) == {"lock", "close", "prefix"}
    assert public(redlease.AsyncRedlock([URL])) == {"lock", "aclose", "prefix"}


def test_the_handles_show_only_their_documented_methods(
    locks: redlease.Locks, redlock: redlease.Redlock
) -> None:
    rw = locks.rw_lock("report")

    assert public(locks.lock("report")) == LOCK
    assert public(locks.fair_lock("report")) == LOCK
    assert public(redlock.lock("report")) == LOCK - {"locked", "owned"}
    assert public(rw) == {"read", "write", "name"}
    assert public(rw.read) == LOCK | {"readers"}
    assert public(rw.write) == LOCK | {"downgrade"}
    assert public(locks.semaphore("exports", 3)) == {
        *("acquire", "try_acquire", "release", "available", "name", "keys"),
    }
    assert public(locks.latch("ready")) == {
        *("try_set_count", "count_down", "count", "wait", "name", "keys"),
    }
    assert public(locks.multi_lock(["a", "b"])) - {"keys"} == {"acquire", "release", "name"}


def test_a_lease_shows_only_its_documented_fields(locks: redlease.Locks) -> None:
    lease_fields = {"name", "token", "fence", "ttl", "ttl_ms", "acquired_at", "expires_at"}
    lease_fields |= {"renewals", "lost", "lost_reason", "on_lost"}
    fields = set(redlease.Lease.__dataclass_fields__) | public(redlease.Lease)

    assert {name for name in fields if not name.startswith("_")} == lease_fields
    assert public(redlease.MultiLease) | {"leases"} == {
        *("leases", "fences", "lost", "lost_reason", "on_lost"),
    }


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_every_name_a_public_module_exports_is_in_the_docs(module_name: str) -> None:
    module: Any = importlib.import_module(module_name)

    undocumented = [
        name
        for name in module.__all__
        if not name.startswith("__") and not re.search(rf"\b{re.escape(name)}\b", DOCS)
    ]

    assert undocumented == []
