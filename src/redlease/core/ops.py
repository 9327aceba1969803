"""The operations a flow asks its driver to carry out, and the claim they act for."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from redlease.core.replication import ReplicaAcks
from redlease.keys import LockKeys
from redlease.scripts import ScriptName


@dataclass(frozen=True)
class RunScript:
    """Run one server-side script; the driver sends back its raw reply."""

    script: ScriptName
    keys: Sequence[str]
    args: Sequence[str | int]
    acks: ReplicaAcks | None = None
    """Replicas that must confirm this lock write (see :mod:`redlease.core.replication`)."""
    idempotent: bool = True
    """Whether running it twice answers as running it once (the lock scripts are, by their
    tokens and latches), so a call lost with its connection may be sent again."""


class Claim(Protocol):
    """What one acquisition asks the server for (see :mod:`redlease.core.claims`)."""

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
class Subscribe:
    """Start listening for wake-ups on a channel; done once the server confirmed it.

    The driver answers True once confirmed, False when no confirmation came within
    ``seconds`` (the caller's remaining time, or the notifier's own limit).
    """

    channel: str
    seconds: float = math.inf
    claim: Claim | None = None
    """Whose hand-off to wait for (``None``: any message, on a broadcast channel)."""


@dataclass(frozen=True)
class Wait:
    """Sleep until a wake-up arrives on the subscribed channel, or ``seconds`` pass."""

    seconds: float


Operation = RunScript | Subscribe | Wait
