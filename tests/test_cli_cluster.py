"""The lock tools against a real Redis Cluster, told nothing: no ``--cluster``.

A user who points ``REDIS_URL`` at one node of a cluster must get the whole cluster: the
tools ask the node (``INFO cluster``) and switch to a cluster client themselves, so
``run`` takes a lock that lives on another master, and ``ls``, ``show``, ``release`` and
``top`` see every master, not only the node named in the URL.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

import redlease
from conftest import run_redlease
from redlease.topology import LocalCluster

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

RUN_TIMEOUT = 60


def run_cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return run_redlease(*args, url=url, timeout=RUN_TIMEOUT)


@pytest.fixture
def cluster(redlease_cluster: LocalCluster) -> LocalCluster:
    redlease_cluster.wait_until_ok(timeout=30)
    return redlease_cluster


@pytest.fixture
def prefix() -> str:
    return f"cli-cluster-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def spread(cluster: LocalCluster, prefix: str) -> list[str]:
    """Two lock names on each master (six in all), as in the report this test answers."""
    per_master: dict[int, list[str]] = {node.port: [] for node in cluster.masters()}
    for number in range(1000):
        name = f"job-{number}"
        names = per_master[cluster.master_for_key(f"{prefix}:{{{name}}}").port]
        if len(names) < 2:
            names.append(name)
        if all(len(names) == 2 for names in per_master.values()):
            break
    return sorted(name for names in per_master.values() for name in names)


@pytest.fixture
def held(cluster: LocalCluster, prefix: str, spread: list[str]) -> Iterator[dict[str, int]]:
    """Every name of ``spread`` held by this test: name -> fence."""
    with redlease.Locks(cluster.url, prefix=prefix, cluster=True) as locks:
        fences = {name: locks.lock(name).acquire().fence for name in spread}
        yield fences
        for name in spread:
            if locks.lock(name).lease is not None:
                locks.lock(name).release()


def test_ls_lists_the_locks_of_every_master_without_being_told(cluster, prefix, held):
    completed = run_cli("ls", "--json", "--prefix", prefix, url=cluster.url)

    assert completed.returncode == 0, completed.stderr
    listed = json.loads(completed.stdout.strip().splitlines()[-1])
    assert {entry["name"]: entry["fence"] for entry in listed} == held


def test_show_and_release_reach_a_lock_on_another_master(cluster, prefix, held):
    name = next(
        name
        for name in held
        if cluster.master_for_key(f"{prefix}:{{{name}}}").port != cluster.masters()[0].port
    )

    shown = run_cli("show", name, "--json", "--prefix", prefix, url=cluster.url)
    released = run_cli("release", name, "--force", "--prefix", prefix, url=cluster.url)
    after = run_cli("show", name, "--json", "--prefix", prefix, url=cluster.url)

    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout.splitlines()[-1])["holders"]
    assert released.returncode == 0, released.stderr
    assert "removed the lock lease" in released.stdout
    assert json.loads(after.stdout.splitlines()[-1])["holders"] == []


def test_release_force_wakes_a_waiter_on_another_master(cluster, prefix, spread):
    """The waiter listens on its slot's master (sharded pub/sub); it takes the freed lock
    at once, not when the evicted 30 s lease would have run out."""
    name = next(
        name
        for name in spread
        if cluster.master_for_key(f"{prefix}:{{{name}}}").port != cluster.masters()[0].port
    )
    with (
        redlease.Locks(cluster.url, prefix=prefix, cluster=True) as holder,
        redlease.Locks(cluster.url, prefix=prefix, cluster=True) as waiter,
    ):
        holder.lock(name, ttl=30).acquire()
        waiting = waiter.lock(name)
        with ThreadPoolExecutor(1) as pool:
            got = pool.submit(waiting.acquire, timeout=20)
            with redis.Redis(port=cluster.master_for_key(f"{prefix}:{{{name}}}").port) as node:
                queue = f"{prefix}:{{{name}}}:queue"
                deadline = time.monotonic() + 10
                while not node.llen(queue) and time.monotonic() < deadline:
                    time.sleep(0.01)
            released = run_cli("release", name, "--force", "--prefix", prefix, url=cluster.url)
            evicted = time.monotonic()
            assert released.returncode == 0, released.stderr
            assert got.result(timeout=30).fence > 0
            took = time.monotonic() - evicted
    assert took < 5, f"the waiter got the lock {took:.2f} s after the eviction"


def test_run_takes_locks_on_every_master_without_being_told(cluster, prefix, spread):
    for name in spread:
        completed = run_cli(
            "run", name, "--prefix", prefix, "-c", 'echo "$REDLEASE_FENCE"', url=cluster.url
        )

        assert completed.returncode == 0, f"{name}: {completed.stderr}"
        assert completed.stdout.strip() == "1"


def test_top_once_shows_the_locks_of_every_master(cluster, prefix, held):
    completed = run_cli("top", "--once", "--interval", "0.2", "--prefix", prefix, url=cluster.url)

    assert completed.returncode == 0, completed.stderr
    shown = {line.split()[0] for line in completed.stdout.splitlines() if line.strip()}
    assert set(held) <= shown


def test_cluster_flag_on_a_plain_server_is_a_clear_usage_error(redlease_url):
    completed = run_cli("ls", "--cluster", url=redlease_url)

    assert completed.returncode == 64
    assert "not a cluster" in completed.stderr
