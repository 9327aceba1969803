"""The parts of the suite. Each one measures and returns its raw figures, JSON-ready.

Raw figures have string keys only, so ``bench/results/latest.json`` can keep them as they
are and ``report.assemble`` can rebuild every table from them, also when they are merged
with parts kept from earlier runs.

The claims parts (``flash``, ``coordination``) live in modules of their own that are
imported only when the part runs: a missing or broken module makes that part skipped
with its error, never the whole run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from peers import LIBRARIES, open_session
from plan import Plan
from stats import rotated

Label = Callable[[str], None]


@dataclass
class Context:
    url: str
    admin: redis.Redis
    plan: Plan
    label: Label
    tick: Callable[[], None]


class PartSkipped(RuntimeError):
    """A part could not run (a module missing or broken); the message says why."""


def steps(plan: Plan, parts: tuple[str, ...]) -> dict[str, int]:
    """Progress-bar steps of each part that will run."""
    from footprint import FOOTPRINT_STEPS  # noqa: PLC0415
    from renewal import RENEWING_LIBRARIES  # noqa: PLC0415

    cycle_sessions = len(LIBRARIES) + 1
    table = {
        "cycle": plan.reps * cycle_sessions,
        "rtt": plan.reps * len(LIBRARIES),
        "handoff": plan.handoff_reps * len(plan.worker_counts) * len(LIBRARIES),
        "renewal": len(RENEWING_LIBRARIES) * len(plan.renew_counts),
        "async": plan.async_reps,
        "fair": 2 * plan.family_reps,
        "rw": 2 * plan.family_reps,
        "semaphore": plan.reps,
        "redlock": plan.reps,
        "cluster": plan.reps,
        "footprint": FOOTPRINT_STEPS,
        "flash": _flash_steps(plan.quick) if "flash" in parts else 1,
        "coordination": 1,
    }
    return {part: table[part] for part in parts}


def _flash_steps(quick: bool) -> int:
    """``claims_flash.step_count``: it calls ``progress`` once per step; 1 if it will not run."""
    try:
        module = _claims_module("claims_flash")
        return max(1, int(module.step_count(quick)))
    except Exception:  # the part itself reports the error when it runs
        return 1


def cycle_part(ctx: Context, with_cycles: bool) -> dict[str, Any]:
    """Round-trip references and (``with_cycles``) every library's uncontended cycles."""
    from uncontended import cycle_reps  # noqa: PLC0415

    names = [*LIBRARIES, "redlease-ttl10"] if with_cycles else list(LIBRARIES)
    sessions = {name: open_session(name, ctx.url) for name in names}
    try:
        rtts, uncontended = cycle_reps(sessions, ctx.admin, ctx.plan, with_cycles, ctx.tick)
    finally:
        for session in sessions.values():
            session.close()
    return {"rtts": rtts, "uncontended": uncontended}


def handoff_part(ctx: Context) -> dict[str, Any]:
    """Every library at every worker count, ``handoff_reps`` times, order rotating per rep."""
    from contended import run_contended  # noqa: PLC0415

    plan = ctx.plan
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {}
    rtts: list[float] = []
    for rep in range(plan.handoff_reps):
        for workers in plan.worker_counts:
            for library in rotated(LIBRARIES, rep):
                ctx.label(f"handoff: {library}, {workers} workers, rep {rep + 1}")
                run = run_contended(ctx.url, library, workers, plan.handoff_s, f"{workers}w{rep}")
                runs.setdefault(library, {}).setdefault(str(workers), []).append(run)
                if run.get("idle_rtt_us"):
                    rtts.append(run["idle_rtt_us"])
                ctx.tick()
    return {"runs": runs, "rtts": rtts}


def renewal_part(ctx: Context) -> dict[str, Any]:
    """Each renewing library at each held-lease count, in a fresh process per run."""
    from renewal import RENEWING_LIBRARIES, run_renewal, skip_reason  # noqa: PLC0415

    plan = ctx.plan
    leases: dict[str, dict[str, dict[str, Any]]] = {}
    for count in plan.renew_counts:
        for library in RENEWING_LIBRARIES:
            ctx.label(f"renewal: {library}, {count:,} leases")
            reason = skip_reason(ctx.admin, library, count)
            if reason:
                figures: dict[str, Any] = {"skipped": reason}
            else:
                figures = run_renewal(ctx.url, library, count, plan.renew_ttl_s, plan.renew_hold_s)
            leases.setdefault(library, {})[str(count)] = figures
            ctx.tick()
    return {"leases": leases, "ttl_s": plan.renew_ttl_s, "hold_s": plan.renew_hold_s}


