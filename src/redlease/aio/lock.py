"""Lock and client of the asyncio flavour."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from contextlib import suppress
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from redlease.aio._flavor import (
    ASYNCIO,
    INTERRUPTIONS,
    Worker,
    check_cancelled,
    current_loop,
    current_owner,
    fire,
    forget_connections,
    loop_is_over,
    master_moved,
    shielded,
    sleep,
    wrap_locked,
)
from redlease.aio.notify import AsyncNotifier, AsyncWaiter
from redlease.aio.renewer import AsyncRenewer
from redlease.aio.scripts import Scripts
from redlease.compat import ResponseErrors, check_client
from redlease.core.base import LeasedBase, LockBase
from redlease.core.client_state import LocksBase, LocksT
from redlease.core.hooks import ERROR, Hooks, combine
from redlease.core.lease import PAST_DEADLINE, Lease, ReleaseOutcome
from redlease.core.multi import one_slot
from redlease.core.ops import Claim, RunScript, Subscribe
from redlease.core.owner import Owner, TokenFactory, random_token
from redlease.core.protocol import (
    NETWORK_ERRORS,
    AcquireRequest,
    Clock,
    Flow,
    Grant,
    acquire_flow,
    extend_flow,
    give_back,
    refused,
    release_flow,
    unavailable,
)
from redlease.core.renewal import renewal_answers, renewal_calls
from redlease.core.replication import ReplicaAcks, ReplicaShortfall
from redlease.core.subscriptions import PubSubCommands, has_sharded_pubsub, is_denied
from redlease.core.templates import KeyTemplate
from redlease.errors import (
    InvalidArgument,
    LeaseLost,
    LockError,
    LockTimeout,
    NotReplicated,
    ServerUnavailable,
)
from redlease.keys import DEFAULT_PREFIX, LockKeys, ttl_to_ms

if TYPE_CHECKING:
    from redlease.aio.family import (
        AsyncCountDownLatch,
        AsyncMultiLock,
        AsyncReadWriteLock,
        AsyncSemaphore,
    )

F = TypeVar("F", bound=Callable[..., Any])
LATE_COMMAND_S = 0.2
"""How long a command sent just before an interruption may still take to run."""
FLOW_ERRORS: tuple[type[BaseException], ...] = (*NETWORK_ERRORS, ReplicaShortfall)
"""Errors of an operation that its flow decides about (thrown into it)."""
logger = logging.getLogger("redlease")


class AsyncLocks(LocksBase):
    """A redlease client over one ``redis.asyncio.Redis`` (or ``RedisCluster``, or a URL:
    ``cluster=True`` makes a cluster client of it): makes locks, owns the workers.

    One pub/sub connection and one renewal task serve every lock of the client. Create
    it once per process (per event loop) and close it with ``aclose()`` or ``async with``.
    """

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
        self.client: Any = _client(client, cluster)
        self.scripts = Scripts(self.client)
        self.notifier = AsyncNotifier(self.client, self.commands, clock, self._give_back_stray)
        self.renewer = AsyncRenewer(self)
        self.hooks = combine(hooks)
        self._watching = False
        self.ready_publish: str | None = None
        """The publish command once :meth:`commands` has run: later acquires skip the call."""
        self._finishing: set[Worker] = set()
        """Interrupted releases being sent again (kept here so that they run to the end)."""
        self._loop: Any = None
        """The event loop this client works on (moved when that loop is over)."""
        if sharded_pubsub is not None:
            self.pubsub_commands = PubSubCommands(sharded_pubsub)
        self.replica_template = ReplicaAcks(
            1, ttl_to_ms(replica_timeout, "replica_timeout"), replica_aof
        )
        if replicas:
            self.acks = self.replica_acks(replicas)

    def lock(
        self,
        name: str,
        *,
        ttl: float | None = None,
        renew: bool | None = None,
        timeout: float | None = -1,
        blocking: bool = True,
        owner: Hashable | None = None,
        replicas: int | None = None,
    ) -> AsyncLock:
        """A handle on the lock ``name``; see :class:`AsyncLock` for the options."""
        return AsyncLock(
            self,
            name,
            ttl=ttl,
            renew=renew,
            timeout=timeout,
            blocking=blocking,
            owner=owner,
            replicas=replicas,
        )

    def fair_lock(self, name: str, **options: Any) -> AsyncFairLock:
        """A lock served in arrival order; options as for :meth:`lock`."""
        return AsyncFairLock(self, name, **options)

    def rw_lock(self, name: str, **options: Any) -> AsyncReadWriteLock:
        """A read-write lock: ``rw.read`` and ``rw.write``; options as for :meth:`lock`."""
        from redlease.aio.family import AsyncReadWriteLock  # noqa: PLC0415 - builds on this module

        return AsyncReadWriteLock(self, name, **options)

    def semaphore(self, name: str, permits: int, **options: Any) -> AsyncSemaphore:
        """``permits`` leased places; every client must pass the same ``permits``."""
        from redlease.aio.family import AsyncSemaphore  # noqa: PLC0415

        return AsyncSemaphore(self, name, permits, **options)

    def latch(self, name: str) -> AsyncCountDownLatch:
        """A count-down latch: ``try_set_count``, ``count_down``, ``wait``."""
        from redlease.aio.family import AsyncCountDownLatch  # noqa: PLC0415

        return AsyncCountDownLatch(self, name)

    def multi_lock(self, names: Iterable[str], **options: Any) -> AsyncMultiLock:
        """Several locks taken all or none; options as for :meth:`lock`."""
        from redlease.aio.family import AsyncMultiLock  # noqa: PLC0415

        return AsyncMultiLock(self, names, **options)

    def locked(
        self,
        template: str,
        *,
        ttl: float | None = None,
        timeout: float | None = -1,
        blocking: bool = True,
    ) -> Callable[[F], F]:
        """Decorate a function so each call runs under the lock named by ``template``.

        ``template`` is a ``str.format`` pattern over the function's parameters, e.g.
        ``"order:{user_id}"``; a call that cannot get the lock raises :class:`LockTimeout`.
        """

        def decorate(function: F) -> F:
            key = KeyTemplate(template, function)

            def lock_for(
                args: tuple[Any, ...], kwargs: dict[str, Any], owner: Hashable | None = None
            ) -> AsyncLock:
                name = key.render(args, kwargs)
                return self.lock(name, ttl=ttl, timeout=timeout, blocking=blocking, owner=owner)

            return wrap_locked(function, lock_for)

        return decorate

    def after_fork(self) -> None:
        super().after_fork()
        self.scripts = Scripts(self.client)
        self.notifier = AsyncNotifier(self.client, self.commands, self.clock, self._give_back_stray)
        self.renewer = AsyncRenewer(self)
        self._watching = False
        self.ready_publish = None
        self._finishing = set()

    async def _on_this_loop(self) -> None:
        """Work on the running event loop: move here when the previous loop is over.

        Moving drops the connections and workers of the old loop, and gives back, as lost,
        every lease still held there (its tasks are gone), so no lock stays held for its
        TTL by a request that can never release it. A loop still running elsewhere keeps
        the client: one client serves one loop at a time.
        """
        loop = current_loop()
        if loop is self._loop:
            return
        previous, self._loop = self._loop, loop
        if previous is None:
            return
        if not loop_is_over(previous):
            self._loop = previous
            raise InvalidArgument(
                "this AsyncLocks works on another event loop that is still running; "
                "make one AsyncLocks per event loop (or use the sync Locks from threads)"
            )
        orphans = self.renewals.leases()
        forget_connections(self.client)
        self.after_fork()
        for lease in orphans:
            with suppress(LockError, *NETWORK_ERRORS, ReplicaShortfall):
                await self.drive(give_back(lease.claim))
            fire(lease, lease.mark_lost("the event loop that held it is gone"))

    def adopt(self, lease: Lease, role: str | None) -> bool:
        if super().adopt(lease, role) or not self.renewer.running():
            self.renewer.wake()
            return True
        return False

    def reschedule(self, lease: Lease, sent_at: float) -> bool:
        if super().reschedule(lease, sent_at):
            self.renewer.wake()
            return True
        return False

    async def renew_batch(self, due: list[Lease]) -> list[bool | None]:
        """Renew due leases in one pipelined round trip; one answer per lease.

        With a Sentinel-managed client the sentinels are asked first whether the master
        moved; if so, idle connections and the wake-up links go to the new master.
        """
        try:
            if await master_moved(self.client):
                await self.notifier.reset()
        except NETWORK_ERRORS:
            logger.debug("could not ask the sentinels where the master is")
        batches = renewal_calls(due, per_slot=self.scripts.cluster)
        try:
            replies = await self.scripts.run_many([call for _, call in batches])
        except NETWORK_ERRORS as exc:
            replies = [exc] * len(batches)
        return renewal_answers(due, batches, replies)

    async def commands(self) -> PubSubCommands:
        """Which pub/sub commands this server has; asked once per client."""
        self.refuse_if_closed()
        await self._on_this_loop()
        if not self._watching:
            await self._follow_a_cluster()
            await self.notifier.watch_master()
            await self._warn_if_evicting()
            self._watching = True
        if self.pubsub_commands is None:
            try:
                await self.client.spublish(f"{self.prefix}:{{probe}}:wake", "")
            except ResponseErrors as exc:
                sharded = is_denied(exc) and await self._server_has_sharded_pubsub()
                self.pubsub_commands = PubSubCommands(sharded=sharded)
            else:
                self.pubsub_commands = PubSubCommands(sharded=True)
        self.ready_publish = self.pubsub_commands.publish
        return self.pubsub_commands

    async def _follow_a_cluster(self) -> None:
        """A plain client on a Redis Cluster node would meet MOVED on most names: from a
        URL, switch to a cluster client; given a plain client, say what to pass instead."""
        if self.scripts.cluster:
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
        self.client = _client(self._url, cluster=True)
        self.scripts = Scripts(self.client)
        self.notifier = AsyncNotifier(self.client, self.commands, self.clock, self._give_back_stray)

    async def _server_has_sharded_pubsub(self) -> bool:
        """The probe was denied (an ACL), which says nothing about the server: ask its
        version (sharded pub/sub came with Redis 7.0; every Valkey has it)."""
        try:
            info = await self.client.info("server")
        except (*ResponseErrors, *NETWORK_ERRORS):
            return False
        return has_sharded_pubsub(info)

    async def _warn_if_evicting(self) -> None:
        """Say once if the server may evict keys: a lock evicted under memory pressure is
        simply gone, and another client takes it."""
        try:
            config = await self.client.config_get("maxmemory*")
        except ResponseErrors:  # CONFIG is often forbidden (ACL, managed services)
            return
        policy = str(config.get("maxmemory-policy", "noeviction"))
        if str(config.get("maxmemory", "0")) != "0" and policy != "noeviction":
            logger.warning(
                "the server evicts keys under memory pressure (maxmemory-policy %s): a lock "
                "can vanish while held; use noeviction on servers that keep locks",
                policy,
            )

    async def publish_for(self, primitive: LeasedBase[Any]) -> str:
        """:meth:`commands_for` a primitive about to acquire: a failure is reported to the
        hooks as that acquisition's error (it happened before the acquisition began)."""
        try:
            return await self.commands_for(primitive.keys)
        except LockError as exc:
            primitive._report_failure(exc)
            raise

    async def commands_for(self, keys: LockKeys) -> str:
        """The publish command, or :class:`ServerUnavailable` naming the lock."""
        try:
            return (await self.commands()).publish
        except NETWORK_ERRORS as exc:
            raise unavailable(keys, "use", exc) from exc

    def atomic_for(self, keys: Sequence[LockKeys]) -> bool:
        """Whether one script may take these locks at once: one server, or one cluster slot."""
        return not self.scripts.cluster or one_slot(keys)

    async def obtain(self, owner: LeasedBase[Any], request: AcquireRequest) -> Grant | None:
        """Run an acquisition; an interrupted one gives back whatever it may have got."""
        try:
            return await self._obtain(request)
        except BaseException as exc:
            owner._observe(request, ERROR, error=exc)
            raise

    async def _obtain(self, request: AcquireRequest) -> Grant | None:
        try:
            grant: Grant | None = await self.drive(acquire_flow(request, self.clock))
        except (*INTERRUPTIONS, ServerUnavailable):
            await self._abandon(request.claim)
            raise
        except ReplicaShortfall as short:
            await self._abandon(request.claim)
            raise NotReplicated(
                f"lock {request.claim.keys.name!r} reached {short.confirmed} of {short.wanted} "
                "replicas in time; the acquisition was rolled back"
            ) from None
        return grant

    async def give_back(self, owner: LeasedBase[Any], lease: Lease) -> ReleaseOutcome:
        """Release a lease already taken off the books, and report how it ended.

        The release runs inline (an asyncio shield would cost a task and two more loop turns
        on every release). Only an interrupted release (a cancellation, Ctrl-C) pays more: it
        is sent again in the background while the interruption goes on to the caller, and the
        release latch gives the retry the same answer if the first attempt landed.
        """
        if lease.lost:  # past its deadline: tell the holder now, not when the reply comes
            fire(lease, lease.mark_lost(PAST_DEADLINE))
        try:
            code = await self.drive(release_flow(lease.claim))
        except INTERRUPTIONS:
            self._finish_in_background(lease.claim)
            raise
        except ReplicaShortfall as short:
            logger.warning("release of %r: %s", lease.name, short)
            code = int(short.reply)
        outcome, callbacks = owner._finish_release(lease, code)
        if callbacks:
            fire(lease, callbacks)
        return outcome

    def _finish_in_background(self, claim: Claim, *, withdraw: bool = False) -> None:
        """Send an interrupted release (or withdrawal) again from a worker of its own."""
        self._finishing = {worker for worker in self._finishing if worker.alive()}
        self._finishing.add(
            Worker(lambda: self._release_again(claim, withdraw), "redlease-release")
        )

    async def _release_again(self, claim: Claim, withdraw: bool) -> None:
        try:
            if withdraw:
                await sleep(LATE_COMMAND_S)
            await self.drive(release_flow(claim, withdraw=withdraw))
        except (Exception, ReplicaShortfall):
            logger.debug("could not finish an interrupted release of %r", claim.keys.name)

    def _give_back_stray(self, claim: Claim) -> None:
        """A hand-off reached a waiter that had already given up: give the lease back."""
        self._finishing = {worker for worker in self._finishing if worker.alive()}
        self._finishing.add(Worker(lambda: self._return_stray(claim), "redlease-stray"))

    async def _return_stray(self, claim: Claim) -> None:
        """After a moment (a waiter that took the lease by its own retry is on the books by
        then), give back the stray hand-off, unless that lease is held after all."""
        await sleep(LATE_COMMAND_S)
        if any(lease.token == claim.token for lease in self.renewals.leases()):
            return
        try:
            await self.drive(give_back(claim))
        except (Exception, ReplicaShortfall):
            logger.debug("could not give back a stray hand-off of %r", claim.keys.name)

    async def _abandon(self, claim: Claim) -> None:
        """An interrupted acquire may have been granted or queued: undo both, best effort.

        The attempt that was cut short may still be on its way on the connection the
        interruption closed, and run after this withdrawal: a second one follows shortly.
        """
        self._finish_in_background(claim.without_acks(), withdraw=True)
        try:
            flow = release_flow(claim.without_acks(), withdraw=True, attempts=1)
            await shielded(self.drive(flow))
        except (Exception, ReplicaShortfall):
            logger.debug("could not give back an interrupted grant of %r", claim.keys.name)

    async def drive(self, flow: Flow) -> Any:
        """Carry out a flow's operations until it returns; the waiter is always let go."""
        await self._on_this_loop()
        waiter: AsyncWaiter | None = None
        reply: Any = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    operation = flow.throw(error) if error is not None else flow.send(reply)
                except StopIteration as finished:
                    return finished.value
                error = None
                try:
                    if isinstance(operation, RunScript):
                        reply = await self.scripts.run(operation)
                    elif isinstance(operation, Subscribe):
                        if waiter is not None and waiter.channel != operation.channel:
                            await waiter.close()
                            waiter = None
                        if waiter is None:
                            waiter = await self.notifier.subscribe(
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
                await waiter.close()

    async def aclose(self) -> None:
        """Stop the workers (held leases are no longer renewed) and close an owned client.

        A closed client takes no new lease (``InvalidArgument``); leases it still holds can
        be released.
        """
        await self._on_this_loop()
        self.closed = True
        self.ready_publish = None
        await self.renewer.stop()
        await self.notifier.aclose()
        if self._owns_client:
            await self.client.aclose()

    async def __aenter__(self) -> AsyncLocks:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def _client(client: Redis | RedisCluster | str, cluster: bool) -> Redis | RedisCluster:
    if not isinstance(client, str):
        check_client(client, asyncio=ASYNCIO)
        return client
    return RedisCluster.from_url(client) if cluster else Redis.from_url(client)


class AsyncLeaseHandle(LockBase[LocksT]):
    """What every reentrant lock handle does the same way on top of its own acquire and
    release: one try, and the ``async with`` block that never runs its body unlocked."""

    async def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> Lease:
        raise NotImplementedError

    async def release(self) -> ReleaseOutcome:
        raise NotImplementedError

    async def try_acquire(self) -> Lease | None:
        """One attempt: the lease, or ``None`` when another owner holds the lock."""
        try:
            return await self.acquire(blocking=False)
        except LockTimeout:
            return None

    async def __aenter__(self) -> Lease:
        return await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        owner = self._owner()
        lease = self.locks.held(self.role, owner)
        outcome = await self._release_by(owner)
        self._lost_at_exit(lease, outcome, body_failed=exc_type is not None)

    async def _release_by(self, owner: Owner) -> ReleaseOutcome:
        """:meth:`release` for the owner the caller already looked up (the block's exit)."""
        return await self.release()


class AsyncLock(AsyncLeaseHandle["AsyncLocks"]):
    """A reentrant lease lock on one name.

    ``ttl`` is the lease length in seconds (millisecond precision). Without it the lease
    is 30 s and renewed by the client's renewal worker while held; with it the lease
    ends after ``ttl`` unless ``renew=True``. ``timeout`` is how long ``acquire`` and
    ``async with`` wait by default: ``-1`` (or ``None``) as long as it takes, ``0`` one try.
    The owner, for reentrancy and release, is the current task unless ``owner`` is given.
    Waiters queue; a release hands the lock straight to the first live one, though a
    newcomer may take a lock it finds free (see :class:`AsyncFairLock` for strict order).
    """

    def current_owner_ident(self) -> Owner:
        return current_owner()

    async def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> Lease:
        """Take the lock or raise :class:`LockTimeout` (also a ``TimeoutError``).

        ``timeout=None`` uses the lock's default, a negative one waits as long as it takes,
        ``0`` (or ``blocking=False``) tries once. Reentering a held lock only counts.
        """
        publish = self.locks.ready_publish
        if publish is None:
            publish = await self.commands()
        owner, held, request = self._plan_acquire(blocking, timeout, publish)
        if held is not None:
            return held
        assert request is not None
        return self._settle(owner, await self.locks.obtain(self, request), request, self.role)

    async def release(self) -> ReleaseOutcome:
        """Release (or count down a reentrant hold). Raises :class:`NotOwned` if not held.

        ``ReleaseOutcome.EXPIRED`` means the lease had already ended; the lease is then
        marked lost and its ``on_lost`` callbacks have run.
        """
        return await self._release_by(self._owner())

    async def _release_by(self, owner: Owner) -> ReleaseOutcome:
        lease = self._begin_release(owner)
        if lease is None:
            return ReleaseOutcome.STILL_HELD
        return await self.locks.give_back(self, lease)

    async def extend(self, ttl: float | None = None) -> Lease:
        """Set the held lease's remaining time to ``ttl`` (default: its TTL) from now."""
        lease, ttl_ms = self._begin_extend(ttl)
        result = await self.locks.drive(extend_flow(lease.claim, ttl_ms, self.locks.clock))
        callbacks = self._finish_extend(lease, ttl_ms, result, self.role)
        if callbacks is not None:
            fire(lease, callbacks)
            raise LeaseLost(self.name, lease.lost_reason or "lost")
        return lease

    async def locked(self) -> bool:
        """Whether anyone holds the lock right now."""
        await self.locks._on_this_loop()
        try:
            return bool(await self.locks.client.exists(self.keys.lease))
        except NETWORK_ERRORS as exc:
            raise unavailable(self.keys, "inspect", exc) from exc

    async def owned(self) -> bool:
        """Whether the current owner holds the lock, as the server sees it."""
        await self.locks._on_this_loop()
        try:
            return self._is_ours(await self.locks.client.get(self.keys.lease))
        except NETWORK_ERRORS as exc:
            raise unavailable(self.keys, "inspect", exc) from exc

    async def commands(self) -> str:
        return await self.locks.publish_for(self)


class AsyncFairLock(AsyncLock):
    """A lock served strictly in arrival order: a free lock goes to the first live waiter.

    A waiter that gave up or was cancelled leaves the queue, and one that died has no
    connection left: it is skipped (and its entry removed) the moment the lock would reach it.
    """

    fair = True
    kind = "fair"
