"""When a Redlock client tries a master's connection again, and what a round is told
meanwhile.

A failed opening leaves the master alone for a pause that doubles with each failure in a
row (:func:`~redlease.core.redlock.reconnect_pause`), counted from when the opening began:
an opening that failed rounds ago does not hold a master that is back (a restart) out of
the next round. A master whose last opening was *refused* (nothing listening: down, or
restarting) answers the next one at once, whether it is back or not, so a round waits for
that opening. While its pause runs, a round counts it as silent: it may be back by the
end of the pause.
"""

from __future__ import annotations

from redlease.compat import ConnectionErrors, TimeoutErrors
from redlease.core.redlock import reconnect_pause


class Reconnects:
    """The reconnection state of each target of a fan-out, by index."""

    def __init__(self, count: int) -> None:
        self._began = [0.0] * count
        self._quiet_until = [0.0] * count
        self._failures = [0] * count
        self._refused = [False] * count

    def may_try(self, index: int, now: float) -> bool:
        return now >= self._quiet_until[index]

    def began(self, index: int, now: float) -> None:
        self._began[index] = now

    def round_end(self, ends: float, unconnected: list[int], now: float) -> float:
        """When a round over targets of which ``unconnected`` have no connection stops
        waiting: at ``ends``, or once a target among them that refused, and is left alone
        for now, may be tried again (a round that lacks a majority without it then ends,
        and the next one has it: a master back from a restart is not kept out by a silent
        one for the whole round)."""
        back = [
            self._quiet_until[index]
            for index in unconnected
            if self._refused[index] and not self.may_try(index, now)
        ]
        return min([ends, *back])

    def answers_at_once(self, index: int) -> bool:
        """Whether the target's last opening was refused (its next one ends at once)."""
        return self._refused[index]

    def failed(self, index: int, error: BaseException) -> None:
        self._failures[index] += 1
        self._refused[index] = isinstance(error, ConnectionErrors)
        self._quiet_until[index] = self._began[index] + reconnect_pause(self._failures[index])

    def dropped(self, index: int, error: BaseException) -> None:
        """A target's connection failed: closed or reset by its side (a master killed, or
        restarting) answers the next opening at once, like a refusal."""
        if isinstance(error, ConnectionErrors):
            self._refused[index] = True

    def opened(self, index: int) -> None:
        self._failures[index] = 0
        self._refused[index] = False

    def stand_in(self) -> BaseException:
        """The reply for a target that has no connection in time for a round: as for a
        silent one (one that refused may be back by the end of its pause)."""
        return TimeoutErrors[0]("no connection to this server yet (it did not answer)")
