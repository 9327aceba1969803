# Generated from redlease/aio/notify.py by tools/unasync.py; edit that file instead.
"""One pub/sub connection per client (per node on a cluster), shared by every waiter.

Hand-offs to the client's waiters arrive on its own channel per cluster slot, which stays
subscribed for the client's life (see :mod:`redlease.core.waiters`): waiting costs no
SUBSCRIBE or UNSUBSCRIBE once the client has waited in a slot. A reader worker owns each
connection's input; subscribers send (under a guard) and wait for the server's
confirmation, so a hand-off published after ``subscribe`` returns cannot be missed. If a
connection drops, its reader reconnects (on a cluster: to the node that owns each
channel's slot now), resubscribes and wakes every waiter it carried, so each tries again
(a message may have been lost meanwhile). A server that unsubscribes us itself (its slot
moved away) gets its channels subscribed where the slot lives now, and so does a cluster
node that stays silent while its waiters wait (paused or cut off, see ``look_at_link``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from redlease.compat import ResponseErrors
from redlease.core.ops import Claim
from redlease.core.protocol import NETWORK_ERRORS, Clock
from redlease.core.subscriptions import PING_WHEN_QUIET_S, PubSubCommands, classify, refusal
from redlease.core.waiters import WaiterBook
from redlease.errors import ServerRefused
from redlease.sync._flavor import (
    Guard,
    Worker,
    master_moved,
    node_of,
    refresh_topology,
    sleep,
)
from redlease.sync._read_turn import read_push
from redlease.sync.confirmations import Confirmations
from redlease.sync.links import LINK_ERRORS, MAIN_LINK, SENTINEL_LINK, SWITCH_MASTER, Link
from redlease.sync.waiter import Waiter, closed_while_waiting

logger = logging.getLogger("redlease")
CONFIRM_TIMEOUT_S = 10.0
STRAY_WINDOW_S = 1.0  # how long the reader watches after a waiter left, for late hand-offs
RECONNECT_DELAYS = (0.05, 0.1, 0.2, 0.5) + (1.0,) * 60
"""About a minute of attempts before the notifier gives up (waiters still wake on TTL)."""


class Notifier:
    def __init__(
        self,
        client: Any,
        commands: Callable[[], PubSubCommands],
        clock: Clock = time.monotonic,
        on_stray: Callable[[Claim], None] | None = None,
    ) -> None:
        self._client = client
        self.clock = clock
        self._commands = commands
        self._unsubscribe = "UNSUBSCRIBE"  # or SUNSUBSCRIBE: learnt when subscribing
        self._on_stray = on_stray
        """Told of a hand-off that reached a waiter that had left: the client gives it back."""
        self._book: WaiterBook[Waiter] = WaiterBook()
        self._confirmed = Confirmations()
        self._links: dict[str, Link] = {}
        self._link_of: dict[str, Link] = {}
        self._closing = False
        self._closes = 0  # how many times it closed: a move begun before a close links nothing
        self._stray_until = 0.0
        self._guard = Guard()

    def channels(self) -> list[str]:
        return self._book.channels()

    def waiting(self) -> int:
        """How many waiters wait on this client's connections now."""
        return len(self._book)

    def listening(self, channel: str) -> bool:
        """Whether ``channel`` is subscribed and confirmed (waiting on it needs no I/O)."""
        return self._confirmed.listening(channel)

    def connections(self) -> int:
        """Open pub/sub connections (one per node that carries a waiting channel)."""
        return sum(1 for link in self._links.values() if link.connection is not None)

    def subscribe(
        self, channel: str, claim: Claim | None = None, timeout: float = CONFIRM_TIMEOUT_S
    ) -> Waiter | None:
        """A waiter for ``claim``'s hand-off (or any message, without a claim) on
        ``channel``, once the server confirmed the subscription; ``None`` when no
        confirmation came within ``timeout`` seconds."""
        waiter = Waiter(self, channel, claim)
        if self.listening(channel):  # the common case: the client's channel is ready
            with self._guard:
                if self.listening(channel):  # still: a leave() may have come first
                    self._book.add(waiter)
                    return waiter
        commands = self._commands()
        self._unsubscribe = commands.unsubscribe
        with self._guard:
            if self._confirmed.expect(channel, new=self._book.add(waiter)):
                try:
                    link = self._subscribed_link(channel, commands.subscribe, timeout)
                except NETWORK_ERRORS:
                    self._book.remove(waiter)
                    self._book.forget(channel)
                    self._confirmed.forget(channel)
                    raise
                link.channels.add(channel)
                self._link_of[channel] = link
                link.turn.wake()
            confirmed = self._confirmed.answer(channel)
        try:
            ok = confirmed.wait(min(timeout, CONFIRM_TIMEOUT_S))
        except ResponseErrors as exc:
            self.leave(waiter)
            raise ServerRefused(refusal(channel, exc)) from exc
        except BaseException:
            self.leave(waiter)
            raise
        if not ok:
            self.leave(waiter)
            return None
        return waiter

    def _subscribed_link(self, channel: str, subscribe: str, within: float) -> Link:
        """Subscribe ``channel`` where its slot lives; on a cluster, a node that fails is
        followed by one more try after the slot map is read again (its master crashed)."""
        for attempt in range(2):
            name, connect, _ = node_of(self._client, channel)
            try:
                link = self._linked(name, connect, within)
                link.connection.send_command(subscribe, channel)
                return link
            except NETWORK_ERRORS:
                if attempt or name == MAIN_LINK:
                    raise
                refresh_topology(self._client)
        raise AssertionError("unreachable")

    def leave(self, waiter: Waiter, settled: bool = False) -> None:
        """Let a waiter go, unsubscribing a channel left unused in the same guarded step."""
        with self._guard:
            if waiter.claim is not None and waiter.handoff is None and not settled:
                self._expect_strays(waiter.channel)
            if not self._book.remove(waiter, settled):
                return
            self._confirmed.forget(waiter.channel)
            link = self._link_of.pop(waiter.channel, None)
            if link is None:
                return
            link.channels.discard(waiter.channel)
            if link.connection is not None:
                try:
                    link.connection.send_command(self._unsubscribe, waiter.channel)
                except NETWORK_ERRORS:
                    logger.debug("unsubscribe from %r failed; reconnecting", waiter.channel)

    def close(self) -> None:
        self._closing, self._closes = True, self._closes + 1
        with self._guard:  # end every wait: a closed client takes no new lease
            self._confirmed.close(closed_while_waiting())
            for waiter in self._book.on_channels(set(self._book.channels())):
                waiter.end()
        for link in list(self._links.values()):
            link.turn.close()
            for worker, within in ((link.reader, None), (link.mover, 0.0)):
                if worker is not None:  # a move may wait on silent nodes: it ends as a no-op
                    worker.stop(within=within)
            link.reader = link.mover = None
        with self._guard:
            for link in self._links.values():
                if link.connection is not None:
                    link.connection.disconnect()
                    link.connection = None
            self._links.clear()
        self._closing = False

    def watch_master(self) -> None:
        """Follow a Sentinel client's ``+switch-master`` announcements (redis-py looks for the
        master only as it connects; an old master accepts writes until demoted): the pool is
        pointed at the new master, and every wake-up link reconnects there, waking waiters."""
        manager = getattr(getattr(self._client, "connection_pool", None), "sentinel_manager", None)
        if manager is None or SENTINEL_LINK in self._links:
            return
        connect = Link.sentinels_in_turn(manager)
        for _ in manager.sentinels:
            try:
                with self._guard:
                    link = self._linked(SENTINEL_LINK, connect)
                    link.connection.send_command("SUBSCRIBE", SWITCH_MASTER)
                return
            except NETWORK_ERRORS:
                pass
        logger.warning("cannot watch the sentinels for failovers; renewals still ask them")

    def _follow_master(self) -> None:
        if master_moved(self._client):
            self.reset()

    def reset(self) -> None:
        """Drop every connection: the readers reconnect (to where the server is now),
        resubscribe and wake their waiters."""
        with self._guard:
            for link in self._links.values():
                if link.connection is not None and link.name != SENTINEL_LINK:
                    link.stale = True
                    link.connection.disconnect()
                    link.turn.wake()

    def _linked(self, name: str, connect: Callable[[], Any], within: float | None = None) -> Link:
        link = self._links.get(name)
        if link is None:
            link = self._links[name] = Link(name, connect, self.clock())
        if link.connection is None:
            connection = link.connect()
            link.open(connection, within)
            link.connection = connection
        if link.reader is None or not link.reader.alive():
            link.reader = Worker(lambda: self._read(link), f"redlease-notifier-{name}")
        return link

    def _read(self, link: Link) -> None:
        while not self._closing and link.connection is not None:
            generation = link.turn.generation()
            if not self._reader_needed(link):
                link.turn.park(generation)
            if not link.turn.begin_read():
                return
            try:
                if not self._read_once(link):
                    return
            finally:
                link.turn.end_read()

    def _read_once(self, link: Link) -> bool:
        """Read and handle one push, or the link's failure; False when the reader must end."""
        connection = link.connection
        if connection is None:
            return False
        try:
            if link.stale:
                raise ConnectionError("the server moved")
            reply = read_push(connection, link.turn)
        except ResponseErrors as exc:
            self._refused(exc)
            return True
        except LINK_ERRORS:
            return not self._closing and self._reconnect(link)
        if reply is not None:
            link.pulse.heard(self.clock())
            self._dispatch(reply)
        return True

    def read_for(self, waiter: Waiter, seconds: float) -> float:
        """Wait by reading the waiter's connection itself, when the turn can be taken (see
        ``_read_turn``); the seconds still to wait to be woken instead (0 when done)."""
        link = self._link_of.get(waiter.channel)
        if link is None or not link.turn.take():
            if link is not None:
                link.turn.wake()
            return seconds
        return link.read_until(waiter.wakeup, seconds, self.clock, self._dispatch, self._refused)

    def looks_every(self, channel: str) -> float:
        """How often a waiter on ``channel`` looks at its link (see :meth:`look_at_link`)."""
        link = self._link_of.get(channel)
        return PING_WHEN_QUIET_S if link is not None and link.watched() else float("inf")

    def look_at_link(self, channel: str) -> None:
        """PING a quiet cluster link; when it stays silent, move its channels to their
        slots' new owners in the background (see :meth:`_moved_away`): asking where the
        slots went can wait on the silent node, and no waiter may wait past its time."""
        link = self._link_of.get(channel)
        if link is not None and not self._closing:
            link.look(self.clock(), self._guard, self._moved_away)

    def _reader_needed(self, link: Link) -> bool:
        """Whether the reader must watch ``link`` (else it parks): always, but on a plain
        server's link with no waiter besides one reading for itself, no subscription to
        confirm and no hand-off that may reach a waiter that left."""
        if link.name != MAIN_LINK or self.clock() < self._stray_until:
            return True
        if self._confirmed.awaited():
            return True
        return len(self._book) > link.turn.direct_readers()

    def _expect_strays(self, channel: str) -> None:
        self._stray_until = self.clock() + STRAY_WINDOW_S
        link = self._link_of.get(channel)
        if link is not None:
            link.turn.wake()

    def _dispatch(self, reply: object) -> None:
        push = classify(reply)
        if push is None:
            return
        if push.kind == "moved":
            if self._book.is_subscribed(push.channel):
                self._rehome([push.channel])
            return
        if push.channel == SWITCH_MASTER:
            if push.kind == "message":
                self._follow_master()
            return
        with self._guard:
            if push.kind != "message":
                self._confirmed.confirm(push.channel)
                return
            delivery = self._book.deliver(push.channel, push.payload, self.clock())
            for waiter in delivery.woken:
                waiter.handoff = delivery.handoff
                waiter.wakeup.set()
        if delivery.stray is not None and self._on_stray is not None:
            self._on_stray(delivery.stray)

    def _refused(self, error: Exception) -> None:
        """An error reply on the pub/sub link answers a subscription (no permission): fail
        the subscriptions still waiting for their confirmation, and tell their waiters (a
        channel subscribed again after a drop has some); the reader goes on."""
        with self._guard:
            for waiter in self._book.on_channels(set(self._confirmed.refuse(error))):
                waiter.refuse(error)

    def _rehome(self, channels: list[str], dead: Link | None = None) -> None:
        """Subscribe channels again where their slot lives now (but a ``dead`` node's, which
        is asked last for the slot map). Their waiters are not woken: a retry could still
        land on a demoted master and take a lock the new one never sees; their queue
        entries moved with the slot."""
        closes = self._closes
        refresh_topology(self._client, avoid=None if dead is None else dead.name)
        commands = self._commands()
        for channel in channels:
            name, connect, _ = node_of(self._client, channel)
            with self._guard:
                if self._closes != closes:
                    return
                old = self._link_of.get(channel)
                if not self._book.is_subscribed(channel) or (dead and dead.name == name):
                    continue  # the dead node's slot has no new owner yet: try again later
                link = self._linked(name, connect)
                link.connection.send_command(commands.subscribe, channel)
                self._confirmed.again([channel])
                if old is not None:
                    old.channels.discard(channel)
                link.channels.add(channel)
                self._link_of[channel] = link

    def _reconnect(self, link: Link) -> bool:
        """Reconnect with bounded backoff, resubscribe, and wake everyone to try again. A
        cluster node that stays down gives its channels to their slots' new owners, and their
        waiters retry (a release meanwhile skipped them; a dead node grants nothing)."""
        for delay in RECONNECT_DELAYS:
            with self._guard:
                if link.connection is None or self._closing:
                    return False
                if link.resubscribed(self._commands()):
                    self._confirmed.again(link.channels)
                    self._wake(link.channels)
                    return True
            if link.watched() and self._moved_away(link):
                return False
            sleep(delay)
        with self._guard:
            link.connection = None
            for channel in link.channels:  # subscribed again by the next waiter on it
                self._confirmed.forget(channel)
                self._link_of.pop(channel, None)
                self._book.forget(channel)
            self._wake(link.channels)
            link.channels.clear()
        return False

    def _moved_away(self, link: Link) -> bool:
        """Give a dead or silent cluster node's channels to their slots' owners, waking their
        waiters (a release there found no one listening); True once none is left."""
        before, closes = set(link.channels), self._closes
        try:
            self._rehome(list(link.channels), dead=link)
        except NETWORK_ERRORS:
            logger.debug("could not move the channels of %s yet", link.name)
        with self._guard:
            if self._closes != closes:
                return True
            self._wake(before - link.channels)
            if link.channels:
                return False
            self._links.pop(link.name, None)
            connection, link.connection = link.connection, None
            if connection is not None:  # a silent node's: it ends the reader's read
                connection.disconnect()
        return True

    def _wake(self, channels: set[str]) -> None:
        for waiter in self._book.on_channels(channels):
            waiter.wakeup.set()
