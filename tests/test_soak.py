"""The soak: many workers, many names, faults on a schedule; nothing lost, nothing leaked.

The small soak runs in every CI run (8 workers x 300 acquisitions over 8 names, a fault
every second, all four kinds, in well under a minute). The full one (64 x 10,000 over 64
names, a fault every 30 s) is marked slow and runs only when ``-m slow`` selects it; its
figures are in docs/soak.md.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import PRIVATE_SERVERS_ONLY
from redlease.chaos.checks import Section, count_overlaps
from redlease.chaos.soak_checks import (
    Injection,
    fence_order,
    key_kind,
    overlap_pairs,
    split_overlaps,
)
from redlease.chaos.soak_worker import SoakSection, read_log

SMALL_SOAK_DEADLINE = 150
"""Seconds the small soak may run: 37 on a quiet 2-core machine, 76 beside four CPU hogs
(load average 9.5). It is bound by throughput, not by a round trip: each fault costs a
worker seconds of restart on a busy machine."""


def _soak(*args: str, timeout: float) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "redlease.chaos.soak", "--json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert done.returncode == (0 if report["ok"] else 1), done.stderr
    return report


def _assert_safe_and_clean(report: dict[str, Any], workers: int, acquisitions: int) -> None:
    """What a user relies on after a soak, whatever the faults did."""
    assert report["completed"], report["crashes"]
    assert report["crashes"] == []
    assert report["failures"] == [], report["failures"]
    assert report["ok"] is True
    attempts = report["acquisitions"]
    # A killed worker's unflushed log tail is redone by its replacement, so at least.
    assert attempts["attempted"] >= workers * acquisitions
    assert attempts["granted"] + attempts["timeouts"] <= attempts["attempted"]
    assert attempts["granted"] >= 0.9 * workers * acquisitions
    # Safety: never two holders inside their leases; outside the fault windows an overlap
    # only after the older lease's deadline (a holder the busy machine paused); with
    # fencing nothing lost, fences in order.
    overlaps = report["overlaps"]
    assert overlaps["live_lease"] == 0
    assert overlaps["outside"] == overlaps["outside_after_deadline"]
    assert report["fenced_lost_updates"] == 0
    assert report["fence_regressions"] == 0
    assert report["duplicate_fenced_values"] == 0
    assert report["fence_records_behind"] == 0
    counters = report["counters"]
    assert counters["fenced_counter"] == counters["fenced_writes"]
    assert counters["plain_writes"] - counters["plain_counter"] == report["plain_lost_updates"]
    assert 0 <= report["unlogged_fenced_writes"] <= 65 * report["faults_by_kind"].get("kill", 0)
    # Leaks: memory and descriptors flat after warm-up, no connection or key left behind.
    resources = report["workers"]
    # Sampled: every worker that ran past its warm-up to a clean stop (a killed one did not).
    assert resources["sampled"] >= workers - report["faults_by_kind"].get("kill", 0)
    assert resources["rss_kib"]["growth_max"] <= 16 * 1024
    assert resources["fds"]["growth_max"] <= 2
    assert report["lock_server"]["clients_at_end"] == 0
    keys = report["leftover_keys"]
    assert keys["lease"] == 0
    assert keys["queue"] == 0
    assert keys["latch_after_wait"] == 0
    assert keys["other"] == 0
    assert keys["fence"] <= report["settings"]["names"]


@PRIVATE_SERVERS_ONLY
@pytest.mark.timeout(SMALL_SOAK_DEADLINE + 30)
def test_small_soak_under_every_fault_loses_nothing_and_leaks_nothing() -> None:
    report = _soak(
        "--workers", "8", "--acquisitions", "300", "--names", "8",
        "--fault-every", "1", "--ttl", "0.5", "--hold", "0.02",
        "--acquire-timeout", "5", "--deadline", str(SMALL_SOAK_DEADLINE),
        timeout=SMALL_SOAK_DEADLINE + 20,
    )  # fmt: skip
    _assert_safe_and_clean(report, workers=8, acquisitions=300)
    assert report["seconds"] < SMALL_SOAK_DEADLINE
    assert report["leftover_keys"]["fence"] == 8
    kinds = report["faults_by_kind"]
    assert set(kinds) == {"kill", "sigstop", "pexpire", "stall"}, report["faults"]
    assert all(not fault["target"].startswith("failed") for fault in report["faults"])
    # The faults bite: every PEXPIRE ends a held lease, whose holder then finds it gone.
    hits = [f for f in report["faults"] if f["kind"] == "pexpire" and "lease of" in f["target"]]
    assert hits
    assert report["acquisitions"]["releases_expired"] >= 1
    assert report["lock_server"]["version"]


@pytest.mark.slow
@pytest.mark.timeout(3 * 3600)
def test_full_soak_64_workers_x_10000_acquisitions(request: pytest.FixtureRequest) -> None:
    if "slow" not in str(request.config.getoption("markexpr")):
        pytest.skip("the full soak takes half an hour or more: select it with -m slow")
    report = _soak(
        "--workers", "64", "--acquisitions", "10000", "--names", "64",
        "--fault-every", "30", "--deadline", str(3 * 3600 - 600),
        timeout=3 * 3600 - 60,
    )  # fmt: skip
    _assert_safe_and_clean(report, workers=64, acquisitions=10_000)
    assert report["leftover_keys"]["fence"] == 64
    assert set(report["faults_by_kind"]) == {"kill", "sigstop", "pexpire", "stall"}


def _random_sections(seed: int) -> list[Section]:
    rng = random.Random(seed)
    sections = []
    for number in range(60):
        start = rng.uniform(0, 10)
        end = start + rng.expovariate(2.0)
        sections.append(Section(f"w{rng.randrange(5)}", number, start, number, end))
    return sorted(sections, key=lambda section: section.acquired)


@pytest.mark.parametrize("seed", range(20))
def test_overlap_pairs_count_what_the_chaos_checker_counts(seed: int) -> None:
    sections = _random_sections(seed)
    pairs = list(overlap_pairs(sections))
    assert len(pairs) == count_overlaps(sections)
    for earlier, later in pairs:
        assert earlier.worker != later.worker
        assert earlier.acquired <= later.acquired < (earlier.ended or 0)


def _write(fence: int, written: int, fenced: str = "accepted") -> SoakSection:
    return SoakSection("w", 0, 0.0, fence, 1.0, "wrote", fenced, 1.0, written=written)


def test_fence_order_follows_the_values_written_not_the_clocks() -> None:
    assert fence_order([_write(3, 2), _write(1, 1), _write(7, 3)]) == (0, 0)
    assert fence_order([_write(3, 1), _write(2, 2)]) == (1, 0)  # an older token won later
    assert fence_order([_write(3, 1), _write(4, 1)]) == (0, 1)  # one value written twice
    assert fence_order([_write(9, 0, "rejected"), _write(3, 1)]) == (0, 0)


def _held(worker: str, start: float, end: float, deadline: float) -> SoakSection:
    return SoakSection(worker, 0, start, 1, end, "wrote", "accepted", end, deadline=deadline)


def test_overlaps_tell_a_lapsed_lease_from_two_live_ones() -> None:
    lapsed = [_held("a", 0.0, 3.0, 2.0), _held("b", 2.5, 2.6, 4.5)]  # b after a's deadline
    live = [_held("a", 10.0, 10.5, 12.0), _held("b", 10.2, 10.3, 12.2)]  # b before it
    counts = split_overlaps({0: lapsed, 1: live}, [])
    assert counts["outside"] == 2
    assert counts["outside_after_deadline"] == 1
    assert counts["live_lease"] == 1
    expired = Injection("pexpire", 10.1, 10.1, "lease of n001", window_end=12.1)
    counts = split_overlaps({1: live}, [expired])
    assert (counts["inside"], counts["live_lease"], expired.overlaps) == (1, 0, 1)


def test_a_paused_holder_never_hides_two_live_leases_behind_it() -> None:
    """a is paused in its section long past its deadline; b then c are granted while it
    sleeps, c inside b's lease: that pair is two live holders, whoever else still runs."""
    paused = _held("a", 0.0, 10.0, 0.5)
    first, second = _held("b", 1.0, 2.5, 3.0), _held("c", 2.0, 3.0, 4.0)
    counts = split_overlaps({0: [paused, first, second]}, [])
    assert counts["live_lease"] == 1
    assert counts["outside"] == 2
    assert counts["outside_after_deadline"] == 1


