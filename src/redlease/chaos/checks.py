"""Checkers over the workers' logs: the Jepsen-style verdicts of one scenario run.

* ``overlaps``: critical sections (lock granted → both writes done) of different workers
  that overlap in time, among sections whose fenced write was accepted; ``overlaps_all``
  counts every section. A section overlaps when it starts before an earlier-starting
  section of another worker has ended.
* ``lost_updates``: sections whose plain ``SET`` went through, minus the plain counter's
  final value (it starts at 0). ``fenced_lost_updates``: the same for accepted fenced
  writes and the fenced counter; the guard must keep it at 0.
* ``rejected``: fenced claims or writes the guard refused.
* ``fence_regressions``: accepted fenced writes whose token is lower than one accepted
  before it (by write time); must be 0.
* ``recover_ms``: per injection, from the fault's end to the next granted acquisition.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Section:
    worker: str
    seq: int
    acquired: float
    fence: int
    ended: float | None = None
    plain: str | None = None
    fenced: str | None = None
    fenced_at: float | None = None

    @property
    def finished(self) -> bool:
        return self.ended is not None


@dataclass
class History:
    sections: list[Section] = field(default_factory=list)
    errors: int = 0


def read_logs(paths: list[Path]) -> History:
    """Merge the events of every worker log into critical sections."""
    history = History()
    for path in paths:
        if not path.exists():
            continue
        open_sections: dict[int, Section] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                event: dict[str, Any] = json.loads(line)
            except ValueError:  # a worker killed mid-line
                continue
            kind, seq = event["ev"], int(event["seq"])
            if kind == "error":
                history.errors += 1
            elif kind == "acq":
                section = Section(str(event["w"]), seq, float(event["t"]), int(event["fence"]))
                open_sections[seq] = section
                history.sections.append(section)
            elif seq in open_sections:
                section = open_sections[seq]
                if kind == "plain":
                    section.plain = str(event["result"])
                elif kind == "fenced":
                    section.fenced = str(event["result"])
                    section.fenced_at = float(event["t"])
                elif kind == "exit":
                    section.ended = float(event["t"])
    history.sections.sort(key=lambda section: section.acquired)
    return history


def count_overlaps(sections: list[Section]) -> int:
    """Sections that start before an earlier-starting one of another worker has ended.

    A section cut short by ``kill -9`` never ends and is left out: it wrote nothing.
    """
    finished = sorted((s for s in sections if s.finished), key=lambda s: s.acquired)
    count = 0
    latest: dict[str, float] = {}  # per worker, the latest end seen so far
    for section in finished:
        assert section.ended is not None
        others = (end for worker, end in latest.items() if worker != section.worker)
        if any(end > section.acquired for end in others):
            count += 1
        latest[section.worker] = max(latest.get(section.worker, 0.0), section.ended)
    return count


def fence_regressions(sections: list[Section]) -> int:
    accepted = sorted(
        (s for s in sections if s.fenced == "accepted" and s.fenced_at is not None),
        key=lambda s: s.fenced_at or 0.0,
    )
    regressions, highest = 0, -1
    for section in accepted:
        if section.fence < highest:
            regressions += 1
        highest = max(highest, section.fence)
    return regressions


def recover_ms(sections: list[Section], fault_ends: list[float]) -> list[float | None]:
    """Per fault, ms from its end to the first acquisition granted after it."""
    starts = sorted(section.acquired for section in sections)
    result: list[float | None] = []
    for end in fault_ends:
        later = [start for start in starts if start >= end]
        result.append(round((later[0] - end) * 1000, 1) if later else None)
    return result


def verdict(
    history: History, plain_final: int, fenced_final: int, fault_ends: list[float]
) -> dict[str, Any]:
    sections = history.sections
    accepted = [s for s in sections if s.fenced == "accepted"]
    recoveries = recover_ms(sections, fault_ends)
    measured = [value for value in recoveries if value is not None]
    return {
        "sections": len(sections),
        "overlaps": count_overlaps(accepted),
        "overlaps_all": count_overlaps(sections),
        "lost_updates": sum(1 for s in sections if s.plain == "wrote") - plain_final,
        "fenced_lost_updates": len(accepted) - fenced_final,
        "accepted": len(accepted),
        "rejected": sum(1 for s in sections if s.fenced == "rejected"),
        "ambiguous": sum(1 for s in sections if "error" in (s.plain, s.fenced)),
        "unfinished": sum(1 for s in sections if not s.finished),
        "fence_regressions": fence_regressions(sections),
        "recover_ms": max(measured) if measured else None,
        "recover_ms_each": recoveries,
        "worker_errors": history.errors,
        "plain_counter": plain_final,
        "fenced_counter": fenced_final,
    }
