"""The client plumbing of the asyncio flavour: what every primitive calls on its client.

:class:`AsyncEngine` drives the core's flows over one connection pool and one pub/sub
notifier, keeps the renewal worker, follows the event loop, probes what the server offers and
gives back what an interruption left behind. The primitives (:mod:`redlease.aio.handle`,
:mod:`redlease.aio.family`) are typed against it; :class:`~redlease.aio.lock.AsyncLocks`
adds the factory methods a user calls.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from contextlib import suppress
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from redlease.aio._flavor import (
    INTERRUPTIONS,
    Guard,
    current_loop,
    fire,
    forget_connections,
    master_moved,
    shielded,
)
from redlease.aio.background import CLOSE_GRACE_S, AsyncBackground
from redlease.aio.client import AsyncClient, close_owned, redis_client
from redlease.aio.driver import run_flow
from redlease.aio.notify import AsyncNotifier
from redlease.aio.renewer import AsyncRenewer
from redlease.aio.scripts import Scripts
from redlease.compat import ResponseErrors, narrow_encoding
from redlease.core.base import LeasedBase
from redlease.core.eviction import eviction_warning
from redlease.core.failures import unavailable
from redlease.core.hooks import ERROR, Hooks, combine
from redlease.core.lease import PAST_DEADLINE, Lease, ReleaseOutcome
from redlease.core.multi import one_slot
from redlease.core.ops import Claim
from redlease.core.owner import Owner, TokenFactory, random_token
from redlease.core.protocol import (
    EXPIRED,
    LEFT_QUEUED,
    NETWORK_ERRORS,
    AcquireRequest,
    Clock,
    Flow,
    Grant,
    acquire_flow,
    give_back,
    release_flow,
)
from redlease.core.renewal import renewal_answers, renewal_calls
from redlease.core.replication import ReplicaAcks, ReplicaShortfall
from redlease.core.subscriptions import PubSubCommands, has_sharded_pubsub, is_denied
from redlease.errors import InvalidArgument, LockError, LockTimeout, ServerUnavailable
from redlease.keys import DEFAULT_PREFIX, LockKeys, ttl_to_ms

INLINE_WITHDRAWAL_S = 1.0
"""How long a cancelled acquire waits for its withdrawal before leaving it to the
background: a stopped server must not hold up the caller's cancellation or time limit."""
logger = logging.getLogger("redlease")


