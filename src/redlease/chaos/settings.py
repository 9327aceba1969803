"""What a chaos run is told: its settings, and the bounds its measurements are held to.

Kept apart from the harness and the faults so that both can read them without importing
each other.
"""

from __future__ import annotations

from dataclasses import dataclass

WAKE_SLACK_S = 0.05
"""A woken waiter's bound after a heal: one measured round trip plus this (issue 13)."""


@dataclass(frozen=True)
class Settings:
    """One run's settings; a scenario may adjust them (see ``Fault.adjust``)."""

    ttl: float = 1.0
    hold: float = 0.25
    workers: int = 3
    injections: int = 5
    warmup: float = 1.0
    settle: float = 1.5
    renew: bool = False

    @classmethod
    def quick(cls) -> Settings:
        return cls(ttl=0.5, hold=0.15, workers=3, injections=2, warmup=0.4, settle=0.8)

    @property
    def wait_timeout(self) -> float:
        """How long a scripted waiter waits before it gives up (a missed wake-up)."""
        return max(3.0, 4 * self.ttl)
