# Generated from redlease/aio/family.py by tools/unasync.py; edit that file instead.
"""The lock family of the sync flavour: read-write lock, semaphore, latch, multi-lock."""

from __future__ import annotations

from types import TracebackType
from typing import Any

from redlease.core.base import check_timeout
from redlease.core.claims import SharedClaim
from redlease.core.family import (
    MultiLockBase,
    ReadLockBase,
    SemaphoreBase,
    WriteLockBase,
)
from redlease.core.hooks import ACQUIRED, ERROR, TIMEOUT
from redlease.core.lease import Lease, MultiLease, ReleaseOutcome
from redlease.core.multi import multi_acquire_flow
from redlease.core.ops import RunScript
from redlease.core.owner import Owner
from redlease.core.protocol import call_flow, latch_wait_flow
from redlease.core.replication import ReplicaShortfall
from redlease.errors import InvalidArgument, LeaseLost, LockTimeout
from redlease.keys import ttl_to_ms
from redlease.scripts import ScriptName
from redlease.sync._flavor import current_owner, fire
from redlease.sync.engine import Engine
from redlease.sync.handle import Lock


class ReadLock(ReadLockBase[Engine], Lock):
    """Readers share the lock; each reader's hold is a lease of its own."""

    def locked(self) -> bool:
        """Whether any reader holds the lock now."""
        return self.readers() > 0

    def readers(self) -> int:
        """How many readers hold the lock now (expired ones do not count)."""
        claim = SharedClaim(self.keys, "-", self._ttl_ms, "publish", "r")
        return int(self._locks._drive(call_flow(claim.count_op(), self.keys, "inspect")))

    def owned(self) -> bool:
        lease = self.lease  # with none, the server is still asked: another program's value
        token = "" if lease is None else lease.token
        found = self._look("sorted set (the holders)", "ZSCORE", self.keys.holders, token)
        return lease is not None and found is not None


class WriteLock(WriteLockBase[Engine], Lock):
    """One writer at a time, and no reader meanwhile."""

    def locked(self) -> bool:
        return self._peek(self.keys.writer) is not None

    def owned(self) -> bool:
        return self._is_ours(self._peek(self.keys.writer))

    def _release_by(self, owner: Owner) -> ReleaseOutcome:
        reader = self._downgraded_reader(owner)
        if reader is not None:
            assert isinstance(reader, ReadLock)
            return reader._release_by(owner)
        return super()._release_by(owner)

    def downgrade(self) -> Lease:
        """Turn the held write lease into a read lease, letting waiting readers in.

        The returned lease keeps the token and fence; release it through ``rw.read``.
        """
        lease, reader = self._begin_downgrade()
        code = self._locks._drive(call_flow(reader.downgrade_op(), self.keys, "downgrade"))
        read, callbacks = self._finish_downgrade(lease, reader, int(code))
        if read is None:
            fire(lease, callbacks)
            raise LeaseLost(self.name, lease.lost_reason or "lost")
        return read


class ReadWriteLock:
    """Many readers or one writer, writer-preferring: ``rw.read`` and ``rw.write``."""

    def __init__(self, locks: Engine, name: str, **options: Any) -> None:
        self.read = ReadLock(locks, name, **options)
        self.write = WriteLock(locks, name, **options)
        self.write._reader = self.read
        self.name = self.read.name


class Semaphore(SemaphoreBase[Engine]):
    """``permits`` leased places: a crashed holder's permit returns when its lease ends."""

    def _current_owner(self) -> Owner:
        return current_owner()

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> Lease:
        """Take a permit (its lease's token is the permit id) or raise :class:`LockTimeout`."""
        owner = self._owner()
        publish = self._locks._publish_for(self)
        request = self._request(self._claim(owner, publish), blocking, timeout)
        return self._locks._obtain(self, request, owner, None)

    def try_acquire(self) -> Lease | None:
        try:
            return self.acquire(blocking=False)
        except LockTimeout:
            return None

    def release(self, lease: Lease) -> ReleaseOutcome:
        """Give a permit back (handing it to the first waiter that fits)."""
        self._begin_release(lease)
        return self._locks._give_back(self, lease)

    def available(self) -> int:
        """Permits free right now (expired holders' permits count as free)."""
        claim = SharedClaim(self.keys, "-", self._ttl_ms, "publish", "r", self._permits)
        return int(self._locks._drive(call_flow(claim.available_op(), self.keys, "inspect")))

    def __enter__(self) -> Lease:
        return self._push(self.acquire())

    def __exit__(self, *exc_info: object) -> None:
        lease = self._pop()
        outcome = self.release(lease)
        self._lost_at_exit(lease, outcome, body_failed=exc_info[0] is not None)


