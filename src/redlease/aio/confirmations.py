"""What the server answered to the subscription of each wake-up channel.

A subscription is confirmed, or refused (no permission), by a reply on the pub/sub
connection, read by whoever reads it; a subscriber waits for that answer on the channel's
flag. A channel subscribed again (a new connection after a drop, another node after a
failover) waits for a new answer: a refusal then (a permission revoked meanwhile) must reach
its waiters, not leave the channel believed subscribed and deaf.
"""

from __future__ import annotations

from collections.abc import Iterable

from redlease.aio._flavor import Flag


class Confirmations:
    def __init__(self) -> None:
        self._flags: dict[str, Flag] = {}

    def listening(self, channel: str) -> bool:
        """Whether ``channel``'s subscription was confirmed (waiting on it needs no I/O)."""
        flag = self._flags.get(channel)
        return flag is not None and not flag.pending() and not flag.refused()

    def expect(self, channel: str, new: bool) -> bool:
        """Whether ``channel`` must be subscribed now: a ``new`` one, one never asked for, or
        one refused before (the permission may be back); its answer is awaited from now."""
        known = self._flags.get(channel)
        if not new and known is not None and not known.refused():
            return False
        self._flags[channel] = Flag()
        return True

    def answer(self, channel: str) -> Flag:
        return self._flags[channel]

    def again(self, channels: Iterable[str]) -> None:
        """``channels`` were subscribed again: their answers are awaited anew."""
        for channel in channels:
            flag = self._flags.get(channel)
            if flag is not None and not flag.pending():
                self._flags[channel] = Flag()

    def confirm(self, channel: str) -> None:
        if (flag := self._flags.get(channel)) is not None:
            flag.set()

    def refuse(self, error: Exception) -> list[str]:
        """An error reply on the connection answers the subscriptions still awaited: the
        channels it refused."""
        refused = [channel for channel, flag in self._flags.items() if flag.pending()]
        for channel in refused:
            self._flags[channel].fail(error)
        return refused

    def close(self, error: Exception) -> None:
        """The client closed: fail the subscriptions still awaited, forget every channel."""
        self.refuse(error)
        self._flags.clear()

    def awaited(self) -> bool:
        return any(flag.pending() for flag in self._flags.values())

    def forget(self, channel: str) -> None:
        self._flags.pop(channel, None)
