"""The soak's checkers: pure functions over the workers' logs and the final counters.

Kept apart from the runner (:mod:`redlease.chaos.soak`) so that they can be read, and
tested, without starting a process: per-name overlaps split by the fault windows, fence
order, lost updates, acquisition rates, worker resource growth, leftover keys by kind,
and the list of failures the soak reports.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from redlease.chaos.checks import Section
from redlease.chaos.soak_settings import SoakSettings
from redlease.chaos.soak_worker import SoakSection, WorkerLog

S = TypeVar("S", bound=Section)


@dataclass
class Injection:
    kind: str
    started: float
    ended: float
    target: str
    window_end: float = 0.0
    overlaps: int = 0
    rejected: int = 0


def sections_by_name(logs: list[WorkerLog], names: int) -> dict[int, list[SoakSection]]:
    """Every logged critical section, per lock name, in the order of their grants."""
    by_name: dict[int, list[SoakSection]] = {index: [] for index in range(names)}
    for log in logs:
        for section in log.sections:
            by_name.setdefault(section.name, []).append(section)
    for sections in by_name.values():
        sections.sort(key=lambda section: section.acquired)
    return by_name


def fence_order(sections: list[SoakSection]) -> tuple[int, int]:
    """Fence regressions and repeated values among one name's accepted fenced writes.

    Sorted by the counter value each wrote, accepted writes are in the order the data
    server applied them (no clocks involved): their fences must only grow, and no value
    may be written twice (that would be a lost update the log can see).
    """
    accepted = sorted((s for s in sections if s.fenced == "accepted"), key=lambda s: s.written)
    regressions = duplicates = 0
    highest, previous = -1, None
    for section in accepted:
        regressions += section.fence < highest
        duplicates += section.written == previous
        highest, previous = max(highest, section.fence), section.written
    return regressions, duplicates


OVERLAP_KEYS = (
    "outside", "inside", "outside_all", "inside_all", "outside_after_deadline", "live_lease",
)  # fmt: skip


def split_overlaps(
    by_name: dict[int, list[SoakSection]], injections: list[Injection]
) -> dict[str, int]:
    """Overlaps per name, inside or outside the fault windows.

    ``_all`` counts every pair, the plain keys only pairs whose fenced writes were both
    accepted. ``outside_after_deadline``: those of ``outside`` where the newer holder got
    the lock after the older one's lease deadline, so the older lease may simply have run
    out under a holder the machine paused. ``live_lease``: pairs (outside PEXPIRE windows)
    where the newer holder got the lock *before* that deadline: two holders inside their
    leases, which the lock must never allow. Each injection counts the pairs its window meets.
    """
    windows = [(injection.started, injection.window_end) for injection in injections]
    expiries = [w for i, w in zip(injections, windows, strict=True) if i.kind == "pexpire"]
    counts = dict.fromkeys(OVERLAP_KEYS, 0)
    for sections in by_name.values():
        for earlier, later in overlap_pairs(sections, rank=lambda s: s.deadline):
            inside = _touches(windows, earlier, later)
            accepted = earlier.fenced == later.fenced == "accepted"
            lapsed = later.acquired >= earlier.deadline
            where = "inside" if inside else "outside"
            counts[f"{where}_all"] += 1
            counts[where] += accepted
            counts["outside_after_deadline"] += accepted and lapsed and not inside
            counts["live_lease"] += not lapsed and not _touches(expiries, earlier, later)
            for injection, window in zip(injections, windows, strict=True):
                injection.overlaps += _touches([window], earlier, later)
    return counts


def overruns(by_name: dict[int, list[SoakSection]], injections: list[Injection]) -> dict[str, Any]:
    """Sections outside every fault window that were still running at their lease's
    deadline: pauses the machine made (scheduling, swapping), not the soak."""
    windows = [(injection.started, injection.window_end) for injection in injections]
    late = [
        (s.ended or 0.0) - s.deadline
        for sections in by_name.values()
        for s in sections
        if (s.ended or 0.0) > s.deadline
        and not any(start <= (s.ended or 0.0) and end >= s.acquired for start, end in windows)
    ]
    return {"count": len(late), "longest_s": round(max(late), 2) if late else None}


def overlap_pairs(
    sections: Sequence[S], rank: Callable[[S], float] = lambda s: s.ended or 0.0
) -> Iterator[tuple[S, S]]:
    """For each section (sorted by grant) that starts while a section of another worker is
    still running, one pair: with the running one that ranks highest (by default the one
    that ends last; the soak ranks by lease deadline, so that a pair inside both leases is
    never hidden behind a paused holder whose lease ran out long ago).

    The lock keeps the running sections few (one, but for faults), so this stays linear.
    """
    running: list[S] = []
    for section in sections:
        running = [other for other in running if (other.ended or 0.0) > section.acquired]
        others = [other for other in running if other.worker != section.worker]
        if others:
            yield max(others, key=rank), section
        running.append(section)


def _touches(windows: list[tuple[float, float]], earlier: Section, later: Section) -> bool:
    """Whether a fault window meets the time from the older grant to the newer one."""
    return any(start <= later.acquired and end >= earlier.acquired for start, end in windows)


def holder_label(names: list[str], name: int | None) -> str:
    return " (idle: no worker held a lock)" if name is None else f" holding {names[name]}"


def key_kind(key: str, prefix: str) -> str:
    """``lease``, ``fence``, ``queue``, ``latch`` or another kind of lock key."""
    rest = key[len(prefix) + 1 :]
    closing = rest.find("}")
    if not rest.startswith("{") or closing < 0:
        return "other"
    suffix = rest[closing + 1 :]
    if not suffix:
        return "lease"
    kind = suffix.split(":")[1] if suffix.startswith(":") else "other"
    return kind if kind in ("fence", "queue", "latch") else f"other:{kind}"


def acquisitions(logs: list[WorkerLog], seconds: float) -> dict[str, Any]:
    granted = sum(len(log.sections) for log in logs)
    attempted = sum(log.attempts for log in logs)
    errors = Counter[str]()
    releases = Counter[str]()
    for log in logs:
        errors.update(log.errors)
        releases.update(log.releases)
    return {
        "attempted": attempted,
        "granted": granted,
        "timeouts": sum(log.timeouts for log in logs),
        "errors": dict(errors),
        "releases_expired": releases["x"],
        "per_second": round(attempted / seconds, 1) if seconds > 0 else None,
        "wait_ms": _percentiles([s.acquired - s.requested for log in logs for s in log.sections]),
    }


def _percentiles(seconds: list[float]) -> dict[str, float | None]:
    """Median, 99th percentile and maximum, in milliseconds."""
    if not seconds:
        return {"p50": None, "p99": None, "max": None}
    ordered = sorted(seconds)
    last = len(ordered) - 1
    p50, p99 = (ordered[min(last, int(share * len(ordered)))] for share in (0.5, 0.99))
    return {
        "p50": round(1000 * p50, 1),
        "p99": round(1000 * p99, 1),
        "max": round(1000 * ordered[-1], 1),
    }


def worker_resources(logs: list[WorkerLog]) -> dict[str, Any]:
    """RSS and open fds after warm-up and at the end, over workers that logged both."""
    pairs = [(log.warm, log.end) for log in logs if log.warm is not None and log.end is not None]
    result: dict[str, Any] = {"sampled": len(pairs)}
    for position, what in ((0, "rss_kib"), (1, "fds")):
        starts = [start[position] for start, _ in pairs]
        ends = [end[position] for _, end in pairs]
        growth = [end - start for start, end in zip(starts, ends, strict=True)]
        result[what] = _spread(starts, ends, growth)
    return result


def _spread(starts: list[int], ends: list[int], growth: list[int]) -> dict[str, float | None]:
    if not growth:
        return {"start_median": None, "end_median": None, "growth_median": None, "growth_max": None}
    return {
        "start_median": statistics.median(starts),
        "end_median": statistics.median(ends),
        "growth_median": statistics.median(growth),
        "growth_max": max(growth),
    }


def failures(report: dict[str, Any], settings: SoakSettings) -> list[str]:
    """Every check that did not hold, in words."""
    found: list[str] = []
    if not report["completed"]:
        found.append("not every worker finished its acquisitions before the deadline")
    found.extend(f"crash: {crash}" for crash in report["crashes"])
    overlaps = report["overlaps"]
    checks = {
        "overlaps outside fault windows, not after the older lease's deadline": (
            overlaps["outside"] - overlaps["outside_after_deadline"]
        ),
        "overlaps with the older lease still live": overlaps["live_lease"],
        "fenced lost updates": report["fenced_lost_updates"],
        "fence regressions": report["fence_regressions"],
        "fenced values written twice": report["duplicate_fenced_values"],
        "fence records behind an accepted fence": report["fence_records_behind"],
    }
    keys = report["leftover_keys"]
    for kind in ("lease", "queue", "latch_after_wait", "other"):
        checks[f"leftover {kind} keys"] = keys[kind]
    found.extend(f"{what}: {value}" for what, value in checks.items() if value)
    rss, fds = report["workers"]["rss_kib"]["growth_max"], report["workers"]["fds"]["growth_max"]
    if rss is None or rss > settings.max_rss_growth_kib:
        found.append(f"worker RSS growth {rss} KiB (limit {settings.max_rss_growth_kib})")
    if fds is None or fds > settings.max_fd_growth:
        found.append(f"worker fd growth {fds} (limit {settings.max_fd_growth})")
    clients = report["lock_server"]["clients_at_end"]
    if clients:  # None on a shared server, where others may be connected
        found.append(f"{clients} client connections left open on the lock server")
    return found