MAX_COUNT = 2**53 - 1
"""The largest latch count: the script counts in Lua numbers, exact up to here."""


class CountDownLatch:
    """Wait until ``count`` events happened (``count_down`` calls), from any process."""

    def __init__(self, locks: Engine, name: str) -> None:
        self._locks = locks
        self.keys = locks._keys_for(name)
        self.name = self.keys.name

    def try_set_count(self, count: int, ttl: float | None = None) -> bool:
        """Start the latch at ``count``; False if it is already counting."""
        if isinstance(count, bool) or not isinstance(count, int) or not 0 <= count <= MAX_COUNT:
            raise InvalidArgument(f"count must be an int from 0 to 2^53 - 1, got {count!r}")
        ttl_ms = 0 if ttl is None else ttl_to_ms(ttl)
        return bool(self._call("set", count, ttl_ms))

    def count_down(self) -> int:
        """One event happened; returns the count left (waiters wake when it reaches 0)."""
        return int(self._call("down"))

    def count(self) -> int:
        return int(self._call("get"))

    def wait(self, timeout: float | None = None) -> bool:
        """True once the count is zero (or no count is set); False after ``timeout``
        seconds (``None``: no limit; 0 or less: look once)."""
        timeout = None if timeout is None else check_timeout(timeout)
        flow = latch_wait_flow(self._op("get"), self.keys, timeout, self._locks._clock)
        return bool(self._locks._drive(flow))

    def _op(self, operation: str, count: int = 0, ttl_ms: int = 0) -> RunScript:
        publish = self._locks._commands_for(self.keys)
        return RunScript(
            ScriptName.COUNTDOWN,
            (self.keys.count,),
            (operation, count, publish, self.keys.broadcast, ttl_ms),
            idempotent=operation != "down",
        )

    def _call(self, operation: str, count: int = 0, ttl_ms: int = 0) -> Any:
        op = self._op(operation, count, ttl_ms)
        return self._locks._drive(call_flow(op, self.keys, _LATCH_ACTIONS[operation]))


_LATCH_ACTIONS = {"set": "set the count of", "down": "count down", "get": "read"}
"""What a latch call was doing, for an error's "could not ... lock 'name'"."""


class MultiLock(MultiLockBase[Engine]):
    """Several locks taken all or none.

    On one server (or when all names share a cluster slot) the taking is one atomic step.
    Across cluster slots it is not atomic: the locks are taken one by one in name order
    and given back on failure, which never deadlocks but lets others see a partial hold
    for a moment.
    """

    def _current_owner(self) -> Owner:
        return current_owner()

    def acquire(self, blocking: bool | None = None, timeout: float | None = None) -> MultiLease:
        owner = self._owner()
        publish = self._locks._publish_for(self)
        claims = self._claims(owner, publish)
        request = self._request(claims[0], blocking, timeout)
        atomic = self._locks._atomic_for(self._all_keys)
        flow = multi_acquire_flow(claims, atomic, request, self._locks._clock)
        try:  # the parts are given back until the caller has them, whatever comes first
            held = self._adopt_all(owner, claims, self._locks._drive(flow))
            if held is not None:
                self._observe(request, ACQUIRED, held.leases[0], parts=tuple(held.leases))
                return held
        except ReplicaShortfall as short:
            error = short.rolled_back(self.name)
            self._observe(request, ERROR, error=error)
            self._locks._undo(claims)
            raise error from None
        except BaseException as exc:
            self._drop(owner)
            self._observe(request, ERROR, error=exc)
            self._locks._undo(claims, exc)
            raise
        self._observe(request, TIMEOUT)
        raise LockTimeout(self.name, request.timeout if request.blocking else 0)

    def release(self) -> ReleaseOutcome:
        """Release every part; ``EXPIRED`` if any part had already ended."""
        held = self._begin_release()
        outcomes = [self._locks._give_back(self, lease) for lease in held.leases]
        if ReleaseOutcome.EXPIRED in outcomes:
            return ReleaseOutcome.EXPIRED
        return ReleaseOutcome.RELEASED

    def __enter__(self) -> MultiLease:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        held = self._holding(self._owner())
        outcome = self.release()
        if (
            held is not None
            and exc_type is None
            and (outcome is ReleaseOutcome.EXPIRED or held.lost)
        ):
            raise LeaseLost(self.name, held.lost_reason or "a part ended during the block")
