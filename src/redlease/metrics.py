"""Prometheus metrics for redlease clients, as a :class:`~redlease.core.hooks.Hooks` subclass.

Needs the ``prometheus`` extra (``pip install 'redlease[prometheus]'``). Nothing is
registered when this module is imported: the metrics are created by the first
:class:`PrometheusHooks` made for a registry and shared by every later one made for the
same registry and prefix, so several clients (or a test that builds its client twice) never
hit prometheus_client's ``Duplicated timeseries in CollectorRegistry`` error.

    from prometheus_client import CollectorRegistry
    from redlease.metrics import PrometheusHooks

    locks = redlease.Locks(redis.Redis(), hooks=PrometheusHooks(registry))

Lock names are not a label by default: they are often one per entity (``orders:42``),
and a label per name would grow without bound. Pass ``name_label`` to map a name to a
small set of values (``lambda name: name.split(":")[0]``) and get a ``name`` label.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
except ImportError as error:  # pragma: no cover - only without the extra
    raise ImportError(
        "redlease.metrics needs prometheus_client: pip install 'redlease[prometheus]'"
    ) from error

from redlease.core.hooks import ACQUIRED, AcquireEvent, Hooks
from redlease.core.lease import Lease, ReleaseOutcome

__all__ = ["HOLD_BUCKETS", "WAIT_BUCKETS", "PrometheusHooks"]

WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
"""Buckets of ``redlease_acquire_wait_seconds``: from an uncontended grant to a long queue."""

HOLD_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
"""Buckets of ``redlease_hold_seconds``: from a short critical section to a leader's term."""

UNKNOWN_KIND = "unknown"
"""The ``kind`` of a lease this hooks object did not see acquired (it was made later)."""


@dataclass(frozen=True)
class _Metrics:
    """The collectors of one prefix in one registry."""

    named: bool
    acquire_total: Counter
    acquire_wait: Histogram
    hold: Histogram
    held: Gauge
    renewals_total: Counter
    lost_total: Counter
    release_total: Counter


_created: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, _Metrics]] = (
    weakref.WeakKeyDictionary()
)
_created_guard = threading.Lock()


def _metrics(
    registry: CollectorRegistry,
    prefix: str,
    named: bool,
    wait_buckets: Sequence[float],
    hold_buckets: Sequence[float],
) -> _Metrics:
    """The collectors of ``prefix`` in ``registry``: made once, then shared."""
    with _created_guard:
        made = _created.setdefault(registry, {})
        existing = made.get(prefix)
        if existing is not None:
            if existing.named != named:
                raise ValueError(
                    f"the {prefix}_* metrics of this registry were created "
                    f"{'with' if existing.named else 'without'} a name label; every "
                    "PrometheusHooks on one registry and prefix must agree on name_label "
                    "(or use another prefix)"
                )
            return existing
        extra = ("name",) if named else ()
        metrics = _Metrics(
            named=named,
            acquire_total=Counter(
                f"{prefix}_acquire_total",
                "Lock acquisitions by outcome: acquired, timeout or error.",
                ("kind", "outcome", *extra),
                registry=registry,
            ),
            acquire_wait=Histogram(
                f"{prefix}_acquire_wait_seconds",
                "Time from the start of an acquisition to the grant (acquired ones only).",
                ("kind", *extra),
                registry=registry,
                buckets=wait_buckets,
            ),
            hold=Histogram(
                f"{prefix}_hold_seconds",
                "Time from the grant to the release of a lease.",
                ("kind", *extra),
                registry=registry,
                buckets=hold_buckets,
            ),
            held=Gauge(
                f"{prefix}_held",
                "Leases currently held by this process (acquired and not yet released).",
                ("kind", *extra),
                registry=registry,
            ),
            renewals_total=Counter(
                f"{prefix}_renewals_total",
                "Lease renewals by the renewal worker: kept, or lost (found gone or taken).",
                ("outcome",),
                registry=registry,
            ),
            lost_total=Counter(
                f"{prefix}_lost_total",
                "Leases found lost while held (by renewal, extend or release).",
                ("kind", *extra),
                registry=registry,
            ),
            release_total=Counter(
                f"{prefix}_release_total",
                "Releases by outcome: released, or expired (the lease had already ended).",
                ("kind", "outcome", *extra),
                registry=registry,
            ),
        )
        for outcome in ("kept", "lost"):
            metrics.renewals_total.labels(outcome)  # exported as 0 before the first round
        made[prefix] = metrics
        return metrics


