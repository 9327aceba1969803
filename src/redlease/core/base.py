"""Policy shared by the sync and asyncio primitives: options, reentrancy, lease bookkeeping.

Following filelock's shape, the bases here own every rule (timeouts, reentrancy, what a
release outcome means) and the flavoured subclasses only drive the flows of
:mod:`redlease.core.protocol` over their own I/O. The client state they work on is
:class:`~redlease.core.client_state.LocksBase`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Generic

from redlease.core.claims import ExclusiveClaim, split_lease_value
from redlease.core.client_state import LocksT
from redlease.core.hooks import ACQUIRED, ERROR, TIMEOUT, AcquireEvent, is_silent
from redlease.core.lease import Lease, LostCallback, ReleaseOutcome, local_deadline
from redlease.core.ops import Claim
from redlease.core.owner import Owner, explicit_owner
from redlease.core.protocol import AcquireRequest, Grant, release_reason
from redlease.errors import InvalidArgument, LeaseLost, LockError, LockTimeout, NotOwned
from redlease.keys import SECONDS_TYPES, ttl_to_ms

WAIT_FOREVER = -1.0
"""A lock's default ``timeout``: ``None`` means it too, as it does for ``acquire``."""
DEFAULT_TTL = 30.0
"""Lease length when none is given; such leases are renewed while held (the watchdog)."""
DEFAULT_TTL_MS = ttl_to_ms(DEFAULT_TTL)


