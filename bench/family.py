"""redlease's other primitives on the benchmark's one server: fair lock, read-write lock,
semaphore. redlease only (the peers have no such primitives to compare with).

* ``fair``: 8 worker processes on one ``locks.fair_lock`` key, measured exactly like the
  ``handoff`` part (see ``contended.py``), alternating per rep with the plain
  ``locks.lock`` at the same worker count as the same-run reference.
* ``rw``: 8 processes on one read-write lock, all readers (``rw.read``) and then all
  writers (``rw.write``), alternating per rep; same worker loop and critical section.
* ``semaphore``: one process, uncontended ``with locks.semaphore(name, 4):`` cycles after
  an EVALSHA reference on the same client, alternating with plain lock cycles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from contended import run_contended
from plan import Plan
from report import HANDOFF_KEYS, MEDIAN_OF_REPS, summarise_contended
from stats import median, ratio, with_spread
from uncontended import commands_per_cycle, evalsha_rtt, time_loop

FAIR = "redlease-fair"
PLAIN = "redlease"
READ = "redlease-read"
WRITE = "redlease-write"
PERMITS = 4

Label = Callable[[str], None]


def contended_pair(
    url: str,
    libraries: tuple[str, str],
    workers: int,
    reps: int,
    duration_s: float,
    label: Label,
    tick: Callable[[], None],
) -> dict[str, list[dict[str, Any]]]:
    """``reps`` contended runs of each session, the order alternating per rep."""
    runs: dict[str, list[dict[str, Any]]] = {library: [] for library in libraries}
    for rep in range(reps):
        order = libraries if rep % 2 == 0 else libraries[::-1]
        for library in order:
            label(f"{library}, {workers} workers, rep {rep + 1}/{reps}")
            run = run_contended(url, library, workers, duration_s, f"{workers}w{rep}")
            runs[library].append(run)
            tick()
    return runs


def fair_figures(runs: dict[str, list[dict[str, Any]]], workers: int) -> dict[str, Any]:
    fair = summarise_contended(runs[FAIR])
    plain = summarise_contended(runs[PLAIN])
    figures: dict[str, Any] = {"fair_workers": workers}
    for key in (*MEDIAN_OF_REPS, "longest_wait_ms", "overlaps", "counter_mismatch"):
        figures[f"fair_{key}"] = fair.get(key)
    for key in (*HANDOFF_KEYS[:3], "acquires_per_s", "longest_wait_ms", "handoff_share"):
        figures[f"plain_{key}"] = plain.get(key)
    figures["fair_handoff_p50_us_spread"] = fair.get("handoff_p50_us_spread")
    figures["fair_handoff_p50_rtt_spread"] = fair.get("handoff_p50_rtt_spread")
    figures["fair_errors"] = fair["errors"] + plain["errors"]
    figures["fair"] = {"fair_lock": fair, "plain_lock": plain}
    return figures


def rw_figures(runs: dict[str, list[dict[str, Any]]], workers: int) -> dict[str, Any]:
    read = summarise_contended(runs[READ])
    write = summarise_contended(runs[WRITE])
    # Readers hold the lock together, so "handoff" (next acquire minus previous release)
    # and the counter (concurrent read-modify-writes) mean nothing for them.
    read = {
        key: value
        for key, value in read.items()
        if not key.startswith("handoff") and key != "counter_mismatch"
    }
    # Readers share the lock: an "overlap" is a read that began while another was held.
    shares = [
        run["overlaps"] / run["acquisitions"]
        for run in runs[READ]
        if "error" not in run and run["acquisitions"]
    ]
    return {
        "rw_workers": workers,
        "read_acquires_per_s": read["acquires_per_s"],
        "read_acquires_per_s_spread": read["acquires_per_s_spread"],
        "read_longest_wait_ms": read["longest_wait_ms"],
        "read_wait_p50_ms": read["wait_p50_ms"],
        "read_overlap_share": median(shares),
        "read_commands_per_acquire": read["commands_per_acquire"],
        "read_client_commands_per_acquire": read["client_commands_per_acquire"],
        "write_acquires_per_s": write["acquires_per_s"],
        "write_acquires_per_s_spread": write["acquires_per_s_spread"],
        "write_handoff_p50_us": write["handoff_p50_us"],
        "write_handoff_p50_rtt": write["handoff_p50_rtt"],
        "write_longest_wait_ms": write["longest_wait_ms"],
        "write_overlaps": write["overlaps"],
        "write_counter_mismatch": write["counter_mismatch"],
        "write_commands_per_acquire": write["commands_per_acquire"],
        "read_over_write": ratio(read["acquires_per_s"], write["acquires_per_s"]),
        "rw_errors": read["errors"] + write["errors"],
        "rw": {"read": read, "write": write},
    }


class _Cycler:
    """Just enough of a ``peers.Session`` for ``commands_per_cycle``."""

    def __init__(self, cycle: Callable[[str], None]) -> None:
        self.cycle = cycle


def semaphore_reps(
    url: str, admin: redis.Redis, plan: Plan, tick: Callable[[], None]
) -> dict[str, Any]:
    """Per rep: an EVALSHA reference, then semaphore and plain-lock cycles (order alternating)."""
    import redlease  # noqa: PLC0415

    client = redis.Redis.from_url(url)
    locks = redlease.Locks(client)

    def semaphore_cycle(key: str) -> None:
        with locks.semaphore(key, PERMITS):
            pass

    def lock_cycle(key: str) -> None:
        with locks.lock(key):
            pass

    flavours = {"semaphore": semaphore_cycle, "lock": lock_cycle}
    keys = {"semaphore": "rlbench:semaphore", "lock": "rlbench:semaphore:lock"}
    samples: dict[str, list[float]] = {"rtt": [], "semaphore": [], "lock": [], "ratio": []}
    cpu: list[float] = []
    count, budget_s = plan.cycles, plan.budget_s
    try:
        for rep in range(plan.reps):
            rtt = evalsha_rtt(client, plan.rtt_ops, budget_s).us
            samples["rtt"].append(rtt)
            order = ("semaphore", "lock") if rep % 2 == 0 else ("lock", "semaphore")
            for name in order:
                key, cycle = keys[name], flavours[name]
                timed = time_loop(lambda key=key, cycle=cycle: cycle(key), count, budget_s)
                samples[name].append(timed.us)
                if name == "semaphore":
                    samples["ratio"].append(timed.us / rtt)
                    cpu.append(timed.cpu_us)
            tick()
        cycler: Any = _Cycler(semaphore_cycle)
        counted = commands_per_cycle(cycler, keys["semaphore"], admin)
    finally:
        locks.close()
        client.close()
    return {
        "semaphore_permits": PERMITS,
        **with_spread("semaphore_cycle_us", samples["semaphore"]),
        **with_spread("semaphore_cycle_rtt", samples["ratio"]),
        "semaphore_cycle_cpu_us": median(cpu),
        "semaphore_rtt_us": median(samples["rtt"]),
        "semaphore_lock_cycle_us": median(samples["lock"]),
        "semaphore_over_lock": ratio(median(samples["semaphore"]), median(samples["lock"])),
        "semaphore_client_commands": counted["cycle_client_commands"],
        "semaphore_server_commands": counted["cycle_server_commands"],
    }
