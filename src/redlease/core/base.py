"""Policy shared by the sync and asyncio primitives: options, reentrancy, lease bookkeeping.

Following filelock's shape, the bases here own every rule (timeouts, reentrancy, what a
release outcome means) and the flavoured subclasses only drive the flows of
:mod:`redlease.core.protocol` over their own I/O.
"""

from __future__ import annotations

import binascii
import math
import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from redlease.core.claims import ExclusiveClaim, split_lease_value
from redlease.core.hooks import ACQUIRED, ERROR, TIMEOUT, AcquireEvent, Hooks, is_silent
from redlease.core.lease import Lease, LostCallback, ReleaseOutcome, local_deadline
from redlease.core.ops import Claim
from redlease.core.protocol import HANDED_OVER, AcquireRequest, Clock, Grant, release_reason
from redlease.core.renewal import RenewalSchedule
from redlease.core.replication import ReplicaAcks
from redlease.core.subscriptions import PubSubCommands
from redlease.errors import InvalidArgument, LeaseLost, LockTimeout, NotOwned
from redlease.keys import DEFAULT_PREFIX, LockKeys, ttl_to_ms, validate_name, validate_prefix

WAIT_FOREVER = -1.0
"""A lock's default ``timeout``: ``None`` means it too, as it does for ``acquire``."""
CONTENDED_HINT_S = 1.0
DEFAULT_REPLICA_TIMEOUT_MS = 1000
DEFAULT_TTL = 30.0
"""Lease length when none is given; such leases are renewed while held (the watchdog)."""
DEFAULT_TTL_MS = ttl_to_ms(DEFAULT_TTL)
KEYS_CACHE_SIZE = 1024
"""Lock names whose validated keys a client remembers (all forgotten when it fills up)."""

TokenFactory = Callable[[], str]


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def random_token() -> str:
    """``secrets.token_urlsafe(16)``, spelled out: 128 random bits, 22 URL-safe characters."""
    return binascii.b2a_base64(os.urandom(16), newline=False).translate(_URLSAFE)[:22].decode()


@dataclass(frozen=True)
class Owner:
    """Who holds a lease for reentrancy: a thread, a task, or an explicit id."""

    kind: str
    ident: Hashable
    label: str = field(default="", compare=False)

    def describe(self) -> str:
        """How the owner reads in messages and in tokens (what ``redlease ls`` shows).

        An ``owner=`` object without a text of its own reads as its type and the last six
        hex digits of its id (``owner Job#3fa2c0``), not ``<Job object at 0x7f…>``; a long
        text is cut, since it travels in every token of the owner.
        """
        if self.label:
            return f"{self.kind} {self.label}"
        ident = self.ident
        kind = type(ident)
        if kind.__str__ is object.__str__ and kind.__repr__ is object.__repr__:
            text = f"{kind.__name__}#{id(ident) & 0xFFFFFF:06x}"
        else:
            text = str(ident)
        return f"{self.kind} {text if len(text) <= 64 else text[:63] + '…'}"


