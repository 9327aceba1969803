# Generated from redlease/aio/redlock.py by tools/unasync.py; edit that file instead.
"""Redlock over independent masters, sync flavour (the sync twin is generated).

Each master is its own client (an :class:`~redlease.sync.engine.Engine`); a round
sends the same script to all of them at once and counts a majority within the validity
time. One renewal worker per Redlock client renews every held lease on every master, and a
lease that no longer has a majority is reported lost. Read ``docs/guarantees.md`` before
relying on it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import suppress
from typing import Any

from redis import Redis

from redlease.compat import ResponseErrors
from redlease.core.failures import refused
from redlease.core.hooks import Hooks, combine
from redlease.core.lease import PAST_DEADLINE, Lease, ReleaseOutcome
from redlease.core.ops import Claim, RunScript
from redlease.core.owner import Owner, TokenFactory, random_token
from redlease.core.protocol import (
    EXPIRED,
    NETWORK_ERRORS,
    RELEASED,
    TAKEN_OVER,
    Clock,
    Grant,
    alive,
)
from redlease.core.redlock import (
    MAX_UNANSWERED,
    RELEASE_AT_LEAST_S,
    RETRY_DELAYS_S,
    ROUND_FLOOR_S,
    SILENT_MAJORITY_S,
    STRAGGLER_GRACE_S,
    Tally,
    grants,
    master_list,
    not_granted,
    quorum,
    quorum_answer,
    raised_to,
    refuse_repeated,
    releases,
    tally_acquire,
    too_few_answers,
    validity_ms,
)
from redlease.core.renewal import renewal_answers, renewal_calls
from redlease.core.replies import acquire_error
from redlease.errors import LeaseLost, LockError, LockTimeout
from redlease.keys import DEFAULT_PREFIX
from redlease.scripts import ScriptName
from redlease.sync._flavor import current_owner, fire, shielded, sleep
from redlease.sync.background import CLOSE_GRACE_S
from redlease.sync.client import Client
from redlease.sync.engine import Engine
from redlease.sync.fanout import Fanout
from redlease.sync.giveback import GivingBack
from redlease.sync.handle import LeaseHandle
from redlease.sync.renewer import Renewer


class Redlock(Client):
    """A client over independent masters (each a ``redis.Redis`` or a URL)."""

    def __init__(
        self,
        masters: Iterable[Redis | str],
        *,
        prefix: str = DEFAULT_PREFIX,
        hooks: Hooks | Sequence[Hooks] | None = None,
        clock: Clock = time.monotonic,
        token_factory: TokenFactory = random_token,
    ) -> None:
        listed = master_list(masters)
        super().__init__(prefix=prefix, clock=clock, token_factory=token_factory)
        self._masters = [
            Engine(master, prefix=prefix, clock=clock, token_factory=token_factory)
            for master in listed
        ]
        refuse_repeated([master.client for master in self._masters])
        for master in self._masters:
            self._narrow_to(master._narrow_encoding)
        self._quorum = quorum(len(self._masters))
        self._hooks = combine(hooks)
        self._masters_checked = False
        self._start_workers()

    def _loops(self) -> list[Any]:
        return [master._loop for master in self._masters]

    def _after_fork(self) -> None:
        super()._after_fork()
        self._start_workers()

    def _start_workers(self) -> None:
        """The renewal worker, and two fan-outs: renewals get their own connections, so no
        amount of acquiring and releasing on the client can make them wait their turn."""
        self._renewer = Renewer(self)
        targets = [master._scripts for master in self._masters]
        self._fanout, self._renewals_fanout = Fanout(targets), Fanout(targets)
        self._giving_back = GivingBack(targets, self._everywhere)

    def lock(
        self,
        name: str,
        *,
        ttl: float | None = None,
        renew: bool | None = None,
        timeout: float | None = -1,
        blocking: bool = True,
        owner: Hashable | None = None,
    ) -> RedlockLock:
        return RedlockLock(
            self, name, ttl=ttl, renew=renew, timeout=timeout, blocking=blocking, owner=owner
        )

    def _everywhere(
        self,
        op: RunScript,
        only: Sequence[int] | None = None,
        *,
        enough: int,
        within: float,
        lane: str = "steps",
        decided: Callable[[object], bool] | None = None,
    ) -> list[Any]:
        """One script on every master (or those at ``only``) in one round trip from this
        thread: each reply, or the error that stands for it (a refusal as ServerRefused, no
        answer within ``within`` seconds, or soon after ``enough`` masters answered, as a
        TimeoutError). Once ``enough`` replies passed ``decided`` (the majority the caller
        needs), the round waits for no other: their replies are ``NOT_AWAITED``."""
        indexes = range(len(self._masters)) if only is None else only
        masters = [self._masters[index] for index in indexes]
        for master in masters:
            master._on_this_loop()
        fanout = {
            "steps": self._fanout,
            "renewals": self._renewals_fanout,
            "giving back": self._giving_back.fanout,
        }[lane]
        replies = fanout.run(op, indexes, enough=enough, within=within, decided=decided)
        if self._closed:  # a call after close() (a give-back, a release) keeps no connection
            fanout.close()
        return [
            refused(op, reply) if isinstance(reply, ResponseErrors) else reply for reply in replies
        ]

    def _check_masters_once(self) -> None:
        """At the first acquisition, start saying (in the background, as a lock client does
        at its first) which masters evict keys: an evicted fencing counter starts again
        from 1, under the tokens a Redlock grant relies on. ``within=0`` never waits."""
        if not self._masters_checked:
            self._masters_checked = True
            with suppress(Exception):
                shielded(self._warn_of_eviction, within=0)

    def _warn_of_eviction(self) -> None:
        for master in self._masters:
            with suppress(*NETWORK_ERRORS):
                if not self._closed:
                    master._warn_if_evicting()

    def _renew_batch(self, due: list[Lease]) -> list[bool | None]:
        """Renew on every master; a lease is kept while a majority still holds it.

        Each call of the batch is one fan-out round, bounded by the soonest local deadline
        among ``due``: a silent master costs the round no more than the others' answers.
        """
        batches = renewal_calls(due)
        deadline = min(lease.expires_at for lease in due)
        replies = [
            self._everywhere(
                op, enough=self._quorum, within=deadline - self._clock(), lane="renewals"
            )
            for _, op in batches
        ]
        per_master = [
            renewal_answers(due, batches, [column[index] for column in replies])
            for index in range(len(self._masters))
        ]
        return [quorum_answer([answers[i] for answers in per_master]) for i in range(len(due))]

    def _give_back_later(self, claims: Sequence[Claim]) -> None:
        """Give back on every master, from a worker of its own, what a step cut short or an
        acquire a silent majority failed may have left (see :mod:`redlease.sync.giveback`)."""
        self._giving_back.later(claims)

    def close(self) -> None:
        """Stop renewing and close every master's client: no new lease after. The work under
        way gets a second in all; give-backs, and a round silent masters hold up, go on."""
        self._closed = True
        until = self._clock() + CLOSE_GRACE_S
        self._giving_back.settle(until, self._clock)
        self._renewer.stop(within=max(until - self._clock(), 0.0))
        for fanout in (self._fanout, self._renewals_fanout):
            with suppress(Exception):  # the round under way closes them once it ends
                shielded(fanout.close, within=max(until - self._clock(), 0.0))
        for master in self._masters:
            master.close()


class RedlockLock(LeaseHandle[Redlock]):
    """A lease held on a majority of independent masters.

    Reentrant per owner like :class:`Lock`. Waiting retries rounds after short random
    pauses (a waiter cannot queue on a majority at once), each with a fresh token.
    ``lease.fence`` is the largest of the quorum's per-master counters, and the winner
    lifts the quorum's other counters to it before ``acquire`` returns; the grant counts
    only once a majority confirmed a counter at least that large, in time. Since two
    majorities share a master, a later holder draws a larger token, unless a master lost
    its data (a restart without persistence), which Redlock cannot see.
    """

    _role_suffix = "#redlock"
    _kind = "redlock"

    def _current_owner(self) -> Owner:
        return current_owner()

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> Lease:
        self._locks._refuse_if_closed()
        self._locks._check_masters_once()
        owner, held, request = self._plan_acquire(blocking, timeout, "publish")
        if held is not None:
            return held
        assert request is not None
        claim, clock = request.claim, self._locks._clock
        began = clock()
        deadline = None if request.timeout is None else began + request.timeout
        delay = RETRY_DELAYS_S[0]
        silent_since: float | None = None
        unanswered_by: list[Claim] = []  # a majority may run these when it resumes
        floor = began + ROUND_FLOOR_S
        rounds_end = (
            floor if not request.blocking else None if deadline is None else max(deadline, floor)
        )
        while True:
            self._refuse_if_closed(unanswered_by)  # closed while this acquire waited
            within, round_began = self._round_time(rounds_end), clock()
            try:  # a grant is given back until its lease is recorded, whatever comes first
                grant, tally, why = self._round(claim, within)
                if grant is not None and not self._locks._closed:
                    return self._settle(owner, grant, request, self._role)
            except BaseException:
                self._locks._give_back_later([*unanswered_by, claim])
                raise
            self._refuse_if_closed([*unanswered_by, claim])  # a grant as close() ran went back
            unanswered = tally.reachable < self._locks._quorum
            if unanswered:
                typed = [error for error in tally.errors if not isinstance(error, NETWORK_ERRORS)]
                if typed:  # another program's value, a spent fence counter: say so
                    raise typed[0]
                unanswered_by = [*unanswered_by[-MAX_UNANSWERED + 1 :], claim]
                silent_since = round_began if silent_since is None else silent_since
                patience = max(self._round_time(None), SILENT_MAJORITY_S)
                if not tally.silent or clock() - silent_since >= patience:
                    raise self._unavailable(tally, began, unanswered_by)  # refused, or silent
            else:
                silent_since = None
            remaining = None if deadline is None else deadline - clock()
            if not request.blocking or (remaining is not None and remaining <= 0):
                if unanswered:
                    raise self._unavailable(tally, began, unanswered_by)
                raise LockTimeout(self.name, request.timeout if request.blocking else 0, why)
            pause = random.uniform(RETRY_DELAYS_S[0], delay)
            sleep(pause if remaining is None else min(pause, remaining))
            delay = min(delay * 2, RETRY_DELAYS_S[1])
            claim = self._claim(self._locks._new_token(owner), "publish")

    def _refuse_if_closed(self, claims: Sequence[Claim]) -> None:
        """A closed client takes no new lease; what its rounds may have left goes back."""
        if self._locks._closed:
            self._locks._give_back_later(claims)
            self._locks._refuse_if_closed()

    def _unavailable(self, tally: Tally, began: float, unanswered_by: list[Claim]) -> LockError:
        self._locks._give_back_later(unanswered_by)
        waited_ms = (self._locks._clock() - began) * 1000
        return too_few_answers(self.name, tally, waited_ms)

    def _round_time(self, rounds_end: float | None) -> float:
        """How long a round may wait for the masters: the lease's validity, and no later
        than ``rounds_end``: the caller's deadline, or :data:`ROUND_FLOOR_S` after the call
        began when the timeout is shorter (or for ``try_acquire``)."""
        validity_s = validity_ms(0, self._ttl_ms) / 1000
        if rounds_end is None:
            return validity_s
        return max(min(validity_s, rounds_end - self._locks._clock()), 0.0)

    def _round(self, claim: Claim, within: float) -> tuple[Grant | None, Tally, str | None]:
        """One round on every master: the grant, once a majority granted it in time and a
        majority holds a fence counter at least its fence, while the client is open; else
        what was granted is given back, with why when another owner is not the reason.

        No answer is awaited past ``within`` seconds (see :meth:`_round_time`). A failed
        round's token is never used again (the next round draws a new one), so nothing a
        failed round left behind can answer for a later lease.
        """
        locks, clock = self._locks, self._locks._clock
        started = clock()
        ends = started + within
        acquire = claim.acquire_op("0")
        replies = locks._everywhere(acquire, enough=locks._quorum, within=within, decided=grants)
        tally = tally_acquire(
            [acquire_error(acquire, self.keys, reply) or reply for reply in replies]
        )
        elapsed_ms = (clock() - started) * 1000
        why = not_granted(tally, elapsed_ms, self._ttl_ms)
        if tally.granted(elapsed_ms, self._ttl_ms):
            fence, behind = tally.fence, tally.to_raise()
            raised: list[Any] = []
            if behind:
                floor = RunScript(ScriptName.FENCE_FLOOR, (self.keys.fence,), (fence,))
                raised = locks._everywhere(
                    floor,
                    behind,
                    enough=max(locks._quorum - tally.drawn, 0),
                    within=ends - clock(),
                    decided=raised_to(fence),
                )
            grant = Grant(claim, fence, started)
            confirmed = tally.confirmed(dict(zip(behind, raised, strict=True)))
            if confirmed >= locks._quorum and alive(grant, clock()) and not locks._closed:
                return grant, tally, None
            why = "a majority granted it, but too few confirmed its fencing token in time"
        holding = tally.may_hold()
        if holding:
            give_back = claim.release_op(withdraw=False, latch=False)
            locks._everywhere(give_back, holding, enough=len(holding), within=self._ttl_ms / 1000)
        return None, tally, why

    def release(self) -> ReleaseOutcome:
        """Release on every master; ``EXPIRED`` if a majority no longer held it."""
        lease = self._begin_release()
        if isinstance(lease, ReleaseOutcome):
            return lease
        if lease.lost:  # past its deadline: given back from the background, as by a client
            self._locks._give_back_later([lease._claim])
            outcome = self._finish_release(lease, EXPIRED, pending=True)[0]
            fire(lease, lease._mark_lost(PAST_DEADLINE))
            return outcome
        within = max(lease.expires_at - self._locks._clock(), RELEASE_AT_LEAST_S)
        try:
            replies = self._locks._everywhere(
                lease._claim.release_op(withdraw=False),
                enough=self._locks._quorum,
                within=within,
                decided=releases,
            )
        except BaseException:
            self._locks._give_back_later([lease._claim])
            raise
        released = sum(1 for code in replies if isinstance(code, int) and code >= RELEASED)
        code = RELEASED if released >= self._locks._quorum else TAKEN_OVER
        outcome, callbacks = self._finish_release(lease, code)
        fire(lease, callbacks)
        return outcome

    def extend(self, ttl: float | None = None) -> Lease:
        """Extend on every master; kept only if a majority extended it in time."""
        lease, ttl_ms = self._begin_extend(ttl)
        clock = self._locks._clock
        started = clock()
        renew = RunScript(
            ScriptName.RENEW,
            (lease._claim.renew_key,),
            (lease._claim.renew_kind, lease.token, ttl_ms),
        )
        validity = validity_ms(0, ttl_ms)
        # past the lease's current deadline an answer comes too late to keep it
        within = min(validity / 1000, max(lease.expires_at - started, STRAGGLER_GRACE_S))
        quorum = self._locks._quorum
        replies = self._locks._everywhere(renew, enough=quorum, within=within, decided=grants)
        answered = [reply for reply in replies if isinstance(reply, list)]
        kept = sum(1 for reply in answered if int(reply[0]) == 1)
        in_time = (clock() - started) * 1000 < validity
        result = (kept >= quorum and in_time, started)
        why = (
            f"extend could not be confirmed: only {len(answered)} of {len(replies)} masters "
            "answered before the lease's deadline"
            if len(answered) < quorum
            else "extend found the lease gone or owned by another on a majority of masters"
        )
        callbacks = self._finish_extend(lease, ttl_ms, result, self._role, why)
        if callbacks is not None:
            fire(lease, callbacks)
            raise LeaseLost(self.name, lease.lost_reason or "lost")
        return lease
