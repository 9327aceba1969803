"""Follow a worker's JSON-lines log while it runs (the harness's eyes on its workers)."""

from __future__ import annotations

import json
from contextlib import suppress
from pathlib import Path
from typing import Any


class LogTail:
    """Reads one worker log incrementally: every event, and whether a section is open."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.buffer = ""
        self.events: list[dict[str, Any]] = []
        self.in_section = False
        self.acquisitions = 0
        self.granted_at = 0.0

    def poll(self) -> list[dict[str, Any]]:
        """Read what the worker wrote since the last poll; returns the new events."""
        try:
            with self.path.open("r", encoding="utf-8") as stream:
                stream.seek(self.offset)
                chunk = stream.read()
                self.offset = stream.tell()
        except FileNotFoundError:
            return []
        lines = (self.buffer + chunk).split("\n")
        self.buffer = lines.pop()
        fresh: list[dict[str, Any]] = []
        for line in lines:
            with suppress(ValueError, KeyError, TypeError):
                event = json.loads(line)
                self._follow(str(event["ev"]), float(event["t"]))
                fresh.append(event)
        self.events += fresh
        return fresh

    def _follow(self, kind: str, at: float) -> None:
        if kind == "enter":
            self.in_section = True
        elif kind == "exit":
            self.in_section = False
        elif kind == "acq":
            self.acquisitions += 1
            self.granted_at = at

    def first(self, kind: str, since: float, **fields: Any) -> dict[str, Any] | None:
        """The first event of ``kind`` at or after ``since`` whose fields match."""
        for event in self.events:
            matches = all(event.get(name) == value for name, value in fields.items())
            if event.get("ev") == kind and event["t"] >= since and matches:
                return event
        return None

    def last(self, kinds: tuple[str, ...], before: float, **fields: Any) -> dict[str, Any] | None:
        """The last event of one of ``kinds`` before ``before`` whose fields match."""
        found = None
        for event in self.events:
            if event["t"] >= before:
                break
            matches = all(event.get(name) == value for name, value in fields.items())
            if event.get("ev") in kinds and matches:
                found = event
        return found