class LeasedBase(Generic[LocksT]):
    """Options and rules every leased primitive shares: TTL, renewal, timeout, owner."""

    _kind = "lock"
    """What hooks and ``redlease ls`` call this primitive."""

    def __init__(
        self,
        locks: LocksT,
        name: str,
        *,
        ttl: float | None = None,
        renew: bool | None = None,
        timeout: float | None = -1,
        blocking: bool = True,
        owner: Hashable | None = None,
        replicas: int | None = None,
    ) -> None:
        self._locks = locks
        self.keys = locks._keys_for(name)
        self.name = self.keys.name
        self._names: tuple[str, ...] = (self.name,)
        """The lock names it takes (a multi-lock's are several)."""
        self._ttl_ms = DEFAULT_TTL_MS if ttl is None else ttl_to_ms(ttl)
        self._renew = ttl is None if renew is None else bool(renew)
        self._timeout = WAIT_FOREVER if timeout is None else check_timeout(timeout)
        self._blocking = bool(blocking)
        self._explicit_owner = None if owner is None else explicit_owner(owner)
        self._acks = locks._acks if replicas is None else locks._replica_acks(replicas)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self._ttl_ms / 1000:g}s>"

    def _current_owner(self) -> Owner:
        """The implicit owner: the calling thread or task (overridden per flavour)."""
        raise NotImplementedError

    def _owner(self) -> Owner:
        return self._explicit_owner or self._current_owner()

    def _request(
        self, claim: Claim, blocking: bool | None, timeout: float | None
    ) -> AcquireRequest:
        blocking = self._blocking if blocking is None else bool(blocking)
        resolved = self._timeout if timeout is None else check_timeout(timeout)
        locks = self._locks
        hooks = locks._hooks
        return AcquireRequest(
            claim=claim,
            blocking=blocking and resolved != 0,
            timeout=None if resolved < 0 else resolved,
            contended=locks._contended(claim.keys.lease),
            started_at=locks._clock(),
            observation=None if is_silent(hooks) else hooks.acquire_started(self.name, self._kind),
            withdraws_itself=False,
        )

    def _report_failure(self, error: BaseException) -> None:
        """An acquisition that failed before it could begin (the server was unreachable)."""
        context = self._locks._hooks.acquire_started(self.name, self._kind)
        event = AcquireEvent(self.name, self._kind, ERROR, 0.0, None, error, names=self._names)
        self._locks._hooks.acquire_finished(context, event)

    def _observe(
        self,
        request: AcquireRequest,
        outcome: str,
        lease: Lease | None = None,
        error: BaseException | None = None,
        parts: tuple[Lease, ...] = (),
    ) -> None:
        hooks = self._locks._hooks
        if is_silent(hooks):
            return
        wait = self._locks._clock() - request.started_at
        event = AcquireEvent(self.name, self._kind, outcome, wait, lease, error, parts, self._names)
        hooks.acquire_finished(request.observation, event)

    def _lease(self, owner: Owner, grant: Grant) -> Lease:
        return Lease(
            name=self.name,
            token=grant.claim.token,
            fence=grant.fence,
            ttl_ms=self._ttl_ms,
            _owner=owner,
            _claim=grant.claim,
            acquired_at=grant.sent_at,
            expires_at=local_deadline(grant.sent_at, self._ttl_ms),
            _renewing=self._renew,
            _clock=self._locks._clock,
        )

    def _settle(
        self, owner: Owner, grant: Grant | None, request: AcquireRequest, role: str | None
    ) -> Lease:
        """The recorded lease of a grant, or the timeout error when nothing was granted."""
        if grant is None:
            self._observe(request, TIMEOUT)
            raise LockTimeout(self.name, request.timeout if request.blocking else 0)
        lease = self._lease(owner, grant)
        try:  # interrupted (a signal handler's exception): the caller gives the grant back
            self._locks._adopt(lease, role)
            if grant.contended:
                self._locks._note_contention(grant.claim.keys.lease)
            self._observe(request, ACQUIRED, lease)
        except BaseException:
            self._locks._forget(lease, role)
            raise
        return lease

    def _finish_release(
        self, lease: Lease, code: int, *, pending: bool = False
    ) -> tuple[ReleaseOutcome, list[LostCallback]]:
        """The release's outcome, reported to the hooks, and the callbacks of a lease it
        found lost; ``pending``: a lost lease whose release still goes on in the background
        (its answer may name the cause better than the deadline)."""
        self._locks._note_release(lease._claim.keys.lease, code)
        reason = release_reason(code)
        outcome = ReleaseOutcome.RELEASED if reason is None else ReleaseOutcome.EXPIRED
        hooks = self._locks._hooks
        if not is_silent(hooks):
            hooks.released(lease, self._kind, outcome, lease._held_for())
        return outcome, [] if reason is None or pending else lease._mark_lost(reason)

    def _finish_extend(
        self,
        lease: Lease,
        ttl_ms: int,
        result: tuple[bool, float],
        role: str | None,
        why: str = "extend found the lease gone or owned by another",
    ) -> list[LostCallback] | None:
        """``None`` when extended; otherwise the lost-lease callbacks to fire before raising.

        A lease that extend found gone stays on the owner's books (no longer renewed), so
        the owner's ``release`` and block exit report it as ``EXPIRED`` / ``LeaseLost``.
        """
        extended, sent_at = result
        if extended and self._locks._clock() < local_deadline(sent_at, ttl_ms):
            lease.ttl_ms = ttl_ms
            lease.expires_at = local_deadline(sent_at, ttl_ms)
            self._locks._reschedule(lease, sent_at)
            return None
        self._locks._renewals.unregister(lease)
        return lease._mark_lost(why)

    @staticmethod
    def _lost_at_exit(lease: Lease | None, outcome: ReleaseOutcome, body_failed: bool) -> None:
        """After the body: a lease that ended under it is an error, unless the body failed."""
        if lease is None or body_failed:
            return
        if outcome is ReleaseOutcome.EXPIRED or lease.lost:
            raise LeaseLost(lease.name, lease.lost_reason or "the lease ended during the block")


