"""Give back on every Redlock master what acquisitions may have left there.

A step cut short (a cancellation, Ctrl-C, a time limit's signal), or an acquire that a
silent majority failed, may have left a grant on some masters, or leave one there later: a
stopped master keeps the acquire script in its socket and runs it when it resumes, which on
a majority would block the lock for its TTL, from everyone. So each claim is released on
every master until each master answered twice, the second time a moment after the first (a
command sent before may run just after it), with the pauses of
:func:`~redlease.core.withdrawal.withdrawal_pauses` between tries: further apart while a
master stays silent, for the lease's TTL and at least 30 s. This goes on after the client's
``close()``, as a single server's withdrawals do (guide.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from redlease.aio._flavor import Worker, logger, sleep
from redlease.aio.fanout import AsyncFanout
from redlease.aio.scripts import Scripts
from redlease.core.ops import Claim, RunScript
from redlease.core.protocol import NETWORK_ERRORS
from redlease.core.withdrawal import LONGEST_PAUSE_S, withdrawal_pauses

Everywhere = Callable[..., Awaitable[list[Any]]]
"""``_everywhere(op, only, enough=, within=)`` of a Redlock client."""


class AsyncGivingBack:
    """The give-backs of one Redlock client, each on a worker of its own (after the client's
    ``close()``, each of their rounds closes the connections it used: see ``everywhere``)."""

    def __init__(self, targets: Sequence[Scripts], everywhere: Everywhere) -> None:
        self.fanout = AsyncFanout(targets)
        """The connections of the give-backs (``everywhere``'s lane "giving back")."""
        self._everywhere, self._masters = everywhere, len(targets)
        self._workers: set[Worker] = set()

    def later(self, claims: Sequence[Claim]) -> None:
        if not claims:
            return
        self._workers = {worker for worker in self._workers if worker.alive()}
        everywhere, masters = self._everywhere, self._masters
        self._workers.add(
            Worker(lambda: give_back(everywhere, masters, claims), "redlease-give-back")
        )

    async def settle(self, until: float, clock: Callable[[], float]) -> None:
        """At ``close()``: wait for the give-backs under way until ``until``; those still
        waiting for a silent master go on."""
        for worker in self._workers:
            await worker.wait(until - clock())
        if not any(worker.alive() for worker in self._workers):
            await self.fanout.close()


async def give_back(everywhere: Everywhere, masters: int, claims: Sequence[Claim]) -> None:
    """Release every claim on every master until each master answered twice (see above)."""
    releases: list[RunScript] = [claim.release_op(withdraw=False, latch=False) for claim in claims]
    answers = [0] * masters
    schedule = withdrawal_pauses(max(claim.ttl_ms for claim in claims))
    pause = next(schedule)
    while True:
        await sleep(pause)
        pending = [index for index, count in enumerate(answers) if count < 2]
        answered = set(pending)
        for release in releases:
            replies = await everywhere(
                release, pending, enough=len(pending), within=LONGEST_PAUSE_S, lane="giving back"
            )
            answered -= {
                index
                for index, reply in zip(pending, replies, strict=True)
                if isinstance(reply, NETWORK_ERRORS)
            }
        for index in answered:
            answers[index] += 1
        if min(answers) >= 2:
            return
        try:
            pause = schedule.send(answered == set(pending))
        except StopIteration:
            logger.debug("could not give back %d claims on every master", len(claims))
            return
