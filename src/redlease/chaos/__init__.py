"""A small Jepsen-style harness: lock-protected counters under injected faults.

``redlease chaos`` (see ``docs/chaos.md``) runs worker processes that take one lock
around a slow read-modify-write of two counters, one plain and one fenced through
:class:`~redlease.RedisGuard`, injects faults into the holder or the server, and checks
the history for overlapping critical sections, lost updates and fence order; it also
measures how soon a holder is told that a fault took its lease away, and how soon a
waiter blocked across a fault gets the lock once it is free.
"""

from __future__ import annotations

from redlease.chaos.errors import ChaosError
from redlease.chaos.fault import Fault, Scenario
from redlease.chaos.faults import FAULTS
from redlease.chaos.runner import run_scenarios
from redlease.chaos.settings import Settings

__all__ = ["FAULTS", "ChaosError", "Fault", "Scenario", "Settings", "run_scenarios"]
