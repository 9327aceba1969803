"""A small Jepsen-style harness: lock-protected counters under injected faults.

``redlease chaos`` (see ``docs/chaos.md``) runs worker processes that take one lock
around a slow read-modify-write of two counters, one plain and one fenced through
:class:`~redlease.RedisGuard`, injects faults into the holder or the server, and checks
the history for overlapping critical sections, lost updates and fence order.
"""

from __future__ import annotations

from redlease.chaos.errors import ChaosError
from redlease.chaos.faults import FAULTS, Fault
from redlease.chaos.harness import Settings, run_scenarios

__all__ = ["FAULTS", "ChaosError", "Fault", "Settings", "run_scenarios"]
