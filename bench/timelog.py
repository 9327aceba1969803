"""The readings a contended worker keeps per acquisition, kept out of the garbage collector.

A list of ``(requested, acquired, releasing)`` tuples adds one tracked object per
acquisition; the interpreter then runs a full collection every few thousand acquisitions,
tens of ms on a 2-vCPU machine, and a worker caught in one while the lock is handed to it
holds up every waiter behind it: the longest wait measured that pause, not the lock (a
redlease cycle itself leaves no object behind). Flat float arrays add none.
"""

from __future__ import annotations

from array import array


class TimeLog:
    """``time.monotonic()`` readings, three per acquisition."""

    def __init__(self) -> None:
        self._readings = array("d")

    def add(self, requested: float, acquired: float, releasing: float) -> None:
        self._readings.extend((requested, acquired, releasing))

    def __len__(self) -> int:
        return len(self._readings) // 3

    def rows(self) -> list[tuple[float, float, float]]:
        """The readings as tuples, once the measured loop is over."""
        values = self._readings
        return [(values[i], values[i + 1], values[i + 2]) for i in range(0, len(values), 3)]
