"""The rules of the lock family beyond the plain lock: read-write, semaphore, latch, multi.

Like :mod:`redlease.core.base`, nothing here does I/O; :mod:`redlease.aio.family` and its
generated sync twin only drive the flows.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

from redlease.core.base import LeasedBase, LockBase
from redlease.core.claims import ExclusiveClaim, SharedClaim
from redlease.core.client_state import LocksT
from redlease.core.hooks import ACQUIRED, AcquireEvent, is_silent
from redlease.core.lease import Lease, LostCallback, MultiLease, ReleaseOutcome, local_deadline
from redlease.core.ops import Claim
from redlease.core.owner import Owner
from redlease.errors import InvalidArgument, LockError, NotOwned
from redlease.keys import LockKeys

READ, WRITE = "#read", "#write"


class ReadLockBase(LockBase[LocksT]):
    """The shared side of a read-write lock: many readers, each with a lease of its own."""

    _role_suffix = READ
    _kind = "read"

    def _claim(self, token: str, publish: str) -> Claim:
        if self._locks._held(self.keys.lease + WRITE, self._owner()) is not None:
            raise LockError(
                f"{self._owner().describe()} holds the write lock of {self.name!r}; "
                "call downgrade() on the write lock to become a reader instead"
            )
        return SharedClaim(
            self.keys,
            token,
            self._ttl_ms,
            publish,
            "r",
            acks=self._acks,
            listener=self._locks._listener,
        )


class WriteLockBase(LockBase[LocksT]):
    """The exclusive side of a read-write lock: writers wait for readers to leave, and
    readers that arrive while a writer waits queue behind it (writers cannot starve)."""

    _role_suffix = WRITE
    _kind = "write"

    @staticmethod
    def _token_in(value: str) -> str:
        return value  # the writer key holds the token itself

    def __init__(self, locks: LocksT, name: str, **options: object) -> None:
        super().__init__(locks, name, **options)  # type: ignore[arg-type]
        self._reader: LockBase[LocksT] | None = None
        """The read side of the same read-write lock (set by the read-write lock)."""
        self._downgraded: set[str] = set()
        """Tokens of write holds downgraded into read holds, not yet released."""

    def _downgraded_reader(self, owner: Owner) -> LockBase[LocksT] | None:
        """The read side, when ``owner``'s write hold was downgraded into a read hold there:
        releasing the write side (the end of its ``with`` block) then ends that read hold."""
        if self._reader is None or self._locks._held(self._role, owner) is not None:
            return None
        read = self._locks._held(self.keys.lease + READ, owner)
        if read is None or read.token not in self._downgraded:
            return None
        self._downgraded.discard(read.token)
        return self._reader

    def _claim(self, token: str, publish: str) -> Claim:
        if self._locks._held(self.keys.lease + READ, self._owner()) is not None:
            raise LockError(
                f"{self._owner().describe()} holds a read lock of {self.name!r}; a reader "
                "cannot upgrade (two upgrading readers would wait on each other forever)"
            )
        return SharedClaim(
            self.keys,
            token,
            self._ttl_ms,
            publish,
            "w",
            acks=self._acks,
            listener=self._locks._listener,
        )

    def _begin_downgrade(self) -> tuple[Lease, SharedClaim]:
        self._locks._refuse_a_second_loop()
        lease = self.lease
        if lease is None:
            raise NotOwned(f"write lock {self.name!r} is not held by {self._owner().describe()}")
        if lease._count > 1:
            raise LockError(
                f"write lock {self.name!r} is held {lease._count} times; downgrade "
                "releases the write hold, so release the inner holds first"
            )
        claim = lease._claim
        assert isinstance(claim, SharedClaim)
        return lease, SharedClaim(
            claim.keys,
            claim.token,
            claim.ttl_ms,
            claim.publish,
            "r",
            acks=claim.acks,
            listener=claim.listener,
        )

    def _finish_downgrade(
        self, lease: Lease, reader: SharedClaim, code: int
    ) -> tuple[Lease | None, list[LostCallback]]:
        """The reader's lease once the server agreed; else the write lease's lost callbacks."""
        self._locks._forget(lease, self._role)
        if code != 1:
            self._report_downgrade(lease, None)
            return None, lease._mark_lost("the write lease had ended before the downgrade")
        read = Lease(
            name=lease.name,
            token=lease.token,
            fence=lease.fence,
            ttl_ms=lease.ttl_ms,
            _owner=lease._owner,
            _claim=reader,
            acquired_at=lease.acquired_at,
            expires_at=lease.expires_at,
            _renewing=lease._renewing,
            _clock=lease._clock,
            _held_since=lease._clock(),
        )
        self._locks._adopt(read, self.keys.lease + READ)
        self._downgraded.add(read.token)
        self._report_downgrade(lease, read)
        return read, []

    def _report_downgrade(self, write: Lease, read: Lease | None) -> None:
        """To the hooks, a downgrade is the write lease released and a read lease acquired
        at once (so a gauge of held leases moves from one kind to the other); one that
        found the write lease ended (no ``read``), that lease released as ``EXPIRED``."""
        hooks = self._locks._hooks
        if is_silent(hooks):
            return
        outcome = ReleaseOutcome.EXPIRED if read is None else ReleaseOutcome.RELEASED
        hooks.released(write, self._kind, outcome, write._held_for())
        if read is None:
            return
        context = hooks.acquire_started(self.name, ReadLockBase._kind)
        hooks.acquire_finished(
            context, AcquireEvent(self.name, ReadLockBase._kind, ACQUIRED, 0.0, read)
        )


class SemaphoreBase(LeasedBase[LocksT]):
    """``permits`` places, each granted with a lease of its own.

    Every client of one semaphore must use the same ``permits``. Not reentrant: each
    acquire takes another permit, released by passing its lease back.
    """

    _kind = "semaphore"

    def __init__(self, locks: LocksT, name: str, permits: int, **options: object) -> None:
        super().__init__(locks, name, **options)  # type: ignore[arg-type]
        if isinstance(permits, bool) or not isinstance(permits, int) or permits < 1:
            raise InvalidArgument(f"permits must be a positive int, got {permits!r}")
        self._permits = permits
        self._entered: dict[Hashable, list[Lease]] = {}

    def _claim(self, owner: Owner, publish: str) -> SharedClaim:
        return SharedClaim(
            self.keys,
            self._locks._new_token(owner),
            self._ttl_ms,
            publish,
            "r",
            self._permits,
            self._acks,
            self._locks._listener,
        )

    def _begin_release(self, lease: Lease) -> None:
        if not isinstance(lease, Lease) or lease._claim.keys != self.keys:
            raise NotOwned(f"{lease!r} is not a permit of semaphore {self.name!r}")
        self._locks._forget(lease, None)

    def _push(self, lease: Lease) -> Lease:
        self._entered.setdefault(self._owner(), []).append(lease)
        return lease

    def _pop(self) -> Lease:
        stack = self._entered.get(self._owner())
        if not stack:
            raise NotOwned(f"no permit of {self.name!r} was taken by this with block")
        lease = stack.pop()
        if not stack:
            del self._entered[self._owner()]
        return lease


class MultiLockBase(LeasedBase[LocksT]):
    """Several exclusive locks taken all or none (see :func:`multi_acquire_flow`)."""

    _kind = "multi"

    def __init__(self, locks: LocksT, names: Iterable[str], **options: object) -> None:
        keys = {checked.name: checked for checked in map(locks._keys_for, _names(names))}
        if not keys:
            raise InvalidArgument("a multi-lock needs at least one lock name")
        self._all_keys: list[LockKeys] = [keys[name] for name in sorted(keys)]
        super().__init__(locks, self._all_keys[0].name, **options)  # type: ignore[arg-type]
        self._names = tuple(sorted(keys))  # what the client keeps its holdings by
        self.name = "+".join(self._names)

    def _holding(self, owner: Hashable) -> MultiLease | None:
        """What ``owner`` holds of this set of names: kept by the client, like a lock's
        lease, so any handle of the same names and owner can release it."""
        return self._locks._multi_by.get((self._names, owner))

    def _claims(self, owner: Owner, publish: str) -> list[Claim]:
        self._locks._refuse_a_second_loop()
        if self._holding(owner) is not None:
            raise LockError(f"multi-lock {self.name!r} is already held by {owner.describe()}")
        for keys in self._all_keys:  # it would wait on its own owner, for ever
            if self._locks._held(keys.lease, owner) is not None:
                raise LockError(
                    f"{owner.describe()} already holds lock {keys.name!r}: a multi-lock of it "
                    "would wait on its own holder; release it first"
                )
            other = self._locks._multi_holding(keys.name, owner)
            if other is not None:
                raise LockError(
                    f"{owner.describe()} already holds lock {keys.name!r} in multi-lock "
                    f"{other!r}: a multi-lock of it would wait on its own holder"
                )
        token = self._locks._new_token(owner)
        return [
            ExclusiveClaim(
                keys, token, self._ttl_ms, publish, acks=self._acks, listener=self._locks._listener
            )
            for keys in self._all_keys
        ]

    def _adopt_all(
        self, owner: Owner, claims: list[Claim], result: tuple[list[int], float] | None
    ) -> MultiLease | None:
        if result is None:
            return None
        fences, sent_at = result
        leases: list[Lease] = []
        try:
            self._adopt_each(owner, claims, fences, sent_at, leases)
        except BaseException:  # interrupted: the caller gives every part back
            for lease in leases:
                self._locks._forget(lease, None)
            raise
        held = MultiLease(leases)
        with self._locks._guard:
            self._locks._multi_by[(self._names, owner)] = held
        return held

    def _adopt_each(
        self,
        owner: Owner,
        claims: list[Claim],
        fences: list[int],
        sent_at: float,
        leases: list[Lease],
    ) -> None:
        for keys, claim, fence in zip(self._all_keys, claims, fences, strict=True):
            lease = Lease(
                name=keys.name,
                token=claim.token,
                fence=fence,
                ttl_ms=self._ttl_ms,
                _owner=owner,
                _claim=claim,
                acquired_at=sent_at,
                expires_at=local_deadline(sent_at, self._ttl_ms),
                _renewing=self._renew,
                _clock=self._locks._clock,
            )
            leases.append(lease)
            self._locks._adopt(lease, None)

    def _drop(self, owner: Owner) -> None:
        """Take what an interrupted acquisition recorded off the books (it is given back)."""
        with self._locks._guard:
            held = self._locks._multi_by.pop((self._names, owner), None)
        for lease in held.leases if held is not None else []:
            self._locks._forget(lease, None)

    def _begin_release(self) -> MultiLease:
        self._locks._refuse_a_second_loop()
        owner = self._owner()
        with self._locks._guard:
            held = self._locks._multi_by.pop((self._names, owner), None)
        if held is None:
            raise NotOwned(f"multi-lock {self.name!r} is not held by {owner.describe()}")
        for lease in held.leases:
            self._locks._forget(lease, None)
        return held


def _names(names: Iterable[str]) -> list[str]:
    if isinstance(names, str):
        raise InvalidArgument("a multi-lock takes a list of names, not one str")
    return list(names)
