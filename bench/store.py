"""The kept results, ``bench/results/latest.json``: the newest raw figures of every part.

Each run merges the parts it ran into the file, replacing those parts' earlier figures
and keeping the others, and docs/benchmarks.md is generated from the merged file. So a
partial run (``run.py handoff``) refreshes its own tables and plots without throwing
away the rest; the doc says when, and with which command, each part was measured. A part
that failed or was skipped in this run keeps its earlier figures if there are any
(otherwise the doc shows why it is missing).

Layout::

    {"format": 1,
     "runs": {RUN_ID: {date, command, quick, server, machine, versions, plan}},
     "parts": {PART: {"run": RUN_ID, "seconds": s, "steal_pct": p, "data": {...}}
                  or {"run": RUN_ID, "skipped": "why"}}}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FORMAT = 1
DEFAULT_PATH = Path(__file__).resolve().parent / "results" / "latest.json"


def load(path: Path) -> dict[str, Any]:
    """The kept results, or an empty store when the file is missing or of another format."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return empty()
    if not isinstance(stored, dict) or stored.get("format") != FORMAT:
        return empty()
    return stored


def empty() -> dict[str, Any]:
    return {"format": FORMAT, "runs": {}, "parts": {}}


def merge(
    stored: dict[str, Any], run_id: str, meta: dict[str, Any], records: dict[str, Any]
) -> dict[str, Any]:
    """``stored`` with this run's part records in; unreferenced runs dropped."""
    parts = dict(stored.get("parts", {}))
    for name, record in records.items():
        if "data" not in record and "data" in parts.get(name, {}):
            continue  # a failed or skipped part keeps its earlier figures
        parts[name] = {"run": run_id, **record}
    if "data" in parts.get("cycle", {}):
        parts.pop("rtt", None)  # the cycle part took the same references, and newer
    runs = dict(stored.get("runs", {}))
    runs[run_id] = meta
    used = {part["run"] for part in parts.values()}
    return {
        "format": FORMAT,
        "runs": {key: value for key, value in runs.items() if key in used},
        "parts": parts,
    }


def save(path: Path, stored: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(stored, indent=1, sort_keys=False) + "\n")
    temporary.replace(path)
