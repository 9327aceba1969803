"""The operations a flow asks its driver to carry out."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from redlease.core.replication import ReplicaAcks
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


@dataclass(frozen=True)
class Subscribe:
    """Start listening for wake-ups on a channel; done once the server confirmed it.

    The driver answers True once confirmed, False when no confirmation came within
    ``seconds`` (the caller's remaining time, or the notifier's own limit).
    """

    channel: str
    seconds: float = math.inf


@dataclass(frozen=True)
class Wait:
    """Sleep until a wake-up arrives on the subscribed channel, or ``seconds`` pass."""

    seconds: float


Operation = RunScript | Subscribe | Wait
