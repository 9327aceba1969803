"""What each kind of lease asks the server for: scripts, keys and arguments.

A claim is made once per acquisition (it carries the token) and kept by the lease, so
release, withdrawal and renewal say exactly what the acquisition said. Exclusive claims
serve the lock, the fair lock and the multi-lock's parts; shared claims serve the
read-write lock and the semaphore.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol

from redlease.core.ops import RunScript
from redlease.core.replication import ReplicaAcks
from redlease.keys import LockKeys
from redlease.scripts import ScriptName

RELEASE_LATCH_MS = 10_000
"""How long a release remembers its answer for a retry (the latch key's own TTL). A give-back
(a grant the caller will not use) leaves no latch, so its token may be granted again."""

STRING_LEASE, SORTED_SET_LEASE = "s", "z"
"""How ``renew.lua`` finds a lease: a string holding the token, or a scored member."""


class Claim(Protocol):
    @property
    def keys(self) -> LockKeys: ...
    @property
    def token(self) -> str: ...
    @property
    def ttl_ms(self) -> int: ...
    @property
    def renew_kind(self) -> str: ...
    @property
    def renew_key(self) -> str: ...
    @property
    def channel(self) -> str: ...

    @property
    def acks(self) -> ReplicaAcks | None: ...

    def acquire_op(self, queue_mode: str) -> RunScript: ...
    def release_op(self, withdraw: bool, *, latch: bool = True) -> RunScript: ...
    def without_acks(self) -> Claim: ...


@dataclass(frozen=True)
class ExclusiveClaim:
    """One holder at a time (``acquire.lua`` / ``release.lua``); ``fair`` forbids barging."""

    keys: LockKeys
    token: str
    ttl_ms: int
    publish: str
    fair: bool = False
    acks: ReplicaAcks | None = None

    renew_kind = STRING_LEASE

    @property
    def renew_key(self) -> str:
        return self.keys.lease

    @property
    def channel(self) -> str:
        return self.keys.waiter_channel(self.token)

    @property
    def member(self) -> str:
        """The waiter's queue entry: the release hands over with this TTL to this token."""
        return f"{self.ttl_ms}:{self.token}"

    def without_acks(self) -> ExclusiveClaim:
        """The same claim, for a rollback that must not wait on replicas again."""
        return replace(self, acks=None)

    def acquire_op(self, queue_mode: str) -> RunScript:
        return RunScript(
            ScriptName.ACQUIRE,
            (self.keys.lease, self.keys.fence, self.keys.queue),
            (
                self.token,
                self.ttl_ms,
                "1" if self.fair else "0",
                self.publish,
                self.keys.wake_prefix,
                queue_mode,
            ),
            acks=self.acks,
        )

    def release_op(self, withdraw: bool, *, latch: bool = True) -> RunScript:
        return RunScript(
            ScriptName.RELEASE,
            (self.keys.lease, self.keys.latch(self.token), self.keys.queue, self.keys.fence),
            (
                self.token,
                RELEASE_LATCH_MS if latch else 0,
                self.publish,
                self.keys.wake_prefix,
                self.member if withdraw else "",
            ),
            acks=self.acks,
        )


@dataclass(frozen=True)
class SharedClaim:
    """A reader, a writer, or a semaphore permit (``shared.lua``).

    ``mode`` is ``"r"`` for a shared place (a reader, a permit) and ``"w"`` for the writer;
    ``capacity`` caps the shared places (0: no cap, as for readers).
    """

    keys: LockKeys
    token: str
    ttl_ms: int
    publish: str
    mode: str
    capacity: int = 0
    acks: ReplicaAcks | None = None

    @property
    def renew_kind(self) -> str:
        return STRING_LEASE if self.mode == "w" else SORTED_SET_LEASE

    @property
    def renew_key(self) -> str:
        return self.keys.writer if self.mode == "w" else self.keys.holders

    @property
    def channel(self) -> str:
        return self.keys.waiter_channel(self.token)

    @property
    def member(self) -> str:
        return f"{self.mode}:{self.ttl_ms}:{self.token}"

    def _op(self, operation: str, last: str, latch: bool = True) -> RunScript:
        keys = self.keys
        return RunScript(
            ScriptName.SHARED,
            (keys.holders, keys.writer, keys.queue, keys.fence, keys.latch(self.token)),
            (
                operation,
                self.mode,
                self.token,
                self.ttl_ms,
                self.capacity,
                self.publish,
                keys.wake_prefix,
                last,
                RELEASE_LATCH_MS if latch else 0,
            ),
            acks=self.acks if operation in ("acquire", "release", "downgrade") else None,
        )

    def without_acks(self) -> SharedClaim:
        return replace(self, acks=None)

    def acquire_op(self, queue_mode: str) -> RunScript:
        return self._op("acquire", queue_mode)

    def release_op(self, withdraw: bool, *, latch: bool = True) -> RunScript:
        return self._op("release", self.member if withdraw else "", latch)

    def downgrade_op(self) -> RunScript:
        return self._op("downgrade", "")

    def available_op(self) -> RunScript:
        return self._op("available", "")

    def count_op(self) -> RunScript:
        return self._op("count", "")
