"""The lock handles of the asyncio flavour: the reentrant lock and the fair lock."""

from __future__ import annotations

from redlease.aio._flavor import current_owner, fire
from redlease.aio.engine import AsyncEngine
from redlease.compat import ResponseErrors
from redlease.core.base import LockBase
from redlease.core.client_state import LocksT
from redlease.core.failures import unavailable
from redlease.core.lease import Lease, ReleaseOutcome
from redlease.core.owner import Owner
from redlease.core.protocol import NETWORK_ERRORS, extend_flow
from redlease.core.replies import text_of
from redlease.errors import LeaseLost, LockTimeout, ServerRefused, WrongKeyType


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

    async def __aexit__(self, *exc_info: object) -> None:
        owner = self._owner()
        lease = self._locks._held(self._role, owner)
        outcome = await self._release_by(owner)
        self._lost_at_exit(lease, outcome, body_failed=exc_info[0] is not None)

    async def _release_by(self, owner: Owner) -> ReleaseOutcome:
        """:meth:`release` for the owner the caller already looked up (the block's exit)."""
        return await self.release()


class AsyncLock(AsyncLeaseHandle[AsyncEngine]):
    """A reentrant lease lock on one name.

    ``ttl`` is the lease length in seconds (millisecond precision). Without it the lease
    is 30 s and renewed by the client's renewal worker while held; with it the lease
    ends after ``ttl`` unless ``renew=True``. ``timeout`` is how long ``acquire`` and
    ``async with`` wait by default: ``-1`` (or ``None``) as long as it takes, ``0`` one try.
    The owner, for reentrancy and release, is the current task unless ``owner`` is given.
    Waiters queue; a release hands the lock straight to the first live one, though a
    newcomer may take a lock it finds free (see :class:`AsyncFairLock` for strict order).
    """

    def _current_owner(self) -> Owner:
        return current_owner()

    async def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> Lease:
        """Take the lock or raise :class:`LockTimeout` (also a ``TimeoutError``).

        ``timeout=None`` uses the lock's default, a negative one waits as long as it takes,
        ``0`` (or ``blocking=False``) tries once. Reentering a held lock only counts.
        """
        publish = self._locks._ready_publish
        if publish is None:
            publish = await self._commands()
        owner, held, request = self._plan_acquire(blocking, timeout, publish)
        if held is not None:
            return held
        assert request is not None
        return await self._locks._obtain(self, request, owner, self._role)

    async def release(self) -> ReleaseOutcome:
        """Release (or count down a reentrant hold). Raises :class:`NotOwned` if not held.

        ``ReleaseOutcome.EXPIRED`` means the lease had already ended; the lease is then
        marked lost and its ``on_lost`` callbacks have run.
        """
        return await self._release_by(self._owner())

    async def _release_by(self, owner: Owner) -> ReleaseOutcome:
        lease = self._begin_release(owner)
        if isinstance(lease, ReleaseOutcome):
            return lease
        return await self._locks._give_back(self, lease)

    async def extend(self, ttl: float | None = None) -> Lease:
        """Set the held lease's remaining time to ``ttl`` (default: its TTL) from now."""
        lease, ttl_ms = self._begin_extend(ttl)
        result = await self._locks._drive(extend_flow(lease._claim, ttl_ms, self._locks._clock))
        callbacks = self._finish_extend(lease, ttl_ms, result, self._role)
        if callbacks is not None:
            fire(lease, callbacks)
            raise LeaseLost(self.name, lease.lost_reason or "lost")
        return lease

    async def locked(self) -> bool:
        """Whether anyone holds the lock right now."""
        return await self._peek(self.keys.lease) is not None

    async def owned(self) -> bool:
        """Whether the current owner holds the lock, as the server sees it."""
        return self._is_ours(await self._peek(self.keys.lease))

    async def _peek(self, key: str) -> object:
        """The lease at ``key`` (``None``: free); another program's value there is a
        :class:`WrongKeyType`, as for every other call."""
        return await self._look("string with an expiry (a lease)", "GET", key)

    async def _look(self, expected: str, command: str, key: str, *args: object) -> object:
        """One read-only command on ``key``, whose errors are ours: a key of another type
        is a :class:`WrongKeyType` (``expected`` names what belongs there), another refusal
        (a cluster that is down) :class:`ServerRefused`, and no answer (no cluster node
        either) :class:`ServerUnavailable`."""
        try:
            await self._locks._ready()
            try:
                return await self._locks.client.execute_command(command, key, *args)
            except ResponseErrors as exc:
                if "WRONGTYPE" not in str(exc):
                    raise ServerRefused(f"the server refused a look at {key!r}: {exc}") from exc
                found = text_of(await self._locks.client.type(key))
                raise WrongKeyType(key, found, expected) from None
        except NETWORK_ERRORS as exc:
            raise unavailable(self.keys, "inspect", exc) from exc

    async def _commands(self) -> str:
        return await self._locks._publish_for(self)


class AsyncFairLock(AsyncLock):
    """A lock served strictly in arrival order: a free lock goes to the first live waiter.

    A waiter that gave up or was cancelled leaves the queue, and one that died has no
    connection left: it is skipped (and its entry removed) the moment the lock would reach it.
    """

    _fair = True
    _kind = "fair"
