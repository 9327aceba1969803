"""Run the server-side scripts by SHA, loading them when the server does not know them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from redlease.core.ops import RunScript
from redlease.core.replication import ReplicaAcks


class Scripts:
    def __init__(self, client: Redis) -> None:
        self.client = client

    async def run(self, op: RunScript) -> Any:
        if op.acks is not None:
            return await self._acknowledged(op, op.acks)
        try:
            return await self.client.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
        except NoScriptError:
            await self.client.script_load(op.script.source)
            return await self.client.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)

    async def _acknowledged(self, op: RunScript, acks: ReplicaAcks) -> Any:
        """The script and WAIT (and WAITAOF) on one connection: WAIT counts its writes."""
        replies = await self._pipelined([op], acks.commands())
        if isinstance(replies[0], NoScriptError):
            await self.client.script_load(op.script.source)
            replies = await self._pipelined([op], acks.commands())
        return acks.check(replies)

    async def run_many(self, ops: Sequence[RunScript]) -> list[Any]:
        """Send many calls in one pipelined round trip; a failed call's reply is its error."""
        replies = await self._pipelined(ops)
        missing = {
            op.script
            for op, reply in zip(ops, replies, strict=True)
            if isinstance(reply, NoScriptError)
        }
        for script in missing:
            await self.client.script_load(script.source)
        return await self._pipelined(ops) if missing else replies

    async def _pipelined(
        self, ops: Sequence[RunScript], then: Sequence[Sequence[str | int]] = ()
    ) -> list[Any]:
        pipe: Any = self.client.pipeline(transaction=False)
        for op in ops:
            pipe.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
        for command in then:
            pipe.execute_command(*command)
        return list(await pipe.execute(raise_on_error=False))