class LocksBase:
    """State of one client: held leases by (role, owner), renewals, server features."""

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
        self.hooks: Hooks = Hooks()
        """Where acquisitions, releases, renewals and losses are reported (see ``hooks=``)."""
        self.acks: ReplicaAcks | None = None
        self.replica_template = ReplicaAcks(1, DEFAULT_REPLICA_TIMEOUT_MS)
        """Replica acknowledgement every lock write of this client waits for (none by default)."""
        self._held: dict[tuple[str, Hashable], Lease] = {}
        self._contended_until: dict[str, float] = {}
        self._guard = threading.Lock()
        self._host = socket.gethostname()
        self._token_tail = self._holder_tail()
        self._keys: dict[str, LockKeys] = {}
        self.closed = False
        """Set by ``close()``: no new lease is granted from then on."""
        self.listener = secrets.token_hex(4)
        """This client's id: hand-offs to its waiters arrive on its channel per slot."""
        _clients.add(self)

    def refuse_if_closed(self) -> None:
        """A closed client must not hand out leases nobody would renew."""
        if self.closed:
            raise InvalidArgument(
                f"this {type(self).__name__} was closed: it takes no new lease (its workers "
                "are stopped); make a new client"
            )

    def after_fork(self) -> None:
        """In a forked child: forget the parent's leases; its workers start afresh if needed.

        The child shares nothing it could harm the parent with: it neither renews nor
        releases a lease the parent holds (``release`` there raises ``NotOwned``).
        """
        self._held = {}
        self._contended_until = {}
        self._guard = threading.Lock()
        self._token_tail = self._holder_tail()
        self.renewals = RenewalSchedule()
        self.listener = secrets.token_hex(4)

    def replica_acks(self, replicas: int) -> ReplicaAcks | None:
        """What waiting for ``replicas`` confirmations means with this client's settings."""
        if replicas == 0:
            return None
        template = self.replica_template
        return ReplicaAcks(replicas, template.timeout_ms, template.aof)

    def keys(self, name: str) -> LockKeys:
        """The validated keys of ``name``; remembered, since most code locks a few names often."""
        keys = self._keys.get(name) if type(name) is str else None
        if keys is None or keys.prefix is not self.prefix:
            keys = LockKeys(validate_name(name), self.prefix)
            if type(name) is str:
                if len(self._keys) >= KEYS_CACHE_SIZE:
                    self._keys.clear()
                self._keys[name] = keys
        return keys

    def _holder_tail(self) -> str:
        """The host and pid part of every token, made once (again in a forked child)."""
        return f"|{self._host}|{os.getpid()}|"

    def new_token(self, owner: Owner) -> str:
        """A fresh random token; host, pid and owner ride along so operators can see the holder."""
        return f"{self.token_factory()}{self._token_tail}{owner.describe()}"

    def held(self, role: str, owner: Hashable) -> Lease | None:
        # one dict read is atomic: no guard needed (writers still take it)
        return self._held.get((role, owner))

    def held_leases(self) -> list[Lease]:
        with self._guard:
            return list(self._held.values())

    def note_release(self, name: str, code: int) -> None:
        """A release that handed the lock to a waiter marks the name contended for a moment.

        The next acquire from this client then queues behind the waiters instead of racing
        them with an immediate try, which keeps hand-offs going to other processes (the
        releaser would otherwise win most races: it is the first to know the lock is free).
        """
        if code != HANDED_OVER and not self._contended_until:
            return  # the common case: nothing to forget
        with self._guard:
            if code == HANDED_OVER:
                self._contended_until[name] = self.clock() + CONTENDED_HINT_S
            else:
                self._contended_until.pop(name, None)

    def note_contention(self, name: str) -> None:
        """An acquisition of ``name`` found it held: the next one of this client joins the
        queue with its first try (one script, on the client's channel, already listening)."""
        with self._guard:
            self._contended_until[name] = self.clock() + CONTENDED_HINT_S

    def contended(self, name: str) -> bool:
        if not self._contended_until:
            return False
        with self._guard:
            until = self._contended_until.get(name)
            if until is not None and until < self.clock():
                del self._contended_until[name]
                return False
            return until is not None

    def adopt(self, lease: Lease, role: str | None) -> bool:
        """Record a fresh grant and schedule its renewal before anyone can release it.

        ``role`` names the lease for reentrancy (``None``: not reentrant, e.g. a permit).
        Every lease is watched for its local deadline, renewed or not. True when the
        renewal worker must be woken to take the new lease into account.
        """
        if role is not None:
            with self._guard:
                self._held[(role, lease.owner)] = lease
        if not is_silent(self.hooks):
            lease.on_lost(self.hooks.lost)
        return self.renewals.register(lease)

    def reschedule(self, lease: Lease, sent_at: float) -> bool:
        """An ``extend`` sent at ``sent_at`` succeeded: renew and watch by the new TTL.

        True when the renewal worker must be woken to keep the new times.
        """
        return self.renewals.reschedule(lease, sent_at)

    def forget(self, lease: Lease, role: str | None) -> None:
        """Stop renewing and drop the lease, synchronously, before the release is sent."""
        self.renewals.unregister(lease)
        if role is None:
            return
        with self._guard:
            if self._held.get((role, lease.owner)) is lease:
                del self._held[(role, lease.owner)]