class LockBase(LeasedBase[LocksT]):
    """A reentrant lease on one name (exclusive, or one side of a read-write lock)."""

    _role_suffix = ""
    _fair = False

    @property
    def _role(self) -> str:
        """What reentrancy is counted on: the lease key, plus the side of a read-write lock."""
        return self.keys.lease + self._role_suffix

    def _claim(self, token: str, publish: str) -> Claim:
        return ExclusiveClaim(
            self.keys, token, self._ttl_ms, publish, self._fair, self._acks, self._locks._listener
        )

    @property
    def lease(self) -> Lease | None:
        """The current owner's lease on this lock, if it holds one."""
        return self._locks._held(self._role, self._owner())

    def _plan_acquire(
        self, blocking: bool | None, timeout: float | None, publish: str
    ) -> tuple[Owner, Lease | None, AcquireRequest | None]:
        """Reenter a held lease locally, or say what to ask the server for."""
        self._locks._refuse_a_second_loop()
        owner = self._owner()
        held = self._locks._held(self._role, owner)
        if held is not None:
            if timeout is not None:
                check_timeout(timeout)  # as :meth:`_request` does for a first acquire
            if held.lost:
                raise LeaseLost(
                    self.name,
                    f"cannot reenter: {held.lost_reason}; the ended lease stays this owner's "
                    "until it is released (release() then returns EXPIRED)",
                )
            held._count += 1
            return owner, held, None
        exclusive = self._kind in ("lock", "fair")  # what a multi-lock's parts conflict with
        multi = self._locks._multi_holding(self.keys.name, owner) if exclusive else None
        if multi is not None:  # the lock would wait on its own owner's part
            raise LockError(
                f"{owner.describe()} holds lock {self.name!r} in multi-lock {multi!r}: "
                "release that first"
            )
        claim = self._claim(self._locks._new_token(owner), publish)
        return owner, None, self._request(claim, blocking, timeout)

    def _begin_release(self, owner: Owner | None = None) -> Lease | ReleaseOutcome:
        """The lease to release on the server, or, when an outer hold remains, what the
        inner release reports: ``STILL_HELD``, or ``EXPIRED`` for a lease already known to
        have ended (found lost, or past its local deadline); nothing is sent either way."""
        self._locks._refuse_a_second_loop()
        if owner is None:
            owner = self._owner()
        role = self._role
        lease = self._locks._held(role, owner)
        if lease is None:
            raise NotOwned(
                f"lock {self.name!r} is not held by {owner.describe()}; nothing was released"
            )
        if lease._count > 1:
            lease._count -= 1
            return ReleaseOutcome.EXPIRED if lease.lost else ReleaseOutcome.STILL_HELD
        self._locks._forget(lease, role)
        return lease

    def _begin_extend(self, ttl: float | None) -> tuple[Lease, int]:
        self._locks._refuse_a_second_loop()
        lease = self.lease
        if lease is None:
            raise NotOwned(f"lock {self.name!r} is not held by {self._owner().describe()}")
        if lease.lost:
            raise LeaseLost(self.name, lease.lost_reason or "lost")
        return lease, ttl_to_ms(ttl) if ttl is not None else lease.ttl_ms

    def _is_ours(self, value: object) -> bool:
        """Whether ``value``, read at the lease's key, names the current owner's lease."""
        lease = self.lease
        if lease is None or value is None:
            return False
        text = value.decode() if isinstance(value, bytes) else str(value)
        return self._token_in(text) == lease.token

    @staticmethod
    def _token_in(value: str) -> str:
        """The owner token in what the lease key holds (an exclusive lease's
        ``<fence>:<token>``)."""
        return split_lease_value(value)[1]


def check_timeout(timeout: object) -> float:
    if type(timeout) is float and not math.isnan(timeout):  # the common case first
        return timeout
    if isinstance(timeout, bool) or not isinstance(timeout, SECONDS_TYPES):
        raise InvalidArgument(f"timeout must be a number of seconds, got {timeout!r}")
    try:
        seconds = float(timeout)
    except OverflowError:  # an int beyond any float: as long as inf
        return -math.inf if str(timeout).startswith("-") else math.inf
    except ValueError:  # a signalling NaN
        seconds = math.nan
    if math.isnan(seconds):
        raise InvalidArgument(f"timeout must be a number of seconds, got {timeout!r}")
    return seconds
