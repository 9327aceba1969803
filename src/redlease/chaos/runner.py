"""Run the chosen scenarios, each on a fresh target, and give the verdicts.

Counter scenarios (:class:`~redlease.chaos.fault.Fault`) run in the counter harness
(:mod:`redlease.chaos.harness`), wake scenarios in the wake harness
(:mod:`redlease.chaos.wake`). The report is what ``redlease chaos --json`` prints.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import redis

from redlease.chaos.errors import ChaosError
from redlease.chaos.fault import Fault, Scenario
from redlease.chaos.faults import FAULTS
from redlease.chaos.harness import Run
from redlease.chaos.settings import Settings
from redlease.chaos.targets import namespaces_available, open_target
from redlease.chaos.wake import WakeRun
from redlease.chaos.wake_scenarios import WakeScenario


def run_scenarios(
    names: list[str], settings: Settings, url: str | None = None, logs: Path | None = None
) -> dict[str, Any]:
    """Run each scenario in turn, each on a fresh target; the result is what ``--json`` prints.

    The workers' logs go to ``logs`` (kept) or to a temporary directory, removed unless a
    scenario could not finish (its error points there); ``logs`` in the report names the
    directory kept, if any. A
    scenario this machine cannot run (no network namespaces, say) is reported as
    ``{"skipped": reason}``, one that could not finish as ``{"error": reason}``.
    """
    scenarios = [FAULTS[name]() for name in names]
    results: dict[str, Any] = {}
    directory = Path(tempfile.mkdtemp(prefix="redlease-chaos-")) if logs is None else logs
    directory.mkdir(parents=True, exist_ok=True)
    errored = False
    try:
        for scenario in scenarios:
            reason = unavailable(scenario)
            if reason is not None:
                results[scenario.name] = {"skipped": reason}
                continue
            slots = settings.workers + settings.injections
            target = open_target(scenario.topology, url=url, proxied=scenario.proxied, slots=slots)
            with target:
                try:
                    results[scenario.name] = _run(scenario, target, settings, directory)
                except (ChaosError, redis.RedisError) as error:  # a server that stopped answering
                    results[scenario.name] = {"error": str(error)}
                    errored = True
    finally:
        # A scenario's error points at its workers' output: keep that, drop the rest.
        if logs is None and not errored:
            shutil.rmtree(directory, ignore_errors=True)
    kept = str(directory) if logs is not None or errored else None
    return {
        "server": "private" if url is None else "shared",
        "settings": asdict(settings),
        "logs": kept,
    } | verdicts(results)


def _run(scenario: Scenario, target: Any, settings: Settings, directory: Path) -> dict[str, Any]:
    if isinstance(scenario, WakeScenario):
        return WakeRun(scenario, target, settings, directory).execute()
    assert isinstance(scenario, Fault)
    return Run(scenario, target, settings, directory).execute()


def verdicts(results: dict[str, Any]) -> dict[str, Any]:
    """The report's verdicts over the scenarios' results, and the results themselves.

    ``fenced_ok``: no scenario failed to run, every fenced counter is exact and no fence
    went back. ``detection_ok``: every holder whose lease a fault took away was told within
    the bound. ``wake_ok``: every waiter blocked across a fault got the lock within the
    bound. ``ok`` is all three.
    """
    ran = [result for result in results.values() if "skipped" not in result]
    fenced_ok = all(
        "error" not in r
        and r.get("fenced_lost_updates", 0) == 0
        and r.get("fence_regressions", 0) == 0
        for r in ran
    )
    detection_ok = all((r.get("detection") or {"met": True})["met"] for r in ran)
    wake_ok = all((r.get("wake") or {"met": True})["met"] for r in ran)
    return {
        "ok": fenced_ok and detection_ok and wake_ok,
        "fenced_ok": fenced_ok,
        "detection_ok": detection_ok,
        "wake_ok": wake_ok,
        "scenarios": results,
    }


def unavailable(scenario: Scenario) -> str | None:
    """Why this machine cannot run ``scenario`` (None when it can)."""
    if scenario.topology == "netns":
        return namespaces_available()
    return None