def async_part(ctx: Context) -> dict[str, Any]:
    from uncontended import async_reps  # noqa: PLC0415

    return async_reps(ctx.url, ctx.plan, ctx.tick)


def fair_part(ctx: Context) -> dict[str, Any]:
    from family import FAIR, PLAIN, fair_figures  # noqa: PLC0415

    return _family_pair(ctx, "fair", (FAIR, PLAIN), fair_figures)


def rw_part(ctx: Context) -> dict[str, Any]:
    from family import READ, WRITE, rw_figures  # noqa: PLC0415

    return _family_pair(ctx, "rw", (READ, WRITE), rw_figures)


def _family_pair(
    ctx: Context,
    part: str,
    sessions: tuple[str, str],
    figures: Callable[[dict[str, list[dict[str, Any]]], int], dict[str, Any]],
) -> dict[str, Any]:
    """Two redlease sessions under the same contention, alternating per rep (``family.py``)."""
    from family import contended_pair  # noqa: PLC0415

    plan = ctx.plan
    runs = contended_pair(
        ctx.url,
        sessions,
        plan.family_workers,
        plan.family_reps,
        plan.family_s,
        lambda text: ctx.label(f"{part}: {text}"),
        ctx.tick,
    )
    return {"extras": figures(runs, plan.family_workers)}


def semaphore_part(ctx: Context) -> dict[str, Any]:
    from family import semaphore_reps  # noqa: PLC0415

    return {"extras": semaphore_reps(ctx.url, ctx.admin, ctx.plan, ctx.tick)}


def redlock_part(ctx: Context) -> dict[str, Any]:
    from topologies import redlock_reps  # noqa: PLC0415

    return {"extras": redlock_reps(ctx.plan, ctx.label, ctx.tick)}


def cluster_part(ctx: Context) -> dict[str, Any]:
    from topologies import cluster_reps  # noqa: PLC0415

    return {"extras": cluster_reps(ctx.plan, ctx.label, ctx.tick)}


def footprint_part(ctx: Context) -> dict[str, Any]:
    """What a held lock keeps on the server, and what released names leave behind."""
    from footprint import measure_footprint  # noqa: PLC0415

    return {"extras": measure_footprint(ctx.url, ctx.admin, ctx.plan, ctx.label, ctx.tick)}


def flash_part(ctx: Context) -> dict[str, Any]:
    """The flash sale and its segments: ``claims_flash.measure`` (another module's)."""
    module = _claims_module("claims_flash")
    started = [False]

    def progress(text: str) -> None:
        if started[0]:
            ctx.tick()  # the previous step is done
        started[0] = True
        ctx.label(f"flash: {text}")

    result = module.measure(ctx.plan.quick, progress=progress, redis_url=ctx.url)
    ctx.tick()
    return _checked(result, "flash_sale", "claims_flash")


def coordination_part(ctx: Context) -> dict[str, Any]:
    """redlease against Redlock, ZooKeeper and etcd: ``coordination.measure``."""
    module = _claims_module("coordination")
    result = module.measure(
        ctx.plan.quick, progress=lambda text: ctx.label(f"coordination: {text}")
    )
    ctx.tick()
    return _checked(result, "coordination", "coordination")


def _claims_module(name: str) -> Any:
    import importlib  # noqa: PLC0415

    try:
        return importlib.import_module(name)
    except Exception as exc:  # any import failure: the part is skipped, the run goes on
        raise PartSkipped(f"bench/{name}.py did not import: {type(exc).__name__}: {exc}") from exc


def _checked(result: Any, key: str, module: str) -> dict[str, Any]:
    if not isinstance(result, dict) or not isinstance(result.get(key), dict):
        raise PartSkipped(f"{module}.measure() returned no {key!r} object")
    return result


RUNNERS: dict[str, Callable[[Context], dict[str, Any]]] = {
    "handoff": handoff_part,
    "renewal": renewal_part,
    "async": async_part,
    "fair": fair_part,
    "rw": rw_part,
    "semaphore": semaphore_part,
    "redlock": redlock_part,
    "cluster": cluster_part,
    "footprint": footprint_part,
    "flash": flash_part,
    "coordination": coordination_part,
}


def run_part(ctx: Context, part: str) -> dict[str, Any]:
    if part in ("cycle", "rtt"):
        return cycle_part(ctx, with_cycles=part == "cycle")
    return RUNNERS[part](ctx)
