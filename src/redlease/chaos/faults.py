"""Every scenario of ``redlease chaos``, by name, in the order the results page lists them.

The fault kinds live in their own modules: the holder's process
(:mod:`~redlease.chaos.process_faults`), the lock server
(:mod:`~redlease.chaos.server_faults`), the holder's network
(:mod:`~redlease.chaos.network_faults`), replicated and quorum topologies
(:mod:`~redlease.chaos.topology_faults`), and waiters blocked across a fault
(:mod:`~redlease.chaos.wake_scenarios`).
"""

from __future__ import annotations

from redlease.chaos.fault import Fault, Scenario
from redlease.chaos.network_faults import BlackHole, DropReply, Latency, Partition
from redlease.chaos.process_faults import Kill, Pause
from redlease.chaos.server_faults import ClientPause, DelayedRestart, Expire, Restart, Stall
from redlease.chaos.topology_faults import ClusterFailover, RedlockPartition, SentinelFailover
from redlease.chaos.wake_scenarios import WAKE_SCENARIOS

__all__ = ["FAULTS", "Fault", "Scenario"]

_ALL: tuple[type[Scenario], ...] = (
    Pause,
    Expire,
    Kill,
    Stall,
    ClientPause,
    Restart,
    DelayedRestart,
    Latency,
    DropReply,
    BlackHole,
    Partition,
    SentinelFailover,
    ClusterFailover,
    RedlockPartition,
    *WAKE_SCENARIOS,
)
FAULTS: dict[str, type[Scenario]] = {scenario.name: scenario for scenario in _ALL}
