"""One script on several independent servers in one round trip, from one thread or task.

A Redlock round sends the same script to every master and counts the answers. Here it is
sent to every master first and the answers are read as they come, so a round costs about
one round trip, not one per master, with no thread pool. Each master gets a connection of
its own, kept between rounds (the pool's bookkeeping per command costs more than the send
itself), and rounds take turns on them.

A round that enough answers settled (``decided``: a majority granted, say) ends on them;
the other targets' replies are read, and dropped, before their next ones, and a target
whose reply is overdue is waited for by the next round (see ``read_replies``). Otherwise a
master that does not answer holds a round up only until enough others did and the
stragglers had their time (see :func:`~redlease.core.redlock.straggler_deadline`): as long
again as the majority took, twice what each master usually takes (learned from its answers,
so a far but healthy master keeps counting), never past the round's time. A silent
master's connection is dropped; a new one is opened in the background, one at a time, and
the master counts as silent until it is open.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from contextlib import suppress
from typing import Any

from redlease._packing import pack, packing_of
from redlease.aio._fanout_io import (
    NOTHING_OWED,
    abandon,
    abandon_opening,
    await_openings,
    forgive,
    is_open,
    opened,
    owing,
    pay,
    read_replies,
    start_opening,
)
from redlease.aio._flavor import Guard, current_loop, send_now
from redlease.aio.scripts import Scripts
from redlease.compat import ConnectionErrors, NoScriptErrors
from redlease.core.ops import RunScript
from redlease.core.reconnects import Reconnects
from redlease.core.redlock import NOT_AWAITED, STRAGGLER_GRACE_S, counted, learned

CONNECT_ROUND_TRIPS = 3
"""Opening a connection takes about this many round trips (TCP, then HELLO and SETINFO)."""
FIRST_CONTACT_S = 0.25
"""How long a round waits for the first connection to a master, once enough others
connected (at most a tenth of the round's time): a far master joins from the first round,
and a silent one costs this once."""


class AsyncFanout:
    def __init__(self, targets: Sequence[Scripts]) -> None:
        self._targets = list(targets)
        count = len(self._targets)
        self._connections: list[Any] = [None] * count
        self._openings: list[Any] = [None] * count
        self._debts: list[Any] = [NOTHING_OWED] * count
        """What each connection still owes of earlier rounds (see ``read_replies``)."""
        self._due: list[deque[float]] = [deque() for _ in range(count)]
        """When each reply a connection owes was due, oldest first: a master later than
        that with one is waited for (or found silent) before a round may end without it."""
        self._usual_s: list[float | None] = [None] * count
        self._styles: list[tuple[object, ...]] = [()] * count
        """How each connection packs a command (see :func:`~redlease._packing.packing_of`)."""
        self._reconnects = Reconnects(count)
        self._tried = [False] * count
        """Whether a connection to each target was ever tried (see FIRST_CONTACT_S)."""
        self._loaded: list[set[str] | None] = [None] * count
        """The scripts a target is known to hold, once it answered that it lacks one (else
        ``None``): each other script is sent to it as source, once."""
        self._clustered = {index for index, target in enumerate(self._targets) if target.cluster}
        """The targets that are clusters: a round sends them the script by the usual path."""
        self._guard = Guard()
        self._loop: Any = None

    async def run(
        self,
        op: RunScript,
        only: Sequence[int] | None = None,
        *,
        enough: int,
        within: float,
        decided: Callable[[object], bool] | None = None,
    ) -> list[Any]:
        """The reply of every target (or those at the indexes ``only``), in order; a target
        that failed, or did not answer in time, has the exception instead.

        Nothing waits past ``within`` seconds, nor much past the moment ``enough`` targets
        answered, connecting included; and nothing waits once ``enough`` replies passed
        ``decided``: a target not heard from by then has
        :data:`~redlease.core.redlock.NOT_AWAITED` (its reply is dropped when it comes).

        A kept connection that the server had closed (an idle timeout) is replaced and the
        script sent again on the new one, once: the scripts answer a repeat as they
        answered the first.
        """
        indexes = list(range(len(self._targets))) if only is None else list(only)
        async with self._guard:  # the round's time starts once it has the connections
            ends = time.monotonic() + within
            self._follow_loop()
            try:
                replies, stale = await self._round(op, indexes, enough, ends, decided)
                if stale:
                    left = enough - counted(replies, decided)
                    again, _ = await self._round(op, stale, max(left, 0), ends, decided)
                    for index, reply in zip(stale, again, strict=True):
                        replies[indexes.index(index)] = reply
            except BaseException:  # cut short (a cancel, Ctrl-C, a time limit's signal)
                for index in indexes:  # what they still owe is unknown: never read it
                    self._abandon(index)
                raise
            return replies

    async def close(self) -> None:
        async with self._guard:
            for index in range(len(self._connections)):
                await self._drop(index)
                opening, self._openings[index] = self._openings[index], None
                if opening is not None:
                    abandon_opening(opening)

    def _follow_loop(self) -> None:
        """Connections of an event loop that is over are dropped (not closed: they belong
        to that loop)."""
        loop = current_loop()
        if loop is not self._loop:
            self._loop = loop
            self._connections = [None] * len(self._targets)
            self._openings = [None] * len(self._targets)
            self._debts = [NOTHING_OWED] * len(self._targets)
            self._due = [deque() for _ in self._targets]

    async def _round(
        self,
        op: RunScript,
        indexes: list[int],
        enough: int,
        ends: float,
        decided: Callable[[object], bool] | None,
    ) -> tuple[list[Any], list[int]]:
        """The replies, and the targets whose kept connection turned out closed."""
        replies: list[Any] = [None] * len(indexes)
        for at, index in enumerate(indexes):
            if index in self._clustered:  # it routes by itself
                replies[at] = await _alone(self._targets[index], op)
        kept = [self._connections[index] is not None for index in indexes]
        unconnected = [index for index in indexes if self._connections[index] is None]
        for index in unconnected:
            if isinstance(self._opened(index), BaseException):  # an earlier round's try
                self._take_opened(index)
        ends = self._reconnects.round_end(ends, unconnected, time.monotonic())
        await self._connect(indexes, replies, enough, ends)
        command = ("EVALSHA", op.script.sha, len(op.keys), *op.keys, *op.args)
        source = op.script.source
        await self._exchange(
            command, indexes, replies, enough, ends, decided=decided, source=source
        )
        failed = [at for at, reply in enumerate(replies) if isinstance(reply, Exception)]
        if not failed:
            return replies, []
        unscripted = [at for at in failed if isinstance(replies[at], NoScriptErrors)]
        if unscripted:  # a new or restarted master: the source, on the same connections
            for at in unscripted:
                replies[at] = None
            left = max(enough - counted(replies, decided), 0)
            for at in unscripted:  # it may lack the other scripts too: each goes as source
                self._loaded[indexes[at]] = {op.script.sha}
            command = ("EVAL", source, *command[2:])
            await self._exchange(
                command, indexes, replies, left, ends, decided=decided, source=source
            )
        for at, index in enumerate(indexes):
            if isinstance(replies[at], Exception):
                self._reconnects.dropped(index, replies[at])
                await self._drop(index)
        stale = [
            index
            for at, index in enumerate(indexes)
            if kept[at] and isinstance(replies[at], ConnectionErrors)
        ]
        return replies, stale

    async def _connect(
        self, indexes: list[int], replies: list[Any], enough: int, ends: float
    ) -> None:
        """Connections for the targets at ``indexes`` that lack one, opened at once in the
        background; a target whose connection is not open in time gets an error as its
        reply (its opening goes on, for a later round). When enough others are connected,
        only a first contact is waited for."""
        now = time.monotonic()
        missing = [
            at
            for at, index in enumerate(indexes)
            if replies[at] is None and self._connections[index] is None
        ]
        if not missing:
            return
        patience = 0.0
        for at in missing:
            index = indexes[at]
            if self._openings[index] is None and self._reconnects.may_try(index, now):
                client: Any = self._targets[index].client
                self._openings[index] = start_opening(client.connection_pool, ends - now)
                self._reconnects.began(index, now)
                if not self._tried[index]:  # a first contact: how far is it?
                    self._tried[index] = True
                    patience = min(FIRST_CONTACT_S, (ends - now) / 10)
        opening = [indexes[at] for at in missing if self._openings[indexes[at]] is not None]
        ready = sum(1 for reply in replies if reply is None) - len(missing)
        prompt = any(self._reconnects.answers_at_once(index) for index in opening)
        if opening and (ready < enough or patience or prompt):  # else from a later round
            await await_openings(
                [self._openings[index] for index in opening],
                max(enough - ready, 0),
                ends - now,
                max(patience, CONNECT_ROUND_TRIPS * self._slowest(opening)),
            )
        for at in missing:
            replies[at] = self._take_opened(indexes[at])

    def _opened(self, index: int) -> Any:
        opening = self._openings[index]
        return None if opening is None else opened(opening)

    def _take_opened(self, index: int) -> BaseException | None:
        """``None`` once the target's new connection is in place; else the reply to give."""
        outcome = self._opened(index)
        if outcome is None:
            return self._reconnects.stand_in()
        self._openings[index] = None
        if isinstance(outcome, BaseException):
            self._reconnects.failed(index, outcome)
            return outcome
        self._reconnects.opened(index)
        self._connections[index], seconds = outcome
        self._styles[index] = packing_of(self._connections[index])
        self._usual_s[index] = learned(self._usual_s[index], seconds / CONNECT_ROUND_TRIPS)
        return None

    def _slowest(self, indexes: list[int]) -> float:
        """What the slowest of these targets usually takes to answer (0 when unknown)."""
        return max([self._usual_s[index] or 0.0 for index in indexes], default=0.0)

    async def _exchange(
        self,
        command: tuple[object, ...],
        indexes: list[int],
        replies: list[Any],
        enough: int,
        ends: float,
        *,
        decided: Callable[[object], bool] | None,
        source: str,
    ) -> None:
        """``command`` to the targets whose reply is still ``None``, then their replies read
        as they come, until ``enough`` answered and the stragglers had their time, or
        ``enough`` passed ``decided``, or ``ends``; each reply (or the error standing for
        it) goes in ``replies``."""
        packed: dict[tuple[object, ...], Any] = {}
        reading = []
        started = time.monotonic()
        erred = self._pay_debts(indexes, replies)
        for at, reply in enumerate(replies):
            if reply is None:
                replies[at] = error = await self._send(indexes[at], command, source, packed)
                if error is None:
                    reading.append(at)
        connections = [self._connections[indexes[at]] for at in reading]
        within = max(ends - time.monotonic(), STRAGGLER_GRACE_S)  # for replies under way
        patience = 2 * self._slowest([indexes[at] for at in reading])
        debts = [self._debts[indexes[at]] for at in reading]
        behind = {  # overdue, or answered an error: their answer now is worth the wait
            position
            for position, at in enumerate(reading)
            if ((due := self._due[indexes[at]]) and due[0] <= started) or indexes[at] in erred
        }
        answers, took, debts = await read_replies(
            connections,
            debts,
            min(enough, len(reading)),
            within,
            patience,
            decided=decided,
            behind=behind,
        )
        now = time.monotonic()
        for at, answer, seconds, debt in zip(reading, answers, took, debts, strict=True):
            index = indexes[at]
            if answer is NOT_AWAITED:
                allowance = max(STRAGGLER_GRACE_S, now - started, 2 * (self._usual_s[index] or 0))
                self._due[index].append(now + allowance)
            if debt or self._debts[index]:
                self._owe(index, debt)
            if seconds is not None and not isinstance(answer, ConnectionErrors):
                self._usual_s[index] = learned(self._usual_s[index], seconds)
            replies[at] = answer

    def _pay_debts(self, indexes: list[int], replies: list[Any]) -> set[int]:
        """What the targets about to be sent to still owe, less the replies already there
        (dropped); a target whose connection broke reading them gets the error as its
        reply. A target that had answered that it lacks a script is sent each script's
        source once more; the targets that had answered another error are returned."""
        owing_at = [at for at, reply in enumerate(replies) if reply is None]
        owing_at = [at for at in owing_at if self._debts[indexes[at]]]
        if not owing_at:
            return set()
        left, erred = pay(
            [self._connections[indexes[at]] for at in owing_at],
            [self._debts[indexes[at]] for at in owing_at],
        )
        for at, debt in zip(owing_at, left, strict=True):
            if isinstance(debt, BaseException):
                replies[at] = debt
            self._owe(indexes[at], NOTHING_OWED if isinstance(debt, BaseException) else debt)
        unheard = set()
        for position, error in erred.items():
            index = indexes[owing_at[position]]
            if isinstance(error, NoScriptErrors):
                self._loaded[index] = set()
            else:
                unheard.add(index)
        return unheard

    def _owe(self, index: int, debt: Any) -> None:
        self._debts[index] = debt
        due = self._due[index]
        while len(due) > owing(debt):
            due.popleft()  # the oldest were paid first

    async def _send(
        self,
        index: int,
        command: tuple[object, ...],
        source: str,
        packed: dict[tuple[object, ...], Any],
    ) -> Any:
        """``None`` once sent on the target's connection; otherwise the error.

        Every master gets the same command: it is packed once per round (``packed``, by how
        a connection packs), since packing costs about as much as the send. No health check
        first: its PING would be answered after any reply the connection still owes, and
        the round itself finds a broken connection (and replaces one the server closed).
        """
        try:
            connection = self._connections[index]
            if not is_open(connection):
                raise ConnectionErrors[0]("the connection was closed")
            command = self._unless_unloaded(index, command, source)
            style = (self._styles[index], command[0])
            bytes_ = packed.get(style)
            if bytes_ is None:
                bytes_ = packed[style] = pack(connection, command)
            await send_now(connection, bytes_, check_health=False)
        except Exception as exc:
            await self._drop(index)
            return exc
        return None

    def _unless_unloaded(
        self, index: int, command: tuple[object, ...], source: str
    ) -> tuple[object, ...]:
        """``command``, or its script's ``source`` (EVAL) for a target that lacks it."""
        loaded = self._loaded[index]
        if loaded is None or command[0] != "EVALSHA" or command[1] in loaded:
            return command
        loaded.add(str(command[1]))
        return ("EVAL", source, *command[2:])

    async def _drop(self, index: int) -> None:
        connection = self._take(index)
        if connection is not None:
            with suppress(Exception):  # a broken connection is dropped anyway
                await connection.disconnect()

    def _abandon(self, index: int) -> None:
        """Drop the target's connection without waiting for it to close."""
        connection = self._take(index)
        if connection is not None:
            abandon(connection)

    def _take(self, index: int) -> Any:
        """The target's connection, no longer the target's (nor what it owed)."""
        forgive(self._debts[index])
        self._owe(index, NOTHING_OWED)
        connection, self._connections[index] = self._connections[index], None
        return connection


async def _alone(scripts: Scripts, op: RunScript) -> Any:
    """The script on one server by the usual path (it loads a script the server lacks)."""
    try:
        return await scripts.run(op)
    except Exception as exc:
        return exc
