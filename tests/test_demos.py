"""The seeds' scenarios, run for real through ``python -m redlease demo ...``.

Each demo starts real worker processes against the test server (``REDIS_URL``) and prints
its figures as one JSON object. With the lock each must show the seeds' outcome (no
oversell with a segmented stock, one source call for a cache rebuild, one order per user,
a renewed lease that nobody else gets), and without it the failure the lock prevents.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import redis

RUN_TIMEOUT = 90


def run_demo(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "REDIS_URL"}
    env["REDIS_URL"] = url
    return subprocess.run(
        [sys.executable, "-m", "redlease", "demo", *args],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def figures_of(url: str, *args: str) -> dict[str, object]:
    """Run a demo with ``--json``; check it exited 0 and left no key behind."""
    completed = run_demo(url, *args, "--json")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1, completed.stdout
    figures = json.loads(lines[0])
    assert isinstance(figures, dict)
    with redis.Redis.from_url(url) as client:
        assert list(client.scan_iter(match="redlease-demo:*")) == []
    return figures


# flash sale with a segmented stock


def test_segmented_sale_sells_each_segment_exactly(redlease_url):
    figures = figures_of(redlease_url, "flash-sale", "--segments", "4")

    assert figures["locked"] is True
    assert figures["segments"] == 4
    assert figures["oversold"] == 0
    assert figures["sold"] == figures["stock"] == 100
    assert figures["segment_stock"] == [25, 25, 25, 25]
    assert figures["segment_sold"] == figures["segment_stock"]
    assert figures["stock_left"] == 0
    assert figures["buys_per_s"] > 0  # throughput grows with N: see docs/cli.md, not asserted


def test_uneven_segments_split_the_stock_without_loss(redlease_url):
    figures = figures_of(
        redlease_url, "flash-sale", "--segments", "3", "--stock", "20", "--workers", "3"
    )

    assert figures["segment_stock"] == [7, 7, 6]
    assert figures["segment_sold"] == [7, 7, 6]
    assert figures["oversold"] == 0


def test_segmented_sale_without_the_lock_oversells(redlease_url):
    figures = figures_of(redlease_url, "flash-sale", "--segments", "4", "--no-lock")

    assert figures["locked"] is False
    assert figures["oversold"] > 0
    assert sum(figures["segment_sold"]) == figures["sold"]


def test_more_segments_than_items_is_a_usage_error(redlease_url):
    completed = run_demo(redlease_url, "flash-sale", "--stock", "3", "--segments", "4")

    assert completed.returncode == 64
    assert "--segments" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_one_segment_keeps_the_unsplit_sale(redlease_url):
    figures = figures_of(redlease_url, "flash-sale", "--stock", "20", "--workers", "2")

    assert figures["segments"] == 1
    assert figures["segment_sold"] == [20]


# cache rebuild


def test_cache_is_rebuilt_by_exactly_one_process(redlease_url):
    figures = figures_of(redlease_url, "cache-rebuild")

    assert figures["locked"] is True
    assert figures["source_calls"] == 1
    assert figures["workers"] == 8
    assert figures["readers"] == 7
    assert figures["distinct_values"] == 1
    assert figures["seconds"] >= 0.5


def test_cache_without_the_lock_stampedes_the_source(redlease_url):
    figures = figures_of(redlease_url, "cache-rebuild", "--no-lock")

    assert figures["locked"] is False
    assert figures["source_calls"] > 1
    assert figures["readers"] == figures["workers"] - figures["source_calls"]


# one order per user


def test_hammering_buy_creates_exactly_one_order(redlease_url):
    figures = figures_of(redlease_url, "one-order", "--workers", "4", "--attempts", "10")

    assert figures["locked"] is True
    assert figures["attempts"] == 40
    assert figures["orders"] == 1
    assert figures["refused"] == 39
    assert figures["workers"] == 4


def test_buy_without_the_lock_creates_duplicates(redlease_url):
    figures = figures_of(redlease_url, "one-order", "--workers", "4", "--no-lock")

    assert figures["locked"] is False
    assert figures["orders"] > 1
    assert figures["duplicates"] == figures["orders"] - 1


# watchdog


def test_renewed_lease_outlives_its_ttl_and_keeps_the_other_out(redlease_url):
    figures = figures_of(redlease_url, "watchdog")

    assert figures["ttl"] == 1.0
    assert figures["job_seconds"] == 3.5
    assert figures["renewals"] >= 3
    assert figures["overlaps"] == 0
    assert figures["contender_acquired"] == 0
    assert figures["contender_tries"] > 0
    assert figures["holder_lost"] is False
    log = figures["renewal_log"]
    assert len(log) >= 3
    assert all(entry["server_ttl_ms"] is not None for entry in log)
    assert all(0 < entry["server_ttl_ms"] <= 1000 for entry in log)


def test_unrenewed_lease_expires_under_the_job_and_is_reported_lost(redlease_url):
    figures = figures_of(redlease_url, "watchdog", "--no-renew")

    assert figures["renewals"] == 0
    assert figures["overlaps"] > 0
    assert figures["first_overlap_s"] >= 0.9  # not before the 1 s lease ran out
    assert figures["holder_lost"] is True
    assert "expired" in figures["lost_reason"]


def test_watchdog_narrates_each_renewal(redlease_url):
    completed = run_demo(redlease_url, "watchdog", "--ttl", "0.3", "--job-seconds", "1.2")

    assert completed.returncode == 0, completed.stderr
    renewals = [line for line in completed.stderr.splitlines() if "renewal #" in line]
    assert len(renewals) >= 3
    assert all("server TTL" in line for line in renewals)
    assert "overlaps" in completed.stdout
    assert "never got in" in completed.stdout


# the CLI around them


@pytest.mark.parametrize(
    ("demo", "options"),
    [
        ("flash-sale", ["--segments"]),
        ("cache-rebuild", ["--workers", "--rebuild-seconds", "--no-lock", "--json"]),
        ("one-order", ["--workers", "--attempts", "--user-id", "--no-lock", "--json"]),
        ("watchdog", ["--ttl", "--job-seconds", "--no-renew", "--json"]),
    ],
)
def test_demo_help_describes_its_options(redlease_url, demo, options):
    completed = run_demo(redlease_url, demo, "--help")

    assert completed.returncode == 0
    for option in options:
        assert option in completed.stdout
