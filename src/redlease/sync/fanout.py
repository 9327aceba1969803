# Generated from redlease/aio/fanout.py by tools/unasync.py; edit that file instead.
"""One script on several independent servers in one round trip, from one thread or task.

A Redlock round sends the same script to every master and counts the answers. Here it is
sent to every master first and the answers are read after, so a round costs about one
round trip (the slowest master's), not one per master, with no thread pool. Each master
gets a connection of its own, kept between rounds (the pool's bookkeeping per command
costs more than the send itself), and rounds take turns on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from redlease.compat import NoScriptErrors
from redlease.core.ops import RunScript
from redlease.sync._flavor import Guard, current_loop
from redlease.sync.scripts import Scripts, checkout, give_up


class Fanout:
    def __init__(self, targets: Sequence[Scripts]) -> None:
        self._targets = list(targets)
        self._connections: list[Any] = [None] * len(self._targets)
        self._guard = Guard()
        self._loop: Any = None

    def run(self, op: RunScript, only: Sequence[int] | None = None) -> list[Any]:
        """The reply of every target (or those at the indexes ``only``), in order; a target
        that failed has the exception instead."""
        indexes = list(range(len(self._targets))) if only is None else list(only)
        with self._guard:
            self._follow_loop()
            sent = [self._send(index, op) for index in indexes]
            replies = []
            for index, outcome in zip(indexes, sent, strict=True):
                if outcome is None:
                    replies.append(self._read(index, op))
                else:
                    replies.append(outcome)
            return replies

    def close(self) -> None:
        with self._guard:
            for index in range(len(self._connections)):
                self._drop(index)

    def _follow_loop(self) -> None:
        """Connections of an event loop that is over are dropped (not closed: they belong
        to that loop)."""
        loop = current_loop()
        if loop is not self._loop:
            self._loop = loop
            self._connections = [None] * len(self._targets)

    def _send(self, index: int, op: RunScript) -> Any:
        """``None`` once sent; otherwise the reply already had (a cluster client, which
        routes by itself, or the error)."""
        scripts = self._targets[index]
        if scripts.cluster:
            return _alone(scripts, op)
        try:
            connection = self._connections[index]
            if connection is None:
                client: Any = scripts.client
                connection = self._connections[index] = checkout(client.connection_pool)
            keys = op.keys
            command = connection.pack_command("EVALSHA", op.script.sha, len(keys), *keys, *op.args)
            connection.send_packed_command(command)
        except Exception as exc:
            self._drop(index)
            return exc
        return None

    def _read(self, index: int, op: RunScript) -> Any:
        try:
            return self._connections[index].read_response()
        except NoScriptErrors:
            return _alone(self._targets[index], op)
        except Exception as exc:
            self._drop(index)
            return exc

    def _drop(self, index: int) -> None:
        connection, self._connections[index] = self._connections[index], None
        if connection is not None:
            client: Any = self._targets[index].client
            with suppress(Exception):  # a broken connection is dropped anyway
                give_up(client.connection_pool, connection)


def _alone(scripts: Scripts, op: RunScript) -> Any:
    """The script on one server by the usual path (it loads a script the server lacks)."""
    try:
        return scripts.run(op)
    except Exception as exc:
        return exc
