# Generated from redlease/aio/scripts.py by tools/unasync.py; edit that file instead.
"""Run the server-side scripts by SHA, loading them when the server does not know them.

On a cluster every script call touches one slot; calls that go together (renewals, a
write and its WAIT) are pipelined per node, straight to the node that owns their slot,
since a cluster pipeline refuses scripts.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Sequence
from typing import Any

from redis import Redis
from redis.cluster import RedisCluster

from redlease._packing import pack
from redlease.compat import (
    AskErrors,
    ConnectionErrors,
    NoScriptErrors,
    ResponseErrors,
)
from redlease.core.ops import RunScript
from redlease.core.protocol import NETWORK_ERRORS
from redlease.core.replication import ReplicaAcks
from redlease.scripts import SHAS, ScriptName
from redlease.sync._flavor import concurrently, is_cluster, node_of, refresh_topology, send_now

Command = Sequence[str | int]
SHA_OF: dict[int, str] = {id(script): sha for script, sha in SHAS.items()}
"""Each script's SHA by the identity of its (singleton) enum member: hashing an enum member
runs Python code, and this lookup is on every lock command."""


class Scripts:
    """Runs the lock scripts on one client's server (or, on a cluster, routes them).

    Single calls on a plain client go over connections of its own, made by the client's
    pool and kept in a free list of this object: redis-py's pool does bookkeeping on every
    checkout that costs more than a lock's whole script. A connection that failed is
    closed and handed back to the pool; a forked child starts with none.
    """

    def __init__(self, client: Redis | RedisCluster) -> None:
        self.client = client
        self.cluster = is_cluster(client)
        self._loaded: set[ScriptName] = set()
        self._idle: list[Any] = []
        self._pid = os.getpid()

    def run(self, op: RunScript) -> Any:
        """One script call, sent again once if the connection turned out dead (a server
        restart closes every pooled connection); only idempotent calls are resent."""
        try:
            return self._run(op)
        except ConnectionErrors:
            if not op.idempotent:
                raise
            return self._run(op)

    def _run(self, op: RunScript) -> Any:
        """One script call; ``execute_command`` directly, as ``evalsha`` adds only wrappers."""
        if op.acks is not None:
            return self._acknowledged(op, op.acks)
        keys = op.keys
        if self.cluster:
            execute: Any = self.client.execute_command  # untyped in the sync redis-py client
            try:
                sha = SHA_OF[id(op.script)]
                return execute("EVALSHA", sha, len(keys), *keys, *op.args)
            except NoScriptErrors:
                return execute("EVAL", op.script.source, len(keys), *keys, *op.args)
        return self._direct(op)

    def _direct(self, op: RunScript) -> Any:
        """EVALSHA on a connection of this object's free list (see the class docstring); a
        server that does not know the script gets it whole (EVAL, which also caches it) on
        that same connection (behind a Sentinel, the pool may reach another server)."""
        idle = self._idle
        if self._pid != os.getpid():  # a forked child: the parent's sockets are not ours
            idle.clear()
            self._pid = os.getpid()
        client: Any = self.client  # a plain client here: a cluster routes by itself
        pool = client.connection_pool
        connection = idle.pop() if idle else checkout(pool)
        if left_behind(pool, connection):  # a Sentinel failover moved the master
            give_up(pool, connection)
            connection = checkout(pool)
        keys, sha = op.keys, SHA_OF[id(op.script)]
        command = pack(connection, ("EVALSHA", sha, len(keys), *keys, *op.args))
        try:
            try:
                send_now(connection, command)
                reply = connection.read_response()
            except NoScriptErrors:  # sent whole: a SCRIPT FLUSH cannot come in between
                source = op.script.source
                connection.send_packed_command(
                    pack(connection, ("EVAL", source, len(keys), *keys, *op.args))
                )
                reply = connection.read_response()
        except ResponseErrors:
            idle.append(connection)  # the server answered: the connection is fine
            raise
        except ConnectionErrors:
            give_up(pool, connection)
            self._drop_idle(pool)
            raise
        except BaseException:
            give_up(pool, connection)
            raise
        idle.append(connection)
        return reply

    def _drop_idle(self, pool: Any) -> None:
        """Close every kept connection: one found closed by the server means a restart or
        a ``CLIENT KILL`` most likely closed them all, and a resend must not meet the next
        one. The pool checks the connections it hands out before a command."""
        dropped = self._idle[:]
        self._idle.clear()  # in place: calls in flight hold this list
        for connection in dropped:
            with contextlib.suppress(Exception):  # a dead connection may fail to close
                give_up(pool, connection)

    def _acknowledged(self, op: RunScript, acks: ReplicaAcks) -> Any:
        """The script and WAIT (and WAITAOF) on one connection: WAIT counts its writes.

        A script this client has not run yet goes whole (EVAL), and so does the one retry
        of a script the server turned out not to know (a flush, a failover): the failed
        EVALSHA wrote nothing, so its WAIT had nothing of it to wait for.
        """
        whole = () if op.script in self._loaded else (op.script,)
        replies = self._on_node(op.keys[0], [op], acks.commands(), whole)
        if isinstance(replies[0], NoScriptErrors):
            replies = self._on_node(op.keys[0], [op], acks.commands(), (op.script,))
        self._loaded.add(op.script)
        return acks.check(replies)

    def run_many(self, ops: Sequence[RunScript]) -> list[Any]:
        """Send many calls in one pipelined round trip per node; a failed call's reply is
        its error."""
        replies = self._spread(ops)
        missing = {
            op.script
            for op, reply in zip(ops, replies, strict=True)
            if isinstance(reply, NoScriptErrors)
        }
        stale = self.cluster and any(_misrouted(reply) for reply in replies)
        if stale:
            refresh_topology(self.client)
        return self._spread(ops, missing) if missing or stale else replies

    def _spread(self, ops: Sequence[RunScript], whole: Collection[ScriptName] = ()) -> list[Any]:
        """Pipeline ``ops`` per node; the ``whole`` scripts are sent as source (EVAL, which
        also caches them), so a SCRIPT FLUSH cannot fail them again."""
        if not self.cluster:
            return self._pipelined(self.client, ops, whole=whole)
        by_node: dict[str, list[int]] = {}
        for index, op in enumerate(ops):
            name, _, _ = node_of(self.client, op.keys[0])
            by_node.setdefault(name, []).append(index)
        groups = list(by_node.values())
        results = concurrently([self._group(ops, group, whole) for group in groups])
        replies: list[Any] = [None] * len(ops)
        for group, result in zip(groups, results, strict=True):
            for index, reply in zip(group, _spread_error(result, len(group)), strict=True):
                replies[index] = reply
        return replies

    def _group(
        self, ops: Sequence[RunScript], group: list[int], whole: Collection[ScriptName]
    ) -> Any:
        def send() -> list[Any]:
            return self._on_node(ops[group[0]].keys[0], [ops[i] for i in group], (), whole)

        return send

    def _on_node(
        self,
        key: str,
        ops: Sequence[RunScript],
        then: Sequence[Command] = (),
        whole: Collection[ScriptName] = (),
    ) -> list[Any]:
        _, _, client = node_of(self.client, key)
        return self._pipelined(client, ops, then, whole)

    @staticmethod
    def _pipelined(
        client: Any,
        ops: Sequence[RunScript],
        then: Sequence[Command] = (),
        whole: Collection[ScriptName] = (),
    ) -> list[Any]:
        pipe: Any = client.pipeline(transaction=False)
        for op in ops:
            if op.script in whole:
                pipe.eval(op.script.source, len(op.keys), *op.keys, *op.args)
            else:
                pipe.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
        for command in then:
            pipe.execute_command(*command)
        return list(pipe.execute(raise_on_error=False))


def _spread_error(result: Any, count: int) -> list[Any]:
    return result if isinstance(result, list) else [result] * count


def _misrouted(reply: Any) -> bool:
    """The slot lives elsewhere now (MOVED/ASK), or its node is gone: refresh the slot map."""
    return isinstance(reply, (*AskErrors, *NETWORK_ERRORS))


def checkout(pool: Any) -> Any:
    """A connection of ``pool`` to keep (a Sentinel pool's knows where the master is)."""
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 names the command
        return pool.get_connection("EVALSHA")


def left_behind(pool: Any, connection: Any) -> bool:
    """Whether a kept connection still talks to a master a Sentinel pool has left (after a
    failover the old master keeps taking writes until the sentinels demote it)."""
    master = getattr(pool, "master_address", None)
    if master is None:
        return False
    return (connection.host, connection.port) != tuple(master)


def give_up(pool: Any, connection: Any) -> None:
    """Close a kept connection that failed and hand it back to its pool."""
    try:
        connection.disconnect()
    finally:
        pool.release(connection)