class PrometheusHooks(Hooks):
    """Count and time a client's acquisitions, holds, renewals and losses in Prometheus.

    ``registry`` is where the metrics live (default: prometheus_client's global
    ``REGISTRY``); they are created here, not at import, and reused by later instances
    on the same registry and ``prefix``. ``name_label`` maps a lock name to a
    low-cardinality value for an extra ``name`` label; all instances sharing a registry
    and prefix must agree on having one or not.

    Metrics (``kind`` is ``lock``, ``fair``, ``read``, ``write``, ``semaphore``,
    ``multi`` or ``redlock``):

    * ``redlease_acquire_total{kind, outcome}``: ``acquired``, ``timeout`` or ``error``
    * ``redlease_acquire_wait_seconds{kind}``: histogram of successful acquisitions' waits
    * ``redlease_hold_seconds{kind}``: histogram, grant to release
    * ``redlease_held{kind}``: gauge of leases held (up on grant, down on release)
    * ``redlease_release_total{kind, outcome}``: ``released`` or ``expired``
    * ``redlease_lost_total{kind}``: leases found lost while held
    * ``redlease_renewals_total{outcome}``: ``kept`` or ``lost``, per lease renewed
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        prefix: str = "redlease",
        name_label: Callable[[str], str] | None = None,
        wait_buckets: Sequence[float] = WAIT_BUCKETS,
        hold_buckets: Sequence[float] = HOLD_BUCKETS,
    ) -> None:
        self.registry = REGISTRY if registry is None else registry
        self.name_label = name_label
        self._metrics = _metrics(
            self.registry, prefix, name_label is not None, wait_buckets, hold_buckets
        )
        self._kinds: weakref.WeakKeyDictionary[Lease, tuple[str, tuple[str, ...]]] = (
            weakref.WeakKeyDictionary()
        )
        """Leases seen acquired, with their kind (``lost`` lacks it), kept after the release:
        a release that finds its lease lost reports ``released`` before ``lost``."""
        self._held: weakref.WeakSet[Lease] = weakref.WeakSet()
        """Leases counted in the ``held`` gauge."""
        self._guard = threading.Lock()

    def _labels(self, name: str, *values: str) -> tuple[str, ...]:
        if self.name_label is None:
            return values
        return (*values, str(self.name_label(name)))

    def _acquisition_labels(self, event: AcquireEvent, *values: str) -> tuple[str, ...]:
        """A multi-lock is one acquisition: its names' labels, each once, joined by ``+``
        (``orders+users``); ``name_label`` only ever sees real lock names."""
        if self.name_label is None:
            return values
        named = sorted({str(self.name_label(name)) for name in event.names})
        return (*values, "+".join(named))

    def acquire_finished(self, context: Any, event: AcquireEvent) -> None:
        metrics = self._metrics
        metrics.acquire_total.labels(
            *self._acquisition_labels(event, event.kind, event.outcome)
        ).inc()
        if event.outcome != ACQUIRED:
            return
        wait = metrics.acquire_wait.labels(*self._acquisition_labels(event, event.kind))
        wait.observe(max(event.wait_seconds, 0.0))
        held = [(lease, self._labels(lease.name, event.kind)) for lease in event.leases]
        with self._guard:
            for lease, labels in held:
                self._kinds[lease] = (event.kind, labels)
                self._held.add(lease)
        for _, labels in held:
            metrics.held.labels(*labels).inc()

    def released(
        self, lease: Lease, kind: str, outcome: ReleaseOutcome, hold_seconds: float
    ) -> None:
        metrics = self._metrics
        labels = self._labels(lease.name, kind)
        metrics.release_total.labels(*self._labels(lease.name, kind, outcome.value)).inc()
        metrics.hold.labels(*labels).observe(max(hold_seconds, 0.0))
        with self._guard:
            counted = self._kinds.get(lease) if lease in self._held else None
            self._held.discard(lease)
        if counted is not None:
            metrics.held.labels(*counted[1]).dec()

    def renewed(self, kept: int, lost: int) -> None:
        if kept:
            self._metrics.renewals_total.labels("kept").inc(kept)
        if lost:
            self._metrics.renewals_total.labels("lost").inc(lost)

    def lost(self, lease: Lease) -> None:
        with self._guard:
            kind = self._kinds.get(lease, (UNKNOWN_KIND,))[0]
        self._metrics.lost_total.labels(*self._labels(lease.name, kind)).inc()