class AsyncEngine(AsyncClient):
    """One client's connections, workers and the operations the primitives run on them."""

    def __init__(
        self,
        client: Redis | RedisCluster | str,
        *,
        prefix: str = DEFAULT_PREFIX,
        cluster: bool = False,
        sharded_pubsub: bool | None = None,
        replicas: int = 0,
        replica_timeout: float = 1.0,
        replica_aof: bool = False,
        hooks: Hooks | Iterable[Hooks] | None = None,
        clock: Clock = time.monotonic,
        token_factory: TokenFactory = random_token,
    ) -> None:
        super().__init__(prefix=prefix, clock=clock, token_factory=token_factory)
        self._owns_client = isinstance(client, str)
        self._url = client if isinstance(client, str) else None
        self.client: Any = redis_client(client, cluster)
        self._narrow_to(narrow_encoding(self.client))
        self._scripts = Scripts(self.client)
        self._notifier = AsyncNotifier(self.client, self._commands, clock, self._give_back_stray)
        self._renewer = AsyncRenewer(self)
        self._hooks = combine(hooks)
        self._watching = False
        self._setting_up = Guard()  # see _ready
        self._ready_publish: str | None = None
        """The publish command once :meth:`_commands` has run: later acquires skip the call."""
        self._background = self._new_background()
        self._loop: Any = None
        """The event loop this client works on (moved when that loop is over)."""
        if sharded_pubsub is not None:
            self._pubsub_commands = PubSubCommands(sharded_pubsub)
        self._replica_template = ReplicaAcks(
            1, ttl_to_ms(replica_timeout, "replica_timeout", 1), replica_aof
        )
        if replicas:
            self._acks = self._replica_acks(replicas)

    def _after_fork(self) -> None:
        super()._after_fork()
        self._scripts = Scripts(self.client)
        self._notifier = AsyncNotifier(
            self.client, self._commands, self._clock, self._give_back_stray
        )
        self._renewer = AsyncRenewer(self)
        self._watching = False
        self._setting_up = Guard()
        self._ready_publish = None
        self._background = self._new_background()

    def _loops(self) -> list[Any]:
        return [self._loop]

    async def _on_this_loop(self) -> None:
        """Work on the running event loop: move here when the previous loop is over.

        Moving drops the connections and workers of the old loop, and gives back, as lost,
        every lease still held there (its tasks are gone), so no lock stays held for its
        TTL by a request that can never release it. A loop still running elsewhere keeps
        the client: one client serves one loop at a time."""
        loop = current_loop()
        if loop is self._loop:
            return
        self._refuse_a_second_loop()
        previous, self._loop = self._loop, loop
        if previous is None:
            return
        orphans = self._renewals.leases()
        forget_connections(self.client)
        self._after_fork()
        for lease in orphans:
            with suppress(LockError, *NETWORK_ERRORS, ReplicaShortfall):
                await self._drive(give_back(lease._claim))
            fire(lease, lease._mark_lost("the event loop that held it is gone"))

    async def _renew_batch(self, due: list[Lease]) -> list[bool | None]:
        """Renew due leases in one pipelined round trip; one answer per lease.

        With a Sentinel-managed client the sentinels are asked first whether the master
        moved; if so, idle connections and the wake-up links go to the new master."""
        try:
            if await master_moved(self.client):
                await self._notifier.reset()
        except NETWORK_ERRORS:
            logger.debug("could not ask the sentinels where the master is")
        batches = renewal_calls(due, per_slot=self._scripts.cluster)
        try:
            replies = await self._scripts.run_many([call for _, call in batches])
        except NETWORK_ERRORS as exc:
            replies = [exc] * len(batches)
        return renewal_answers(due, batches, replies)

    async def _commands(self) -> PubSubCommands:
        """Which pub/sub commands this server has; asked once per client."""
        self._refuse_if_closed()
        await self._ready()
        if self._pubsub_commands is None:
            try:
                await self.client.spublish(f"{self.prefix}:{{probe}}:wake", "")
            except ResponseErrors as exc:
                sharded = is_denied(exc) and await self._server_has_sharded_pubsub()
                self._pubsub_commands = PubSubCommands(sharded=sharded)
            else:
                self._pubsub_commands = PubSubCommands(sharded=True)
        self._ready_publish = self._pubsub_commands.publish
        return self._pubsub_commands

    async def _ready(self) -> None:
        """Work on the running event loop, after the client's one look at its server before
        its first command of any kind: a cluster node's URL becomes a cluster client, a
        Sentinel's failovers are followed, an evicting server is warned about. Calls that
        start together wait for the first to finish it."""
        await self._on_this_loop()
        if not self._watching:
            async with self._setting_up:
                if not self._watching:
                    await self._follow_a_cluster()
                    await self._notifier.watch_master()
                    await self._warn_if_evicting()
                    self._watching = True

    async def _follow_a_cluster(self) -> None:
        """A plain client on a Redis Cluster node would meet MOVED on most names: from a
        URL, switch to a cluster client; given a plain client, say what to pass instead."""
        if self._scripts.cluster:
            return
        try:
            info = await self.client.info("cluster")
        except ResponseErrors:  # INFO forbidden by an ACL: the first MOVED will tell
            return
        if str(info.get("cluster_enabled", "0")) != "1":
            return
        if self._url is None:
            raise InvalidArgument(
                "the server is a node of a Redis Cluster: give AsyncLocks a RedisCluster "
                "client, or its URL with cluster=True"
            )
        await self.client.aclose()
        self.client = redis_client(self._url, cluster=True)
        self._scripts = Scripts(self.client)
        self._notifier = AsyncNotifier(
            self.client, self._commands, self._clock, self._give_back_stray
        )

    async def _server_has_sharded_pubsub(self) -> bool:
        """The probe was denied (an ACL), which says nothing about the server: ask its
        version (sharded pub/sub came with Redis 7.0; every Valkey has it)."""
        try:
            info = await self.client.info("server")
        except (*ResponseErrors, *NETWORK_ERRORS):
            return False
        return has_sharded_pubsub(info)

    async def _warn_if_evicting(self) -> None:
        """Say once if the server may evict keys (see :func:`eviction_warning`)."""
        try:
            config = await self.client.config_get("maxmemory*")
        except ResponseErrors:  # CONFIG is often forbidden (ACL, managed services)
            return
        if (warning := eviction_warning(config)) is not None:
            logger.warning("%s", warning)

    async def _publish_for(self, primitive: LeasedBase[Any]) -> str:
        """:meth:`_commands_for` a primitive about to acquire: a failure is reported to the
        hooks as that acquisition's error (it happened before the acquisition began)."""
        try:
            return await self._commands_for(primitive.keys)
        except LockError as exc:
            primitive._report_failure(exc)
            raise

    async def _commands_for(self, keys: LockKeys) -> str:  # or ServerUnavailable naming the lock
        try:
            return (await self._commands()).publish
        except Exception as exc:
            self._refuse_if_closed()  # close() cut the link under it: say so instead
            if isinstance(exc, NETWORK_ERRORS):
                raise unavailable(keys, "use", exc) from exc
            raise

    def _atomic_for(self, keys: Sequence[LockKeys]) -> bool:
        """Whether one script may take these locks at once: one server, or one cluster slot."""
        return not self._scripts.cluster or one_slot(keys)

    async def _obtain(
        self, handle: LeasedBase[Any], request: AcquireRequest, owner: Owner, role: str | None
    ) -> Lease:
        """Run an acquisition to the lease it records (``LockTimeout`` when time ran out).

        Whatever interrupts it before the lease is returned (a cancellation, Ctrl-C, a signal
        handler's own exception, between any two steps) gives back what it may have got."""
        await self._on_this_loop()  # refused before anything is sent: nothing to undo
        try:
            grant: Grant | None = await self._drive(acquire_flow(request, self._clock))
            if grant is LEFT_QUEUED:  # time ran out while queued
                await self._withdraw_in_time(request.claim)
                grant = None
            elif grant is not None:  # granted as close() ran: nobody would renew it
                self._refuse_if_closed()
            return handle._settle(owner, grant, request, role)
        except LockTimeout:
            raise  # nothing granted, and reported as a timeout
        except ReplicaShortfall as short:
            error = short.rolled_back(request.claim.keys.name)
            handle._observe(request, ERROR, error=error)
            await self._undo([request.claim])
            raise error from None
        except BaseException as exc:
            handle._observe(request, ERROR, error=exc)
            await self._undo([request.claim], exc)
            if isinstance(exc, Exception):
                self._refuse_if_closed()  # close() cut the link under it: say so instead
            raise

    async def _give_back(self, owner: LeasedBase[Any], lease: Lease) -> ReleaseOutcome:
        """Release a lease already taken off the books, and report how it ended.

        A lease past its local deadline is reported ``EXPIRED`` (then lost) at once and
        released from the background: a stopped server must not hold up a ``with`` block.

        The release runs inline (an asyncio shield would cost a task and two more loop turns
        on every release). Only an interrupted release (a cancellation, Ctrl-C) or a failed
        one (no answer in time) pays more: it is sent again in the background while the
        error goes on to the caller, so the lock is free as soon as the server answers
        again, and the release latch gives a retry the first attempt's answer.
        """
        if lease.lost:  # past its deadline: the release can only tidy up, in the background
            callbacks = lease._mark_lost(PAST_DEADLINE)  # first: the background may answer soon
            self._background.finish(lease._claim, lost=lease)
            outcome = owner._finish_release(lease, EXPIRED, pending=True)[0]
            fire(lease, callbacks)
            return outcome
        try:
            code = await self._drive(release_flow(lease._claim))
        except INTERRUPTIONS:
            self._background.finish(lease._claim)
            raise
        except LockError:
            self._background.finish(lease._claim)
            if lease.lost:  # the deadline passed while the release waited for the server
                fire(lease, lease._mark_lost(PAST_DEADLINE))
            raise
        except ReplicaShortfall as short:
            logger.warning("release of %r: %s", lease.name, short)
            code = int(short.reply)
        outcome, callbacks = owner._finish_release(lease, code)
        if callbacks:
            fire(lease, callbacks)
        return outcome

    async def _undo(self, claims: Sequence[Claim], error: BaseException | None = None) -> None:
        """Withdraw what a failed acquisition may have left (a grant, a queue entry), best
        effort, never raising: from the background, and inline too (within
        :data:`INLINE_WITHDRAWAL_S` for all ``claims``, up to the first failure) unless
        ``error`` is ``ServerUnavailable`` (a second socket timeout) or the client closed
        (``close()`` waits for the background, which then closes what it opened). The attempt
        cut short may still run after this: the background sends one again shortly."""
        for claim in claims:
            self._background.finish(claim.without_acks(), withdraw=True)
        if isinstance(error, ServerUnavailable) or self._closed:
            return
        try:
            await shielded(lambda: self._withdraw_now(claims), within=INLINE_WITHDRAWAL_S)
        except (Exception, ReplicaShortfall):
            logger.debug("could not withdraw %r at once", [claim.keys.name for claim in claims])

    async def _withdraw_in_time(self, claim: Claim) -> None:
        """Withdraw a waiter whose time ran out, inline for up to
        :data:`INLINE_WITHDRAWAL_S`; the background takes over only if that failed or
        took longer (a stopped server must not stretch the caller's ``timeout``).

        A withdrawal the server did not answer in that time raises ``ServerUnavailable``
        (a typed error from it, itself): the wait ended on a silent server, which the
        caller must not take for a lock another owner held all along (``LockTimeout``).
        """
        try:
            await shielded(lambda: self._withdraw_now([claim]), within=INLINE_WITHDRAWAL_S)
        except ReplicaShortfall:
            self._background.finish(claim.without_acks(), withdraw=True)
        except Exception as exc:
            logger.debug("could not withdraw %r at once", [claim.keys.name])
            self._background.finish(claim.without_acks(), withdraw=True)
            if isinstance(exc, LockError):
                raise
            raise ServerUnavailable(
                f"could not acquire lock {claim.keys.name!r}: the server did not answer "
                f"within {INLINE_WITHDRAWAL_S:g} s when the wait ended (the waiter leaves "
                "the queue once it answers)"
            ) from exc

    async def _withdraw_now(self, claims: Sequence[Claim]) -> list[Any]:
        """Withdraw each claim in turn: the release codes."""
        return [
            await self._drive(release_flow(claim.without_acks(), withdraw=True, attempts=1))
            for claim in claims
        ]

    def _new_background(self) -> AsyncBackground:
        def held(token: str) -> bool:
            return any(lease.token == token for lease in self._renewals.leases())

        return AsyncBackground(self._drive, held, self._clock)

    def _give_back_stray(self, claim: Claim) -> None:
        self._background.give_back_stray(claim)

    async def _drive(self, flow: Flow) -> Any:
        """Carry out a flow on this client's connections, on the running event loop."""
        try:
            await self._ready()
        except NETWORK_ERRORS as exc:
            raise unavailable(None, "use", exc) from exc
        return await run_flow(flow, self._scripts, self._notifier)

    async def aclose(self) -> None:
        """Stop the workers (held leases are no longer renewed nor watched), end the waits
        (``InvalidArgument``: a closed client takes no new lease) and close an owned client,
        giving the background's releases and withdrawals up to a second in all to land
        first (see :mod:`redlease.aio.background`). Leases still held can be released."""
        await self._on_this_loop()
        self._closed = True
        self._ready_publish = None
        until = self._clock() + CLOSE_GRACE_S  # one second for all of it
        await self._renewer.stop(within=CLOSE_GRACE_S)
        await self._notifier.aclose()
        tidy = (lambda: close_owned(self.client)) if self._owns_client else None
        await self._background.settle(tidy, until)
        if tidy is not None:
            await tidy()
