# Generated from redlease/aio/scripts.py by tools/unasync.py; edit that file instead.
"""Run the server-side scripts by SHA, loading them when the server does not know them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import Redis
from redis.exceptions import NoScriptError

from redlease.core.ops import RunScript


class Scripts:
    def __init__(self, client: Redis) -> None:
        self.client = client

    def run(self, op: RunScript) -> Any:
        try:
            return self.client.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
        except NoScriptError:
            self.client.script_load(op.script.source)
            return self.client.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)

    def run_many(self, ops: Sequence[RunScript]) -> list[Any]:
        """Send many calls in one pipelined round trip; a failed call's reply is its error."""
        replies = self._pipelined(ops)
        missing = {
            op.script
            for op, reply in zip(ops, replies, strict=True)
            if isinstance(reply, NoScriptError)
        }
        for script in missing:
            self.client.script_load(script.source)
        return self._pipelined(ops) if missing else replies

    def _pipelined(self, ops: Sequence[RunScript]) -> list[Any]:
        pipe = self.client.pipeline(transaction=False)
        for op in ops:
            pipe.evalsha(op.script.sha, len(op.keys), *op.keys, *op.args)
        return list(pipe.execute(raise_on_error=False))