LocksT = TypeVar("LocksT", bound=LocksBase)

_clients: weakref.WeakSet[LocksBase] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for client in list(_clients):
        client.after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class LeasedBase(Generic[LocksT]):
    """Options and rules every leased primitive shares: TTL, renewal, timeout, owner."""

    kind = "lock"
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
        self.locks = locks
        self.keys = locks.keys(name)
        self.name = self.keys.name
        self.ttl_ms = DEFAULT_TTL_MS if ttl is None else ttl_to_ms(ttl)
        self.renew = ttl is None if renew is None else bool(renew)
        self.timeout = WAIT_FOREVER if timeout is None else check_timeout(timeout)
        self.blocking = bool(blocking)
        self._explicit_owner = None if owner is None else Owner("owner", owner)
        self.acks = locks.acks if replicas is None else locks.replica_acks(replicas)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} ttl={self.ttl_ms / 1000:g}s>"

    def current_owner_ident(self) -> Owner:
        """The implicit owner: the calling thread or task (overridden per flavour)."""
        raise NotImplementedError

    def _owner(self) -> Owner:
        return self._explicit_owner or self.current_owner_ident()

    def _request(
        self, claim: Claim, blocking: bool | None, timeout: float | None
    ) -> AcquireRequest:
        blocking = self.blocking if blocking is None else bool(blocking)
        resolved = self.timeout if timeout is None else check_timeout(timeout)
        locks = self.locks
        hooks = locks.hooks
        return AcquireRequest(
            claim=claim,
            blocking=blocking and resolved != 0,
            timeout=None if resolved < 0 else resolved,
            contended=locks.contended(claim.keys.lease),
            started_at=locks.clock(),
            observation=None if is_silent(hooks) else hooks.acquire_started(self.name, self.kind),
        )

    def _report_failure(self, error: BaseException) -> None:
        """An acquisition that failed before it could begin (the server was unreachable)."""
        context = self.locks.hooks.acquire_started(self.name, self.kind)
        event = AcquireEvent(self.name, self.kind, ERROR, 0.0, None, error)
        self.locks.hooks.acquire_finished(context, event)

    def _observe(
        self,
        request: AcquireRequest,
        outcome: str,
        lease: Lease | None = None,
        error: BaseException | None = None,
    ) -> None:
        hooks = self.locks.hooks
        if is_silent(hooks):
            return
        wait = self.locks.clock() - request.started_at
        event = AcquireEvent(self.name, self.kind, outcome, wait, lease, error)
        hooks.acquire_finished(request.observation, event)

    def _lease(self, owner: Owner, grant: Grant) -> Lease:
        return Lease(
            name=self.name,
            token=grant.claim.token,
            fence=grant.fence,
            ttl_ms=self.ttl_ms,
            owner=owner,
            claim=grant.claim,
            acquired_at=grant.sent_at,
            expires_at=local_deadline(grant.sent_at, self.ttl_ms),
            renewing=self.renew,
            clock=self.locks.clock,
        )

    def _settle(
        self, owner: Owner, grant: Grant | None, request: AcquireRequest, role: str | None
    ) -> Lease:
        """The recorded lease of a grant, or the timeout error when nothing was granted."""
        if grant is None:
            self._observe(request, TIMEOUT)
            raise LockTimeout(self.name, request.timeout if request.blocking else 0)
        lease = self._lease(owner, grant)
        self.locks.adopt(lease, role)
        if grant.contended:
            self.locks.note_contention(grant.claim.keys.lease)
        self._observe(request, ACQUIRED, lease)
        return lease

    def _finish_release(self, lease: Lease, code: int) -> tuple[ReleaseOutcome, list[LostCallback]]:
        self.locks.note_release(lease.claim.keys.lease, code)
        reason = release_reason(code)
        outcome = ReleaseOutcome.RELEASED if reason is None else ReleaseOutcome.EXPIRED
        hooks = self.locks.hooks
        if not is_silent(hooks):
            hooks.released(lease, self.kind, outcome, self.locks.clock() - lease.acquired_at)
        return outcome, [] if reason is None else lease.mark_lost(reason)

    def _finish_extend(
        self, lease: Lease, ttl_ms: int, result: tuple[bool, float], role: str | None
    ) -> list[LostCallback] | None:
        """``None`` when extended; otherwise the lost-lease callbacks to fire before raising.

        A lease that extend found gone stays on the owner's books (no longer renewed), so
        the owner's ``release`` and block exit report it as ``EXPIRED`` / ``LeaseLost``.
        """
        extended, sent_at = result
        if extended and self.locks.clock() < local_deadline(sent_at, ttl_ms):
            lease.ttl_ms = ttl_ms
            lease.expires_at = local_deadline(sent_at, ttl_ms)
            self.locks.reschedule(lease, sent_at)
            return None
        self.locks.renewals.unregister(lease)
        return lease.mark_lost("extend found the lease gone or owned by another")

    @staticmethod
    def _lost_at_exit(lease: Lease | None, outcome: ReleaseOutcome, body_failed: bool) -> None:
        """After the body: a lease that ended under it is an error, unless the body failed."""
        if lease is None or body_failed:
            return
        if outcome is ReleaseOutcome.EXPIRED or lease.lost:
            raise LeaseLost(lease.name, lease.lost_reason or "the lease ended during the block")


