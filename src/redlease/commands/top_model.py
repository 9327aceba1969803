"""What ``redlease top`` makes of successive readings: rates, lost leases, the sort order.

Pure bookkeeping over :class:`~redlease.commands.state.LockState` readings and the local
monotonic clock, so it is tested without a terminal. Every figure is derived from what a
reading can see, and the limits that follow are part of the contract (docs/cli.md):

* ``ACQ/S``: growth of the name's fence counter per second between the last two full
  readings. Every grant draws one token (lock, fair lock, writer, reader, permit, also a
  hand-off), so this counts grants; a latch has no fence and shows ``-``.
* ``LOST``: leases that ran out while held, since ``top`` started: a holder's token that
  a reading showed in its last moments (see :func:`last_moments`) and that the next
  reading no longer showed. A healthy holder renews at a third of its TTL and releases
  long before the end, so it is never seen there. Not counted: a lease deleted while it
  had time left (``release --force``, ``FLUSHALL``, a failover that lost the key), and a
  lease whose last moments fell between two readings that came late. A lease released
  within its very last moments is counted, although its holder got ``RELEASED``.
* ``WAITERS``: entries of the waiter queue (a waiter that gave up stays until the lock
  would reach it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from redlease.commands.state import LockState

__all__ = ["SORTS", "Row", "Tracker", "last_moments", "next_sort"]

LAST_MOMENTS_S = 0.2
"""A lease with this little TTL left (or a quarter of the longest TTL seen, if less) is
in its last moments: no healthy holder lets it get there."""
CHECK_LEAD = 0.5
"""A targeted check aims at this fraction of the last moments before the expiry."""
SORTS = ("name", "contention", "rate", "lost")


def next_sort(sort: str) -> str:
    """The order the ``s`` key switches to after ``sort``."""
    return SORTS[(SORTS.index(sort) + 1) % len(SORTS)]


def last_moments(longest_ttl_s: float) -> float:
    """How little TTL left counts as a lease's last moments, for a lease seen this long."""
    return min(LAST_MOMENTS_S, longest_ttl_s / 4)


@dataclass(frozen=True)
class Row:
    """One line of the view: a name as last read, with what ``top`` worked out about it."""

    name: str
    kind: str
    holder: str
    fence: int | None
    ttl_s: float | None
    waiters: int
    rate: float | None
    """Acquisitions per second over the last interval (None until two readings)."""
    lost: int
    held: bool


@dataclass
class _Token:
    longest_ttl_s: float
    expires_at: float
    dying: bool


@dataclass
class _Name:
    state: LockState | None = None
    fence: int | None = None
    fence_at: float = 0.0
    rate: float | None = None
    lost: int = 0
    tokens: dict[str, _Token] = field(default_factory=dict)


class Tracker:
    """Readings in, rows out: one per name seen, kept while it is held or has lost leases."""

    def __init__(self) -> None:
        self._names: dict[str, _Name] = {}
        self.readings = 0

    def record(self, states: Iterable[LockState], at: float, *, complete: bool) -> None:
        """Take a reading made at local time ``at``.

        ``complete``: a full scan, so a name it did not find has no keys left (its holder's
        token vanished, and its fence counter is gone too). A targeted check only reads the
        names it names.
        """
        found = {state.name: state for state in states}
        names = set(found) | (set(self._names) if complete else set())
        for name in names:
            entry = self._names.setdefault(name, _Name())
            state = found.get(name)
            self._note_tokens(entry, state, at)
            if complete:
                self._note_fence(entry, state, at)
            entry.state = state
            if state is None and not entry.lost:
                del self._names[name]
        if complete:
            self.readings += 1

    def checks_due(self, now: float) -> list[str]:
        """Names to read now: a held token is about to enter its last moments unseen."""
        return sorted(name for name, entry in self._names.items() if self._due(entry) <= now)

    def next_check(self) -> float | None:
        """When :meth:`checks_due` will next name something (None: nothing to watch)."""
        times = [self._due(entry) for entry in self._names.values()]
        finite = [time for time in times if time != float("inf")]
        return min(finite) if finite else None

    def rows(self, sort: str) -> list[Row]:
        rows = [self._row(name, entry) for name, entry in self._names.items()]
        if sort == "contention":
            rows.sort(key=lambda row: (-row.waiters, -(row.rate or 0.0), -row.lost, row.name))
        elif sort == "rate":
            rows.sort(key=lambda row: (-(row.rate or 0.0), row.name))
        elif sort == "lost":
            rows.sort(key=lambda row: (-row.lost, row.name))
        else:
            rows.sort(key=lambda row: row.name)
        return rows

    @staticmethod
    def _due(entry: _Name) -> float:
        due = float("inf")
        for token in entry.tokens.values():
            if not token.dying:
                lead = last_moments(token.longest_ttl_s) * CHECK_LEAD
                due = min(due, token.expires_at - lead)
        return due

    @staticmethod
    def _note_tokens(entry: _Name, state: LockState | None, at: float) -> None:
        """Count the tokens gone after a sighting in their last moments; remember the rest."""
        now_held = {
            holder.token: holder.ttl_s
            for holder in (state.holders if state is not None else [])
            if holder.ttl_s is not None
        }
        for token, seen in entry.tokens.items():
            if seen.dying and token not in now_held:
                entry.lost += 1
        tokens: dict[str, _Token] = {}
        for token, ttl_s in now_held.items():
            previous = entry.tokens.get(token)
            longest = max(ttl_s, previous.longest_ttl_s if previous else 0.0)
            tokens[token] = _Token(longest, at + ttl_s, ttl_s <= last_moments(longest))
        entry.tokens = tokens

    @staticmethod
    def _note_fence(entry: _Name, state: LockState | None, at: float) -> None:
        fence = state.fence if state is not None else None
        if fence is not None and entry.fence is not None and at > entry.fence_at:
            entry.rate = max(fence - entry.fence, 0) / (at - entry.fence_at)
        else:
            entry.rate = None
        entry.fence, entry.fence_at = fence, at

    @staticmethod
    def _row(name: str, entry: _Name) -> Row:
        state = entry.state
        if state is None:
            return Row(name, "-", "(gone)", entry.fence, None, 0, entry.rate, entry.lost, False)
        holders = state.holders
        if holders:
            holder = holders[0].describe()
            if len(holders) > 1:
                holder += f" (+{len(holders) - 1} more)"
            ttl_s = holders[0].ttl_s
        elif state.latch_count is not None:
            holder, ttl_s = f"count {state.latch_count}", state.latch_ttl_s
        else:
            holder, ttl_s = "-", None
        kind = "/".join(state.kinds)
        return Row(
            name,
            kind,
            holder,
            state.fence,
            ttl_s,
            state.waiters,
            entry.rate,
            entry.lost,
            state.held,
        )
