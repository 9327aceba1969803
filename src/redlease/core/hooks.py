"""Observability without dependencies: a small hooks protocol, called by every primitive.

Subclass :class:`Hooks` (every method is a no-op) and pass it as ``hooks=`` to a client;
:mod:`redlease.metrics` (Prometheus) and :mod:`redlease.tracing` (OpenTelemetry) are two
such subclasses behind optional extras. Hooks run inline on the acquiring or releasing
thread (or the renewal worker): keep them quick, and let them not raise (an exception in a
hook is logged and swallowed, never turned into a lock failure).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from redlease.core.lease import Lease, ReleaseOutcome

__all__ = ["AcquireEvent", "Hooks"]

logger = logging.getLogger("redlease")

ACQUIRED, TIMEOUT, ERROR = "acquired", "timeout", "error"
"""Outcomes of an acquisition, as passed to :meth:`Hooks.acquire_finished`."""


@dataclass(frozen=True)
class AcquireEvent:
    name: str
    kind: str
    """``lock``, ``fair``, ``read``, ``write``, ``semaphore``, ``multi`` or ``redlock``."""
    outcome: str
    wait_seconds: float
    lease: Lease | None = None
    """The lease granted (a multi-lock's first part)."""
    error: BaseException | None = None
    leases: tuple[Lease, ...] = ()
    """Every lease the acquisition granted: ``(lease,)``, or a multi-lock's parts in name
    order; each is released (and may be lost) on its own."""
    names: tuple[str, ...] = ()
    """The lock names asked for: ``(name,)``, or a multi-lock's in name order (its ``name``
    joins them with ``+``, a character a name may hold too)."""

    def __post_init__(self) -> None:
        if self.lease is not None and not self.leases:
            object.__setattr__(self, "leases", (self.lease,))
        if not self.names:
            object.__setattr__(self, "names", (self.name,))


class Hooks:
    """What a client reports; override what you need."""

    def acquire_started(self, name: str, kind: str) -> Any:
        """An acquisition begins; whatever is returned comes back to ``acquire_finished``."""
        return None

    def acquire_finished(self, context: Any, event: AcquireEvent) -> None:
        """It ended: ``event.outcome`` is ``"acquired"``, ``"timeout"`` or ``"error"``."""

    def released(
        self, lease: Lease, kind: str, outcome: ReleaseOutcome, hold_seconds: float
    ) -> None:
        """A lease was given back (``outcome`` says whether it had already ended)."""

    def renewed(self, kept: int, lost: int) -> None:
        """One renewal round of the client's worker: leases kept and leases found lost."""

    def lost(self, lease: Lease) -> None:
        """A lease was found lost while held."""


class CompositeHooks(Hooks):
    """Several hooks as one; each call goes to all of them, errors logged per hook."""

    def __init__(self, hooks: Iterable[Hooks]) -> None:
        self.hooks = list(hooks)

    def acquire_started(self, name: str, kind: str) -> Any:
        return [_safe(hook.acquire_started, name, kind) for hook in self.hooks]

    def acquire_finished(self, context: Any, event: AcquireEvent) -> None:
        contexts = context if isinstance(context, list) else [None] * len(self.hooks)
        for hook, own in zip(self.hooks, contexts, strict=True):
            _safe(hook.acquire_finished, own, event)

    def released(
        self, lease: Lease, kind: str, outcome: ReleaseOutcome, hold_seconds: float
    ) -> None:
        for hook in self.hooks:
            _safe(hook.released, lease, kind, outcome, hold_seconds)

    def renewed(self, kept: int, lost: int) -> None:
        for hook in self.hooks:
            _safe(hook.renewed, kept, lost)

    def lost(self, lease: Lease) -> None:
        for hook in self.hooks:
            _safe(hook.lost, lease)


def is_silent(hooks: Hooks) -> bool:
    """Whether ``hooks`` are the default no-ops, so a caller may skip building their events."""
    return type(hooks) is Hooks


def combine(hooks: Hooks | Iterable[Hooks] | None) -> Hooks:
    if hooks is None:
        return Hooks()
    if isinstance(hooks, Hooks):
        return CompositeHooks([hooks])
    return CompositeHooks(hooks)


def _safe(method: Any, *args: Any) -> Any:
    try:
        return method(*args)
    except (Exception, SystemExit):  # a hook's own exit too: the worker it runs on goes on
        logger.exception("redlease hook %s raised", getattr(method, "__qualname__", method))
        return None
