"""Replica acknowledgement: after a lock write, wait until N replicas confirm it.

``WAIT n timeout`` (and ``WAITAOF local n timeout`` where the server has it) run on the
same connection right after the script, in one pipeline, since they count that
connection's writes. Too few confirmations raise :class:`ReplicaShortfall`, which the
client turns into a rollback and :class:`~redlease.errors.NotReplicated`. This narrows the
window in which a failover promotes a replica that never saw the lock; it is not
consensus (a confirmed write can still be lost), and fencing remains the real protection.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redlease.errors import InvalidArgument, NotReplicated


class ReplicaShortfall(Exception):
    """Internal: the script ran, but too few replicas confirmed it."""

    def __init__(self, reply: Any, confirmed: int, wanted: int) -> None:
        super().__init__(f"{confirmed} of {wanted} replicas confirmed")
        self.reply = reply
        self.confirmed = confirmed
        self.wanted = wanted

    def rolled_back(self, name: str) -> NotReplicated:
        """What the caller raises once it gave back what the acquisition of ``name`` took."""
        return NotReplicated(
            f"lock {name!r} reached {self.confirmed} of {self.wanted} replicas in time; the "
            "acquisition was rolled back"
        )


@dataclass(frozen=True)
class ReplicaAcks:
    replicas: int
    timeout_ms: int
    aof: bool = False
    """Also wait for the write to reach the append-only file (``WAITAOF``, Redis 7.2+)."""

    def __post_init__(self) -> None:
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int):
            raise InvalidArgument(f"replicas must be an int, got {self.replicas!r}")
        if self.replicas < 1:
            raise InvalidArgument(f"replicas must be at least 1, got {self.replicas}")

    def commands(self) -> list[Sequence[str | int]]:
        wait: list[Sequence[str | int]] = [("WAIT", self.replicas, self.timeout_ms)]
        if self.aof:
            wait.append(("WAITAOF", 0, self.replicas, self.timeout_ms))
        return wait

    def check(self, replies: list[Any]) -> Any:
        """The script's reply, once WAIT (and WAITAOF) said enough replicas have it."""
        reply, confirmations = replies[0], replies[1:]
        if isinstance(reply, Exception):
            raise reply
        for confirmation in confirmations:
            if isinstance(confirmation, Exception):
                raise confirmation
        counts = [int(confirmations[0])]
        if self.aof:
            counts.append(int(confirmations[1][1]))
        confirmed = min(counts)
        if confirmed < self.replicas:
            raise ReplicaShortfall(reply, confirmed, self.replicas)
        return reply
