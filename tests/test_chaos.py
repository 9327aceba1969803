"""``redlease chaos``: the harness finds real violations without fencing, none with it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from redlease.chaos.checks import History, Section, count_overlaps, fence_regressions, verdict

KEYS = {
    "overlaps",
    "overlaps_all",
    "lost_updates",
    "fenced_lost_updates",
    "rejected",
    "recover_ms",
    "fence_regressions",
    "sections",
}


def _chaos(*args: str, timeout: float = 120) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-m", "redlease", "chaos", "--quick", "--json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.timeout(150)
def test_private_servers_fenced_counter_is_exact_and_unfenced_breaks() -> None:
    report = _chaos("sigstop", "pexpire", "kill")
    assert report["ok"] is True
    assert report["server"] == "private"
    scenarios = report["scenarios"]
    assert isinstance(scenarios, dict)
    assert set(scenarios) == {"sigstop", "pexpire", "kill"}
    for name, result in scenarios.items():
        assert KEYS <= set(result), name
        assert result["fenced_lost_updates"] == 0, (name, result)
        assert result["fence_regressions"] == 0, (name, result)
        assert result["injections"] == 2, (name, result)
    for name in ("sigstop", "pexpire"):
        result = scenarios[name]
        assert result["overlaps_all"] > 0 or result["lost_updates"] > 0, (name, result)
        assert result["rejected"] > 0, (name, result)
    kill = scenarios["kill"]
    assert kill["lost_updates"] == 0
    assert kill["recover_ms"] is not None
    assert kill["recover_ms"] <= 2000  # about one TTL (0.5 s) and a retry


@pytest.mark.timeout(60)
def test_shared_server_runs_in_its_own_namespace(redlease_url: str) -> None:
    report = _chaos("pexpire", "--url", redlease_url)
    assert report["server"] == "shared"
    scenarios = report["scenarios"]
    assert isinstance(scenarios, dict)
    assert scenarios["pexpire"]["fenced_lost_updates"] == 0


def test_server_scenarios_refuse_a_shared_server(redlease_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redlease", "chaos", "restart", "--url", redlease_url],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 64
    assert "private" in done.stderr


def test_unknown_scenario_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redlease", "chaos", "nope"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 64
    assert "unknown scenario" in done.stderr


def _section(worker: str, start: float, end: float, fence: int, fenced: str) -> Section:
    return Section(worker, 1, start, fence, end, "wrote", fenced, end)


def test_checkers_on_a_hand_made_history() -> None:
    paused = _section("a", 0.0, 3.0, 1, "rejected")
    others = [_section("b", 1.0, 1.5, 2, "accepted"), _section("b", 1.6, 2.0, 3, "accepted")]
    sections = [paused, *others]
    assert count_overlaps(sections) == 2
    assert count_overlaps(others) == 0
    assert fence_regressions(sections) == 0
    assert (
        fence_regressions([_section("a", 0, 1, 5, "accepted"), _section("b", 2, 3, 4, "accepted")])
        == 1
    )
    result = verdict(History(sections), plain_final=2, fenced_final=2, fault_ends=[0.5])
    assert result["lost_updates"] == 1
    assert result["fenced_lost_updates"] == 0
    assert result["rejected"] == 1
    assert result["recover_ms"] == 500.0
