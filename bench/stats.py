"""Small statistics helpers and a steal-time probe; no third-party dependencies."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (``fraction`` in 0..1); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def spread(values: Sequence[float | None]) -> list[float] | None:
    """``[min, max]`` over the reps, the range a median was taken from."""
    present = [v for v in values if v is not None]
    return [min(present), max(present)] if present else None


def with_spread(name: str, values: Sequence[float | None]) -> dict[str, float | list[float] | None]:
    """``{name: median, name_spread: [min, max]}``: how every figure over reps is kept."""
    return {name: median(values), f"{name}_spread": spread(values)}


def rotated(items: Sequence[T], rep: int) -> list[T]:
    """``items`` started ``rep`` places later: each rep runs them in another order, so a
    slow minute of the machine does not always fall on the same one."""
    shift = rep % len(items) if items else 0
    return [*items[shift:], *items[:shift]]


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def rounded(value: object, digits: int = 3) -> object:
    """Round floats (also inside lists and dicts) so the JSON stays readable."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return round(value, digits) if abs(value) < 100 else round(value, 1)
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


class StealProbe:
    """Share of CPU time the hypervisor took away (``steal`` in /proc/stat) over a span."""

    def __init__(self) -> None:
        self._start = _cpu_times()

    def percent(self) -> float | None:
        end = _cpu_times()
        if self._start is None or end is None:
            return None
        deltas = [b - a for a, b in zip(self._start, end, strict=True)]
        total = sum(deltas)
        return 100.0 * deltas[7] / total if total > 0 and len(deltas) > 7 else None


def _cpu_times() -> list[int] | None:
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    return [int(field) for field in first[1:]]
