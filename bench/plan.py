"""How much each part measures: the full plan, and the quick one that differs from it.

A part reads only the fields it needs; ``semaphore``, ``redlock`` and ``cluster`` reuse
``reps``, ``rtt_ops``, ``cycles`` and ``budget_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

RELEASE_LATCH_S = 10.0
"""How long redlease keeps a release latch today: the retry window the ``footprint`` part
waits out before it counts the keys left (``run.py --retry-window`` sets another)."""


@dataclass(frozen=True)
class Plan:
    quick: bool
    reps: int  # rtt and cycle reps (libraries rotated per rep)
    rtt_ops: int
    cycles: int
    budget_s: float  # time cap of any one timed block
    handoff_reps: int
    handoff_s: float
    worker_counts: tuple[int, ...]
    renew_counts: tuple[int, ...]
    renew_ttl_s: int
    renew_hold_s: float
    async_reps: int
    async_cycles: int
    family_workers: int  # fair and rw: worker processes per run
    family_reps: int  # fair and rw: reps of each of the two sessions compared
    family_s: float
    footprint_names: int  # distinct names locked once each for the keys-left count
    retry_window_s: float  # waited out after the last release before counting them


SIZES: dict[str, tuple[object, object]] = {  # field: (full run, quick run)
    "reps": (7, 3),
    "rtt_ops": (2000, 500),
    "cycles": (2000, 400),
    "budget_s": (8.0, 3.0),
    "handoff_reps": (3, 1),
    "handoff_s": (6.0, 2.5),
    "worker_counts": ((2, 4, 8, 16), (2, 8, 16)),
    "renew_counts": ((100, 1_000, 10_000), (100, 1_000)),
    "renew_ttl_s": (3, 3),
    "renew_hold_s": (10.0, 4.0),
    "async_reps": (7, 3),
    "async_cycles": (2000, 300),
    "family_workers": (8, 8),
    "family_reps": (3, 1),
    "family_s": (6.0, 2.0),
    "footprint_names": (100_000, 10_000),
    "retry_window_s": (RELEASE_LATCH_S, RELEASE_LATCH_S),
}
FULL = Plan(quick=False, **{name: full for name, (full, _) in SIZES.items()})
QUICK = Plan(quick=True, **{name: quick for name, (_, quick) in SIZES.items()})
