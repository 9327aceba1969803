"""OpenTelemetry spans for redlease clients, as a :class:`~redlease.core.hooks.Hooks` subclass.

Needs only ``opentelemetry-api`` (the ``otel`` extra: ``pip install 'redlease[otel]'``),
which records nothing until the application installs an SDK; redlease never configures
one.

    from redlease.tracing import OpenTelemetryHooks

    locks = redlease.Locks(redis.Redis(), hooks=OpenTelemetryHooks())

Spans (all ``INTERNAL``):

* ``redlease.acquire``: from the start of an acquisition to its end, with
  ``redlease.name``, ``redlease.kind``, ``redlease.outcome`` (``acquired``, ``timeout``,
  ``error``), ``redlease.wait_ms`` and, when granted, ``redlease.fence`` and
  ``redlease.ttl_ms``. An error is recorded on the span and sets its status to ``ERROR``;
  a timeout is an outcome, not an error (``try_acquire`` expects it).
* ``redlease.release``: a point-in-time span at the release, with ``redlease.hold_ms``
  and ``redlease.outcome`` (``released`` or ``expired``), linked to its acquire span.
* ``redlease.lost``: a point-in-time span when a held lease is found lost, status
  ``ERROR``, linked to its acquire span.

The acquire span is started as a child of the caller's current span but is not made the
current span itself (the hooks cannot scope it), so spans of Redis commands sent during
the acquisition are its siblings.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(
        "redlease.tracing needs opentelemetry-api: pip install 'redlease[otel]'"
    ) from error

from redlease import __version__
from redlease.core.hooks import ACQUIRED, ERROR, AcquireEvent, Hooks
from redlease.core.lease import Lease, ReleaseOutcome

__all__ = ["OpenTelemetryHooks"]


class OpenTelemetryHooks(Hooks):
    """Trace a client's acquisitions, releases and lost leases.

    ``tracer_provider`` defaults to the global one (``trace.set_tracer_provider``), looked
    up lazily, so this object may be created before the application configures tracing.
    """

    def __init__(self, tracer_provider: trace.TracerProvider | None = None) -> None:
        self.tracer = trace.get_tracer("redlease", __version__, tracer_provider=tracer_provider)
        self._acquired: weakref.WeakKeyDictionary[Lease, SpanContext] = weakref.WeakKeyDictionary()
        """The acquire span of each lease, to link its release and loss to (kept after the
        release: one that finds its lease lost reports ``released`` before ``lost``)."""
        self._guard = threading.Lock()

    def acquire_started(self, name: str, kind: str) -> Any:
        return self.tracer.start_span(
            "redlease.acquire",
            kind=SpanKind.INTERNAL,
            attributes={"redlease.name": name, "redlease.kind": kind},
        )

    def acquire_finished(self, context: Any, event: AcquireEvent) -> None:
        if not isinstance(context, Span):
            return
        span = context
        span.set_attribute("redlease.outcome", event.outcome)
        span.set_attribute("redlease.wait_ms", round(event.wait_seconds * 1000, 3))
        if event.lease is not None:
            span.set_attribute("redlease.fence", event.lease.fence)
            span.set_attribute("redlease.ttl_ms", event.lease.ttl_ms)
        if event.outcome == ACQUIRED:
            with self._guard:
                for lease in event.leases:
                    self._acquired[lease] = span.get_span_context()
        if event.outcome == ERROR:
            if event.error is not None:
                span.record_exception(event.error)
                description = f"{type(event.error).__name__}: {event.error}"
            else:
                description = "acquisition failed"
            span.set_status(Status(StatusCode.ERROR, description))
        span.end()

    def released(
        self, lease: Lease, kind: str, outcome: ReleaseOutcome, hold_seconds: float
    ) -> None:
        with self._guard:
            acquired = self._acquired.get(lease)
        span = self.tracer.start_span(
            "redlease.release",
            kind=SpanKind.INTERNAL,
            attributes={
                "redlease.name": lease.name,
                "redlease.kind": kind,
                "redlease.outcome": outcome.value,
                "redlease.hold_ms": round(hold_seconds * 1000, 3),
                "redlease.fence": lease.fence,
            },
            links=_links(acquired),
        )
        span.end()

    def lost(self, lease: Lease) -> None:
        with self._guard:
            acquired = self._acquired.get(lease)
        span = self.tracer.start_span(
            "redlease.lost",
            kind=SpanKind.INTERNAL,
            attributes={
                "redlease.name": lease.name,
                "redlease.fence": lease.fence,
                "redlease.reason": lease.lost_reason or "",
            },
            links=_links(acquired),
        )
        span.set_status(Status(StatusCode.ERROR, lease.lost_reason or "lease lost"))
        span.end()


def _links(context: SpanContext | None) -> list[Link]:
    return [] if context is None or not context.is_valid else [Link(context)]
