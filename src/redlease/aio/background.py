"""Lock commands finished from the background, and how they end with the client.

An interrupted release, the release of a lease found lost, an interrupted acquire's
withdrawal and the give-back of a stray hand-off each run on a worker of their own (a task;
a thread in the sync flavour), so that the caller goes on at once. They are about the
server's state, not the client's: ``close()`` gives them :data:`CLOSE_GRACE_S` to land, and
one still waiting for a silent server after that goes on. On a client that ``close()``
closed (one made from a URL), the connections such a late one opened are closed again when
it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redlease.aio._flavor import Worker, check_cancelled, sleep
from redlease.core.lease import Lease
from redlease.core.ops import Claim
from redlease.core.protocol import Clock, Flow, give_back, release_flow, release_reason
from redlease.core.replication import ReplicaShortfall
from redlease.core.withdrawal import LATE_COMMAND_S, withdrawal_pauses
from redlease.errors import ServerUnavailable

CLOSE_GRACE_S = 1.0
"""How long ``close()`` waits for background work: a release lands in a round trip, and
a withdrawal's two tries (see :mod:`redlease.core.withdrawal`) in about 0.4 s."""
logger = logging.getLogger("redlease")


class AsyncBackground:
    """The workers finishing one client's lock commands in the background."""

    def __init__(
        self,
        drive: Callable[[Flow], Awaitable[Any]],
        held: Callable[[str], bool],
        clock: Clock,
    ) -> None:
        self._drive = drive
        self._held = held
        """Whether a lease with this token is on the client's books."""
        self._clock = clock
        self._workers: set[Worker] = set()
        self._tidy: Callable[[], Awaitable[None]] | None = None
        self._settled = False

    def finish(self, claim: Claim, *, withdraw: bool = False, lost: Lease | None = None) -> None:
        """Send an interrupted release (or withdrawal, or a lost lease's release) again; the
        server's answer then says why ``lost`` was lost."""
        self._start(lambda: self._release_again(claim, withdraw, lost), "redlease-release")

    def give_back_stray(self, claim: Claim) -> None:
        """A hand-off reached a waiter that had already given up: give the lease back."""
        self._start(lambda: self._return_stray(claim), "redlease-stray")

    async def settle(
        self, tidy: Callable[[], Awaitable[None]] | None, until: float | None = None
    ) -> None:
        """Wait up to :data:`CLOSE_GRACE_S` (or ``until`` that time) for the work under way;
        what ends later calls ``tidy`` (closing the connections it opened) if this was the
        last of it."""
        if not self._settled:  # a second close() does not wait again
            self._settled = True
            deadline = self._clock() + CLOSE_GRACE_S if until is None else until
            for worker in list(self._workers):
                await worker.wait(deadline - self._clock())
        self._tidy = tidy

    def _start(self, job: Callable[[], Awaitable[None]], name: str) -> None:
        self._workers = {worker for worker in self._workers if worker.alive()}
        self._workers.add(Worker(lambda: self._then_tidy(job), name))

    async def _then_tidy(self, job: Callable[[], Awaitable[None]]) -> None:
        try:
            await job()
        finally:
            tidy = self._tidy
            if tidy is not None and sum(worker.alive() for worker in self._workers) <= 1:
                await tidy()

    async def _release_again(self, claim: Claim, withdraw: bool, lost: Lease | None) -> None:
        try:
            if withdraw:
                await self._withdraw_late(claim)
            else:
                await self._release_late(claim, lost)
        except (Exception, ReplicaShortfall):
            logger.debug("could not finish an interrupted release of %r", claim.keys.name)

    async def _release_late(self, claim: Claim, lost: Lease | None) -> None:
        """Release at once, and again while the server does not answer (a stopped server:
        the lock is free as soon as it is back), on the withdrawal's schedule."""
        schedule = withdrawal_pauses(claim.ttl_ms)
        next(schedule)  # the first try goes at once
        while True:
            check_cancelled()
            try:
                reason = release_reason(await self._drive(release_flow(claim)))
            except ServerUnavailable:
                try:
                    await sleep(schedule.send(False))
                except StopIteration:
                    return
                continue
            if lost is not None and reason is not None:
                lost._mark_lost(reason)  # more precise than the deadline; told already
            return

    async def _withdraw_late(self, claim: Claim) -> None:
        """Withdraw an interrupted acquire until the server has answered (and once more):
        see :mod:`redlease.core.withdrawal`."""
        schedule = withdrawal_pauses(claim.ttl_ms)
        pause = next(schedule)
        while True:
            await sleep(pause)
            check_cancelled()  # a cancellation a library swallowed (the loop shutting down)
            try:
                await self._drive(release_flow(claim, withdraw=True, attempts=1))
                answered = True
            except ServerUnavailable:
                answered = False
            try:
                pause = schedule.send(answered)
            except StopIteration:
                return

    async def _return_stray(self, claim: Claim) -> None:
        """After a moment (a waiter that took the lease by its own retry is on the books by
        then), give back the stray hand-off, unless that lease is held after all."""
        await sleep(LATE_COMMAND_S)
        if self._held(claim.token):
            return
        try:
            await self._drive(give_back(claim))
        except (Exception, ReplicaShortfall):
            logger.debug("could not give back a stray hand-off of %r", claim.keys.name)