class LockBase(LeasedBase[LocksT]):
    """A reentrant lease on one name (exclusive, or one side of a read-write lock)."""

    role_suffix = ""
    fair = False

    @property
    def role(self) -> str:
        """What reentrancy is counted on: the lease key, plus the side of a read-write lock."""
        return self.keys.lease + self.role_suffix

    def _claim(self, token: str, publish: str) -> Claim:
        return ExclusiveClaim(
            self.keys, token, self.ttl_ms, publish, self.fair, self.acks, self.locks.listener
        )

    @property
    def lease(self) -> Lease | None:
        """The current owner's lease on this lock, if it holds one."""
        return self.locks.held(self.role, self._owner())

    def _plan_acquire(
        self, blocking: bool | None, timeout: float | None, publish: str
    ) -> tuple[Owner, Lease | None, AcquireRequest | None]:
        """Reenter a held lease locally, or say what to ask the server for."""
        owner = self._owner()
        held = self.locks.held(self.role, owner)
        if held is not None:
            if held.lost:
                raise LeaseLost(self.name, f"cannot reenter: {held.lost_reason}")
            held.count += 1
            return owner, held, None
        claim = self._claim(self.locks.new_token(owner), publish)
        return owner, None, self._request(claim, blocking, timeout)

    def _begin_release(self, owner: Owner | None = None) -> Lease | None:
        """The lease to release on the server, or ``None`` when an outer hold remains."""
        if owner is None:
            owner = self._owner()
        role = self.role
        lease = self.locks.held(role, owner)
        if lease is None:
            raise NotOwned(
                f"lock {self.name!r} is not held by {owner.describe()}; nothing was released"
            )
        if lease.count > 1:
            lease.count -= 1
            return None
        self.locks.forget(lease, role)
        return lease

    def _begin_extend(self, ttl: float | None) -> tuple[Lease, int]:
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
    if type(timeout) is int:  # the common cases first, without the checks below
        return float(timeout)
    if type(timeout) is float and not math.isnan(timeout):
        return timeout
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or math.isnan(timeout):
        raise InvalidArgument(f"timeout must be a number of seconds, got {timeout!r}")
    return float(timeout)
