"""Policy shared by the sync and asyncio locks: options, reentrancy, lease bookkeeping.

Following filelock's shape, :class:`LockBase` owns every rule (timeouts, reentrancy,
what a release outcome means) and the flavoured subclasses only drive the flows of
:mod:`redlease.core.protocol` over their own I/O.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from redlease.core.lease import Lease, LostCallback, ReleaseOutcome
from redlease.core.protocol import AcquireRequest, Clock, Grant, release_reason
from redlease.core.renewal import RenewalSchedule
from redlease.core.subscriptions import PubSubCommands
from redlease.errors import InvalidArgument, LeaseLost, LockTimeout, NotOwned
from redlease.keys import DEFAULT_PREFIX, LockKeys, ttl_to_ms, validate_name, validate_prefix

CONTENDED_HINT_S = 1.0
HANDED_OVER = 2
DEFAULT_TTL = 30.0
"""Lease length when none is given; such leases are renewed while held (the watchdog)."""

TokenFactory = Callable[[], str]


def random_token() -> str:
    return secrets.token_urlsafe(16)


@dataclass(frozen=True)
class Owner:
    """Who holds a lease for reentrancy: a thread, a task, or an explicit id."""

    kind: str
    ident: Hashable
    label: str = field(default="", compare=False)

    def describe(self) -> str:
        return f"{self.kind} {self.label or self.ident}"


class LocksBase:
    """State of one client: held leases by (name, owner), renewals, server features."""

    def __init__(
        self,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Clock = time.monotonic,
        token_factory: TokenFactory = random_token,
    ) -> None:
        self.prefix = validate_prefix(prefix)
        self.clock = clock
        self.token_factory = token_factory
        self.renewals = RenewalSchedule()
        self.pubsub_commands: PubSubCommands | None = None
        self._held: dict[tuple[str, Owner], Lease] = {}
        self._contended_until: dict[str, float] = {}
        self._guard = threading.Lock()
        self._host = socket.gethostname()

    def keys(self, name: str) -> LockKeys:
        return LockKeys(validate_name(name), self.prefix)

    def new_token(self, owner: Owner) -> str:
        """A fresh random token; host, pid and owner ride along so operators can see the holder."""
        return f"{self.token_factory()}|{self._host}|{os.getpid()}|{owner.describe()}"

    def held(self, name: str, owner: Owner) -> Lease | None:
        with self._guard:
            return self._held.get((name, owner))

    def note_release(self, name: str, code: int) -> None:
        """A release that handed the lock to a waiter marks the name contended for a moment.

        The next acquire from this client then queues behind the waiters instead of racing
        them with an immediate try, which keeps hand-offs going to other processes (the
        releaser would otherwise win most races: it is the first to know the lock is free).
        """
        with self._guard:
            if code == HANDED_OVER:
                self._contended_until[name] = self.clock() + CONTENDED_HINT_S
            else:
                self._contended_until.pop(name, None)

    def contended(self, name: str) -> bool:
        with self._guard:
            until = self._contended_until.get(name)
            if until is not None and until < self.clock():
                del self._contended_until[name]
                return False
            return until is not None

    def held_leases(self) -> list[Lease]:
        with self._guard:
            return list(self._held.values())

    def adopt(self, lease: Lease, keys: LockKeys) -> bool:
        """Record a fresh grant and schedule its renewal before anyone can release it.

        True when the renewal worker must be woken to take the new lease into account.
        """
        with self._guard:
            self._held[(lease.name, _owner_of(lease))] = lease
        return lease.renewing and self.renewals.register(lease, keys)

    def forget(self, lease: Lease) -> None:
        """Stop renewing and drop the lease, synchronously, before the release is sent."""
        self.renewals.unregister(lease)
        with self._guard:
            key = (lease.name, _owner_of(lease))
            if self._held.get(key) is lease:
                del self._held[key]


def _owner_of(lease: Lease) -> Owner:
    assert isinstance(lease.owner, Owner)
    return lease.owner


LocksT = TypeVar("LocksT", bound=LocksBase)


class LockBase(Generic[LocksT]):
    """A handle on one named lock; cheap to create, holds no state but its options."""

    def __init__(
        self,
        locks: LocksT,
        name: str,
        *,
        ttl: float | None = None,
        renew: bool | None = None,
        timeout: float = -1,
        blocking: bool = True,
        owner: Hashable | None = None,
    ) -> None:
        self.locks = locks
        self.keys = locks.keys(name)
        self.name = self.keys.name
        self.ttl_ms = ttl_to_ms(DEFAULT_TTL if ttl is None else ttl)
        self.renew = ttl is None if renew is None else bool(renew)
        self.timeout = _check_timeout(timeout)
        self.blocking = bool(blocking)
        self._explicit_owner = None if owner is None else Owner("owner", owner)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl_ms / 1000:g}s>"

    def current_owner_ident(self) -> Owner:
        """The implicit owner: the calling thread or task (overridden per flavour)."""
        raise NotImplementedError

    def _owner(self) -> Owner:
        return self._explicit_owner or self.current_owner_ident()

    @property
    def lease(self) -> Lease | None:
        """The current owner's lease on this lock, if it holds one."""
        return self.locks.held(self.name, self._owner())

    def _plan_acquire(
        self, blocking: bool | None, timeout: float | None
    ) -> tuple[Owner, Lease | None, AcquireRequest]:
        """Reenter a held lease locally, or say what to ask the server for."""
        owner = self._owner()
        held = self.locks.held(self.name, owner)
        if held is not None:
            if held.lost:
                raise LeaseLost(self.name, f"cannot reenter: {held.lost_reason}")
            held.count += 1
        blocking = self.blocking if blocking is None else bool(blocking)
        resolved = self.timeout if timeout is None else _check_timeout(timeout)
        request = AcquireRequest(
            keys=self.keys,
            token=self.locks.new_token(owner),
            ttl_ms=self.ttl_ms,
            blocking=blocking and resolved != 0,
            timeout=None if resolved < 0 else resolved,
            contended=self.locks.contended(self.name),
        )
        return owner, held, request

    def _adopt(self, owner: Owner, grant: Grant | None, request: AcquireRequest) -> Lease | None:
        if grant is None:
            return None
        lease = Lease(
            name=self.name,
            token=grant.token,
            fence=grant.fence,
            ttl_ms=self.ttl_ms,
            owner=owner,
            acquired_at=grant.sent_at,
            expires_at=grant.sent_at + self.ttl_ms / 1000,
            renewing=self.renew,
        )
        self.locks.adopt(lease, self.keys)
        return lease

    def _timeout_error(self, request: AcquireRequest) -> LockTimeout:
        return LockTimeout(self.name, request.timeout if request.blocking else 0)

    def _begin_release(self) -> Lease | None:
        """The lease to release on the server, or ``None`` when an outer hold remains."""
        owner = self._owner()
        lease = self.locks.held(self.name, owner)
        if lease is None:
            raise NotOwned(
                f"lock {self.name!r} is not held by {owner.describe()}; nothing was released"
            )
        if lease.count > 1:
            lease.count -= 1
            return None
        self.locks.forget(lease)
        return lease

    def _finish_release(self, lease: Lease, code: int) -> tuple[ReleaseOutcome, list[LostCallback]]:
        self.locks.note_release(self.name, code)
        reason = release_reason(code)
        if reason is None:
            return ReleaseOutcome.RELEASED, []
        return ReleaseOutcome.EXPIRED, lease.mark_lost(reason)

    def _begin_extend(self, ttl: float | None) -> tuple[Lease, int]:
        lease = self.lease
        if lease is None:
            raise NotOwned(f"lock {self.name!r} is not held by {self._owner().describe()}")
        if lease.lost:
            raise LeaseLost(self.name, lease.lost_reason or "lost")
        return lease, ttl_to_ms(ttl) if ttl is not None else lease.ttl_ms

    def _finish_extend(
        self, lease: Lease, ttl_ms: int, result: tuple[bool, float]
    ) -> list[LostCallback] | None:
        """``None`` when extended; otherwise the lost-lease callbacks to fire before raising."""
        extended, sent_at = result
        if extended:
            lease.ttl_ms = ttl_ms
            lease.expires_at = sent_at + ttl_ms / 1000
            return None
        self.locks.forget(lease)
        return lease.mark_lost("extend found the lease gone or owned by another")

    def _is_ours(self, value: object) -> bool:
        lease = self.lease
        if lease is None or value is None:
            return False
        text = value.decode() if isinstance(value, bytes) else str(value)
        return text == lease.token

    @staticmethod
    def _lost_at_exit(lease: Lease | None, outcome: ReleaseOutcome, body_failed: bool) -> None:
        """After the body: a lease that ended under it is an error, unless the body failed."""
        if lease is None or body_failed:
            return
        if outcome is ReleaseOutcome.EXPIRED or lease.lost:
            raise LeaseLost(lease.name, lease.lost_reason or "the lease ended during the block")


def _check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout):
        raise InvalidArgument(f"timeout must be a number of seconds, got {timeout!r}")
    return float(timeout)
