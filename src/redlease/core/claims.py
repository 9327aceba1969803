"""What each kind of lease asks the server for: scripts, keys and arguments.

A claim is made once per acquisition (it carries the token) and kept by the lease, so
release, withdrawal and renewal say exactly what the acquisition said. Exclusive claims
serve the lock, the fair lock and the multi-lock's parts; shared claims serve the
read-write lock and the semaphore.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from redlease.core.ops import RunScript
from redlease.core.replication import ReplicaAcks
from redlease.keys import LockKeys
from redlease.scripts import ScriptName

RELEASE_LATCH_MS = 10_000
"""How long a release remembers its answer for a release sent again after a lost reply (the
latch key's own TTL). A give-back (a grant the caller will not use) leaves no latch, so its
token may be granted again."""

EXCLUSIVE_LEASE, STRING_LEASE, SORTED_SET_LEASE = "x", "s", "z"
"""How ``renew.lua`` finds a lease: a ``<fence>:<token>`` string (an exclusive lock), a
string holding the token (a writer), or a scored member (a reader, a permit)."""


def split_lease_value(value: str) -> tuple[int | None, str]:
    """An exclusive lease's value, ``<fence>:<token>``, as ``(fence, token)``; a value of
    another shape as ``(None, value)``."""
    fence, separator, token = value.partition(":")
    if separator and fence.isdigit():
        return int(fence), token
    return None, value


@dataclass(frozen=True)
class ExclusiveClaim:
    """One holder at a time (``acquire.lua`` / ``release.lua``); ``fair`` forbids barging."""

    keys: LockKeys
    token: str
    ttl_ms: int
    publish: str
    fair: bool = False
    acks: ReplicaAcks | None = None
    listener: str = ""
    """The id of the client whose channel hand-offs to this claim go to."""

    renew_kind = EXCLUSIVE_LEASE

    @property
    def renew_key(self) -> str:
        return self.keys.lease

    @property
    def channel(self) -> str:
        return self.keys.client_channel(self.listener)

    @property
    def member(self) -> str:
        """The waiter's queue entry: the release hands over with this TTL, on this client's
        channel, to this token."""
        return f"{self.ttl_ms}:{self.listener}:{self.token}"

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
                self.listener,
            ),
            acks=self.acks,
        )

    def release_op(self, withdraw: bool, *, latch: bool = True) -> RunScript:
        """The release (``latch``: remember the answer for a release sent again)."""
        return RunScript(
            ScriptName.RELEASE,
            (self.keys.lease, self.keys.queue, self.keys.fence, self.keys.latch(self.token)),
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
    listener: str = ""

    @property
    def renew_kind(self) -> str:
        return STRING_LEASE if self.mode == "w" else SORTED_SET_LEASE

    @property
    def renew_key(self) -> str:
        return self.keys.writer if self.mode == "w" else self.keys.holders

    @property
    def channel(self) -> str:
        return self.keys.client_channel(self.listener)

    @property
    def member(self) -> str:
        return f"{self.mode}:{self.ttl_ms}:{self.listener}:{self.token}"

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
                self.listener,
            ),
            acks=self.acks if operation in ("acquire", "release", "downgrade") else None,
        )

    def without_acks(self) -> SharedClaim:
        return replace(self, acks=None)

    def acquire_op(self, queue_mode: str) -> RunScript:
        return self._op("acquire", queue_mode)

    def release_op(self, withdraw: bool, *, retry: bool = False, latch: bool = True) -> RunScript:
        return self._op("release", self.member if withdraw else "", latch)

    def downgrade_op(self) -> RunScript:
        return self._op("downgrade", "")

    def available_op(self) -> RunScript:
        return self._op("available", "")

    def count_op(self) -> RunScript:
        return self._op("count", "")