def test_lock_keys_are_told_apart_by_kind() -> None:
    assert key_kind("p:{n001}", "p") == "lease"
    assert key_kind("p:{n001}:fence", "p") == "fence"
    assert key_kind("p:{n001}:queue", "p") == "queue"
    assert key_kind("p:{n001}:latch:abc|host|1|t", "p") == "latch"
    assert key_kind("p:{n001}:holders", "p") == "other:holders"
    assert key_kind("p:plain:n001", "p") == "other"


def test_a_log_cut_by_kill_9_is_read_up_to_its_last_whole_line(tmp_path: Path) -> None:
    log = tmp_path / "w00.0.jsonl"
    log.write_text(
        '["b","w00.0",123,1.0,0,10]\n'
        '["s",0,3,7,1.0,1.5,3.4,1.6,"w","a","r",41]\n'
        '["t",1,2,11.6]\n'
        '["s",2,1,9,11.75,12.0,13.9,12.1,"w","R","x",0]\n'
        '["s",3,1,10,12.1,12.2,14.1,1',  # torn by kill -9 mid-write
        encoding="utf-8",
    )
    parsed = read_log(log)
    assert (parsed.worker, parsed.pid, parsed.count) == ("w00.0", 123, 10)
    assert parsed.attempts == 3
    assert parsed.timeouts == 1
    assert [(s.name, s.fence, s.fenced, s.released, s.written) for s in parsed.sections] == [
        (3, 7, "accepted", "r", 41),
        (1, 9, "rejected", "x", 0),
    ]
    assert [s.deadline for s in parsed.sections] == [3.4, 13.9]
    assert parsed.releases["x"] == 1
    assert [s.acquired - s.requested for s in parsed.sections] == [0.5, 0.25]
    assert parsed.done is None  # killed: no clean end
