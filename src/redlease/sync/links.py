# Generated from redlease/aio/links.py by tools/unasync.py; edit that file instead.
"""One pub/sub connection of the notifier (a link to one node), and what it does alone:
read for a waiter that reads for itself, and subscribe its channels again on a new
connection."""

from __future__ import annotations

import logging
from collections.abc import Callable
from itertools import count
from typing import Any

from redis.backoff import NoBackoff

from redlease.compat import ResponseErrors
from redlease.core.protocol import NETWORK_ERRORS, Clock
from redlease.core.subscriptions import PubSubCommands, Pulse, shorter
from redlease.sync._flavor import Guard, Wakeup, Worker, prepare_pubsub
from redlease.sync._read_turn import ReadTurn, read_within

logger = logging.getLogger("redlease")
SENTINEL_LINK = "sentinel"
MAIN_LINK = "main"
"""The link of a client that is not a cluster (see ``node_of``)."""
SWITCH_MASTER = "+switch-master"
"""What a sentinel publishes when it promoted a new master."""
LINK_ERRORS: tuple[type[BaseException], ...] = (*NETWORK_ERRORS, ConnectionError)
"""What ends a pub/sub link: the client's network errors, or a move the notifier asked for."""


class Link:
    """The pub/sub connection to one node, and the channels subscribed on it."""

    def __init__(self, name: str, connect: Callable[[], Any], now: float) -> None:
        self.name = name
        self.connect = connect
        self.connection: Any = None  # redis-py's connection classes are untyped
        self.reader: Worker | None = None
        self.channels: set[str] = set()
        self.turn = ReadTurn()
        self.stale = False
        """Set when the server moved: the reader must reconnect and resubscribe."""
        self.socket_timeout: float | None = None
        """The client's socket timeout, which bounds opening the connection."""
        self.opened = False
        self.pulse = Pulse(now)
        self.mover: Worker | None = None
        """Moves the channels of this link, found silent, to their slots' new owners."""

    @staticmethod
    def sentinels_in_turn(manager: Any) -> Callable[[], Any]:
        """Connections to a Sentinel client's sentinels, each call to the next one: a watch
        whose sentinel is gone goes on with another (a client lists several for that), at
        once (redis-py would retry connecting to the dead one for seconds)."""
        turns = count()

        def connect() -> Any:
            sentinels = manager.sentinels
            connection = sentinels[next(turns) % len(sentinels)].connection_pool.make_connection()
            connection.retry = type(connection.retry)(NoBackoff(), 0)
            return connection

        return connect

    def watched(self) -> bool:
        """Whether waiters look at this link's :attr:`pulse`: a cluster node's link. (A plain
        server has no other node to go to, and sentinels announce their failovers.)"""
        return self.name not in (MAIN_LINK, SENTINEL_LINK)

    def read_until(
        self,
        wakeup: Wakeup,
        seconds: float,
        clock: Clock,
        dispatch: Callable[[object], None],
        refused: Callable[[Exception], None],
    ) -> float:
        """Read this link for a waiter until its ``wakeup`` is set or ``seconds`` pass,
        handing every push to ``dispatch`` (an error reply to ``refused``); the turn must
        be taken. The seconds still to wait to be woken instead: 0 when done, the rest
        when the link failed (the reader, woken, reconnects and wakes every waiter)."""
        ends = clock() + seconds
        try:
            while not wakeup.is_set() and (left := ends - clock()) > 0:
                if self.stale or self.connection is None:
                    raise ConnectionError("the server moved")
                try:
                    reply = read_within(self.connection, left)
                except ResponseErrors as exc:
                    refused(exc)
                    continue
                if reply is not None:
                    self.pulse.heard(clock())
                    dispatch(reply)
        except LINK_ERRORS:
            # the reader reconnects, subscribes again and wakes every waiter (a broken
            # connection's client may already have reconnected it, with no subscription)
            self.stale = True
            self.turn.give()
            self.turn.wake()
            return max(ends - clock(), 0.0)
        except BaseException:
            # interrupted (Ctrl-C) maybe halfway through a reply: start the link afresh
            self.stale = True
            self.turn.give()
            self.turn.wake()
            raise
        self.turn.give()
        return 0.0

    def look(self, now: float, guard: Guard, move: Callable[[Link], bool]) -> None:
        """PING this link when it has been quiet; once it stays silent, start ``move``."""
        if self.connection is None or self.moving():
            return
        due = self.pulse.due(now)
        if due == "ping":
            with guard:
                self.ping()
        elif due == "silent":
            self.move_in_background(move)

    def moving(self) -> bool:
        return self.mover is not None and self.mover.alive()

    def move_in_background(self, move: Callable[[Link], bool]) -> None:
        """Start ``move`` (of this silent link's channels), unless one is running."""
        if self.moving():
            return

        def run() -> None:
            move(self)

        self.mover = Worker(run, f"redlease-move-{self.name}")

    def ping(self) -> None:
        """Ask the node for a sign of life (the answer counts as heard, as any push does)."""
        try:
            self.connection.send_command("PING")
        except NETWORK_ERRORS:
            logger.debug("PING to %s failed; its reader reconnects", self.name)

    def open(self, connection: Any, within: float | None = None) -> None:
        """Open a pub/sub connection within the client's socket timeout, or ``within`` when
        that is shorter: a stopped server takes the connection and never answers its
        handshake. It then reads as its flavour does (see ``prepare_pubsub``)."""
        prepare_pubsub(connection)
        if not self.opened:  # later, a connection opened before has the reading timeout
            self.socket_timeout, self.opened = connection.socket_timeout, True
        kept = connection.socket_connect_timeout
        connection.socket_timeout = shorter(self.socket_timeout, within)
        connection.socket_connect_timeout = shorter(kept, within)
        try:
            connection.connect()
        finally:
            connection.socket_timeout, connection.socket_connect_timeout = self.socket_timeout, kept
            prepare_pubsub(connection, opened=True)

    def resubscribed(self, commands: PubSubCommands) -> bool:
        """A new connection with every channel subscribed again; False if it failed."""
        connection = self.connection
        try:
            self.stale = False
            connection.disconnect()
            if self.name == SENTINEL_LINK:  # this sentinel may be gone for good: the next one
                self.connection = connection = self.connect()
            self.open(connection)
            for channel in self.channels:
                connection.send_command(commands.subscribe, channel)
            if self.name == SENTINEL_LINK:
                connection.send_command("SUBSCRIBE", SWITCH_MASTER)
        except NETWORK_ERRORS:
            logger.debug("notifier reconnect to %s failed; retrying", self.name)
            return False
        return True
