"""The driver loop of the asyncio flavour: it carries out a core flow's operations.

A flow (:mod:`redlease.core.protocol`) yields :class:`~redlease.core.ops.RunScript`,
:class:`~redlease.core.ops.Subscribe` and :class:`~redlease.core.ops.Wait` steps and decides
everything; this loop only performs each step and sends the answer (or throws the error) back.
"""

from __future__ import annotations

from typing import Any

from redlease.aio._flavor import check_cancelled
from redlease.aio.notify import AsyncNotifier
from redlease.aio.scripts import Scripts
from redlease.aio.waiter import AsyncWaiter
from redlease.compat import ResponseErrors
from redlease.core.failures import refused
from redlease.core.ops import RunScript, Subscribe
from redlease.core.protocol import NETWORK_ERRORS, Flow
from redlease.core.replication import ReplicaShortfall

FLOW_ERRORS: tuple[type[BaseException], ...] = (*NETWORK_ERRORS, ReplicaShortfall)
"""Errors of an operation that its flow decides about (thrown into it)."""


async def run_flow(flow: Flow, scripts: Scripts, notifier: AsyncNotifier) -> Any:
    """Carry out a flow's operations until it returns; the waiter is always let go."""
    waiter: AsyncWaiter | None = None
    reply: Any = None
    error: BaseException | None = None
    settled = False
    try:
        while True:
            try:
                operation = flow.throw(error) if error is not None else flow.send(reply)
            except StopIteration as finished:
                settled = finished.value is not None
                return finished.value
            error = None
            try:
                if isinstance(operation, RunScript):
                    reply = await scripts.run(operation)
                elif isinstance(operation, Subscribe):
                    if waiter is not None and waiter.channel != operation.channel:
                        await waiter.close()
                        waiter = None
                    if waiter is None:
                        waiter = await notifier.subscribe(
                            operation.channel, operation.claim, operation.seconds
                        )
                    reply = waiter is not None
                else:
                    assert waiter is not None
                    check_cancelled()
                    reply = await waiter.wait(operation.seconds)
            except FLOW_ERRORS as exc:
                error = exc
            except ResponseErrors as exc:
                if isinstance(operation, RunScript):
                    raise refused(operation, exc) from exc
                raise
    finally:
        flow.close()
        if waiter is not None:
            await waiter.close(settled)
