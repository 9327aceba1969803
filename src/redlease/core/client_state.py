"""The state of one client: the leases it holds, their renewal schedule, its contention
hints, its tokens and server features, and the fork hook that resets all of it in a child.

The flavoured clients (:mod:`redlease.aio.engine` and its generated sync twin, and the
Redlock clients) build on :class:`LocksBase`; the primitives' rules in
:mod:`redlease.core.base` read and update it.
"""

from __future__ import annotations

import os
import secrets
import socket
import threading
import time
import weakref
from collections.abc import Hashable
from typing import TypeVar

from redlease.core.hooks import Hooks, is_silent
from redlease.core.lease import Lease, MultiLease
from redlease.core.owner import Owner, TokenFactory, random_token
from redlease.core.protocol import HANDED_OVER, Clock
from redlease.core.renewal import RenewalSchedule
from redlease.core.replication import ReplicaAcks
from redlease.core.subscriptions import PubSubCommands
from redlease.errors import InvalidArgument, InvalidName
from redlease.keys import DEFAULT_PREFIX, LockKeys, validate_name, validate_prefix

CONTENDED_HINT_S = 1.0
DEFAULT_REPLICA_TIMEOUT_MS = 1000
KEYS_CACHE_SIZE = 1024
"""Lock names whose validated keys a client remembers (all forgotten when it fills up)."""


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
        self._clock = clock
        self._token_factory = token_factory
        self._renewals = RenewalSchedule()
        self._pubsub_commands: PubSubCommands | None = None
        self._hooks: Hooks = Hooks()
        """Where acquisitions, releases, renewals and losses are reported (see ``hooks=``)."""
        self._acks: ReplicaAcks | None = None
        self._replica_template = ReplicaAcks(1, DEFAULT_REPLICA_TIMEOUT_MS)
        """Replica acknowledgement every lock write of this client waits for (none by default)."""
        self._held_by: dict[tuple[str, Hashable], Lease] = {}
        self._multi_by: dict[tuple[tuple[str, ...], Hashable], MultiLease] = {}
        """Multi-locks held, by (their names in order, owner)."""
        self._contended_until: dict[str, float] = {}
        self._guard = threading.Lock()
        self._host = socket.gethostname()
        self._token_tail = self._holder_tail()
        self._keys: dict[str, LockKeys] = {}
        self._narrow_encoding: str | None = None
        """The client's encoding when it is not UTF-8: only ASCII names are then safe."""
        self._closed = False
        """Set by ``close()``: no new lease is granted from then on."""
        self._listener = secrets.token_hex(4)
        """This client's id: hand-offs to its waiters arrive on its channel per slot."""
        _clients.add(self)

    def _narrow_to(self, encoding: str | None) -> None:
        """Take only ASCII names (and prefix) from now on: see :func:`narrow_encoding`."""
        if encoding is None:
            return
        if not self.prefix.isascii():
            raise InvalidArgument(
                f"key prefix {self.prefix!r} is not ASCII and the client encodes with "
                f"{encoding!r}: use an ASCII prefix or encoding='utf-8'"
            )
        self._narrow_encoding = encoding

    def _refuse_if_closed(self) -> None:
        """A closed client must not hand out leases nobody would renew."""
        if self._closed:
            raise InvalidArgument(
                f"this {type(self).__name__} was closed: it takes no new lease (its workers "
                "are stopped); make a new client"
            )

    def _after_fork(self) -> None:
        """In a forked child: forget the parent's leases; its workers start afresh if needed.

        The child shares nothing it could harm the parent with: it neither renews nor
        releases a lease the parent holds (``release`` there raises ``NotOwned``).
        """
        self._held_by = {}
        self._multi_by = {}
        self._contended_until = {}
        self._guard = threading.Lock()
        self._token_tail = self._holder_tail()
        self._renewals = RenewalSchedule()
        self._listener = secrets.token_hex(4)

    def _replica_acks(self, replicas: int) -> ReplicaAcks | None:
        """What waiting for ``replicas`` confirmations means with this client's settings."""
        if replicas == 0:
            return None
        template = self._replica_template
        acks = ReplicaAcks(replicas, template.timeout_ms, template.aof)
        socket_timeout = self._socket_timeout()
        if socket_timeout is not None and acks.timeout_ms > socket_timeout * 1000 * 0.9:
            raise InvalidArgument(
                f"replica_timeout ({acks.timeout_ms / 1000:g} s) must leave a tenth of the "
                f"client's socket_timeout ({socket_timeout:g} s) for the reply: WAIT answers "
                "at the end of it when a replica is missing, and the client would give up first"
            )
        return acks

    def _socket_timeout(self) -> float | None:
        """The client's socket timeout, where it says: a plain or Sentinel client's pool, or
        a cluster client's node settings."""
        client = getattr(self, "client", None)
        holder = getattr(client, "connection_pool", None) or getattr(client, "nodes_manager", None)
        value = getattr(holder, "connection_kwargs", {}).get("socket_timeout")
        return float(value) if isinstance(value, (int, float)) else None

    def _keys_for(self, name: str) -> LockKeys:
        """The validated keys of ``name``; remembered, since most code locks a few names often."""
        keys = self._keys.get(name) if type(name) is str else None
        if keys is None or keys.prefix is not self.prefix:
            keys = LockKeys(validate_name(name), self.prefix)
            if self._narrow_encoding is not None and not name.isascii():
                raise InvalidName(
                    f"lock name {name!r:.80} is not ASCII and this client encodes with "
                    f"{self._narrow_encoding!r}: redis-py would send it as other bytes in "
                    "other places (another lock); use ASCII names or encoding='utf-8'"
                )
            if type(name) is str:
                if len(self._keys) >= KEYS_CACHE_SIZE:
                    self._keys.clear()
                self._keys[name] = keys
        return keys

    def _holder_tail(self) -> str:
        """The host and pid part of every token, made once (again in a forked child)."""
        return f"|{self._host}|{os.getpid()}|"

    def _new_token(self, owner: Owner) -> str:
        """A fresh random token; host, pid and owner ride along so operators can see the holder."""
        return f"{self._token_factory()}{self._token_tail}{owner.describe()}"

    def _refuse_a_second_loop(self) -> None:
        """Raise ``InvalidArgument`` when an asyncio client is used from a second event loop
        while its own still runs: called before anything is counted or sent."""

    def _held(self, role: str, owner: Hashable) -> Lease | None:
        # one dict read is atomic: no guard needed (writers still take it)
        return self._held_by.get((role, owner))

    def _multi_holding(self, name: str, owner: Hashable) -> str | None:
        """The multi-lock (its ``+``-joined names) in which ``owner`` holds ``name``."""
        if not self._multi_by:  # the common case, on every acquire: no lock taken
            return None
        with self._guard:
            for names, holder in self._multi_by:
                if holder == owner and name in names:
                    return "+".join(names)
        return None

    def _held_leases(self) -> list[Lease]:
        with self._guard:
            return list(self._held_by.values())

    def _note_release(self, name: str, code: int) -> None:
        """A release that handed the lock to a waiter marks the name contended for a moment.

        The next acquire from this client then queues behind the waiters instead of racing
        them with an immediate try, which keeps hand-offs going to other processes (the
        releaser would otherwise win most races: it is the first to know the lock is free).
        """
        if code != HANDED_OVER and not self._contended_until:
            return  # the common case: nothing to forget
        with self._guard:
            if code == HANDED_OVER:
                self._contended_until[name] = self._clock() + CONTENDED_HINT_S
            else:
                self._contended_until.pop(name, None)

    def _note_contention(self, name: str) -> None:
        """An acquisition of ``name`` found it held: the next one of this client joins the
        queue with its first try (one script, on the client's channel, already listening)."""
        with self._guard:
            self._contended_until[name] = self._clock() + CONTENDED_HINT_S

    def _contended(self, name: str) -> bool:
        if not self._contended_until:
            return False
        with self._guard:
            until = self._contended_until.get(name)
            if until is not None and until < self._clock():
                del self._contended_until[name]
                return False
            return until is not None

    def _adopt(self, lease: Lease, role: str | None) -> bool:
        """Record a fresh grant and schedule its renewal before anyone can release it.

        ``role`` names the lease for reentrancy (``None``: not reentrant, e.g. a permit).
        Every lease is watched for its local deadline, renewed or not. True when the
        renewal worker must be woken to take the new lease into account.
        """
        if role is not None:
            with self._guard:
                self._held_by[(role, lease._owner)] = lease
        if not is_silent(self._hooks):
            lease.on_lost(self._hooks.lost)
        return self._renewals.register(lease)

    def _reschedule(self, lease: Lease, sent_at: float) -> bool:
        """An ``extend`` sent at ``sent_at`` succeeded: renew and watch by the new TTL.

        True when the renewal worker must be woken to keep the new times.
        """
        return self._renewals.reschedule(lease, sent_at)

    def _forget(self, lease: Lease, role: str | None) -> None:
        """Stop renewing and drop the lease, synchronously, before the release is sent."""
        self._renewals.unregister(lease)
        if role is None:
            return
        with self._guard:
            if self._held_by.get((role, lease._owner)) is lease:
                del self._held_by[(role, lease._owner)]


LocksT = TypeVar("LocksT", bound=LocksBase)

_clients: weakref.WeakSet[LocksBase] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for client in list(_clients):
        if hasattr(client, "client"):  # not one whose construction failed: it holds nothing
            client._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
