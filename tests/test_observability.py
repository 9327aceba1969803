"""Metrics and traces: what an operator sees of acquisitions, holds, losses and failures.

Every scenario runs against a real server, through the sync and the asyncio client
(``make_locks``), with a fresh Prometheus registry or an in-memory span exporter.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from prometheus_client import CollectorRegistry

import redlease
from conftest import SyncLockAdapter
from redlease.core.hooks import AcquireEvent, Hooks
from redlease.metrics import PrometheusHooks
from redlease.tracing import OpenTelemetryHooks

DOWN_URL = "redis://127.0.0.1:1"


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def sample(registry: CollectorRegistry, metric: str, /, **labels: str) -> float:
    """A sample's value, 0 when the series does not exist (yet)."""
    return registry.get_sample_value(metric, labels) or 0.0


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


async def eventually(condition: Callable[[], object], within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


# Prometheus


async def test_acquire_hold_and_release_are_counted(make_locks, registry):
    locks = await make_locks(hooks=PrometheusHooks(registry))
    lock = locks.lock("orders:42")

    async with lock:
        assert sample(registry, "redlease_held", kind="lock") == 1
        assert sample(registry, "redlease_acquire_total", kind="lock", outcome="acquired") == 1
        assert sample(registry, "redlease_acquire_wait_seconds_count", kind="lock") == 1
        assert sample(registry, "redlease_release_total", kind="lock", outcome="released") == 0
        await asyncio.sleep(0.05)

    assert sample(registry, "redlease_held", kind="lock") == 0
    assert sample(registry, "redlease_release_total", kind="lock", outcome="released") == 1
    assert sample(registry, "redlease_hold_seconds_count", kind="lock") == 1
    assert sample(registry, "redlease_hold_seconds_sum", kind="lock") >= 0.05
    assert sample(registry, "redlease_lost_total", kind="lock") == 0


async def test_reentry_is_not_a_second_acquisition(make_locks, registry):
    lock = (await make_locks(hooks=PrometheusHooks(registry))).lock("orders:42")

    async with lock, lock:
        assert sample(registry, "redlease_held", kind="lock") == 1

    assert sample(registry, "redlease_acquire_total", kind="lock", outcome="acquired") == 1
    assert sample(registry, "redlease_held", kind="lock") == 0


async def test_timeout_is_counted_and_not_timed_as_a_wait(make_locks, registry):
    locks = await make_locks(hooks=PrometheusHooks(registry))
    async with locks.lock("orders:42"):
        with pytest.raises(redlease.LockTimeout):
            await locks.lock("orders:42", owner="someone else").acquire(timeout=0.1)

    assert sample(registry, "redlease_acquire_total", kind="lock", outcome="timeout") == 1
    assert sample(registry, "redlease_acquire_total", kind="lock", outcome="acquired") == 1
    assert sample(registry, "redlease_acquire_wait_seconds_count", kind="lock") == 1


async def test_unreachable_server_is_counted_as_an_error(make_locks, registry):
    # sharded_pubsub given: otherwise the client's first probe of the server fails before
    # the acquisition begins, and nothing is reported (see docs/observability.md).
    locks = await make_locks(DOWN_URL, hooks=PrometheusHooks(registry), sharded_pubsub=False)

    with pytest.raises(redlease.ServerUnavailable):
        await locks.lock("orders:42").acquire(timeout=1)

    assert sample(registry, "redlease_acquire_total", kind="lock", outcome="error") == 1
    assert sample(registry, "redlease_held", kind="lock") == 0


@pytest.mark.timeout(30)
async def test_lease_deleted_behind_a_renewing_holder_is_counted_lost(
    make_locks, registry, exporter, tracer_provider, server
):
    hooks = [PrometheusHooks(registry), OpenTelemetryHooks(tracer_provider)]
    lock = (await make_locks(hooks=hooks)).lock("settlement", ttl=0.3, renew=True)

    with pytest.raises(redlease.LeaseLost):
        async with lock:
            server.delete(lock.keys.lease)
            assert await eventually(lambda: sample(registry, "redlease_lost_total", kind="lock"))

    assert sample(registry, "redlease_lost_total", kind="lock") == 1
    assert sample(registry, "redlease_renewals_total", outcome="lost") == 1
    assert sample(registry, "redlease_release_total", kind="lock", outcome="expired") == 1
    assert sample(registry, "redlease_held", kind="lock") == 0
    (lost,) = spans(exporter, "redlease.lost")
    (acquire,) = spans(exporter, "redlease.acquire")
    assert lost.attributes is not None
    assert lost.attributes["redlease.name"] == "settlement"
    assert lost.status.status_code is StatusCode.ERROR
    assert [link.context.span_id for link in lost.links] == [acquire.context.span_id]


@pytest.mark.parametrize("make", ["lock", "fair_lock", "semaphore", "read", "write"])
async def test_a_lease_a_release_finds_lost_is_counted_under_its_kind_and_linked(
    make_locks, registry, exporter, tracer_provider, server, prefix, make, flavor
):
    """The release reports ``released`` before ``lost``: the loss used to be counted as
    kind "unknown" and its span had no link to the acquisition."""
    hooks = [PrometheusHooks(registry), OpenTelemetryHooks(tracer_provider)]
    locks = await make_locks(hooks=hooks)
    family = locks.locks if flavor == "sync" else locks
    made = {
        "lock": lambda: family.lock("ledger", ttl=5),
        "fair_lock": lambda: family.fair_lock("ledger", ttl=5),
        "semaphore": lambda: family.semaphore("ledger", permits=2, ttl=5),
        "read": lambda: family.rw_lock("ledger", ttl=5).read,
        "write": lambda: family.rw_lock("ledger", ttl=5).write,
    }[make]()
    lock = SyncLockAdapter(locks, made) if flavor == "sync" else made
    kind = {"fair_lock": "fair"}.get(make, make)
    with pytest.raises(redlease.LeaseLost):
        async with lock:
            for key in server.keys(f"{prefix}:{{ledger}}*"):
                server.delete(key)
    assert await eventually(lambda: sample(registry, "redlease_lost_total", kind=kind) == 1)
    assert sample(registry, "redlease_lost_total", kind="unknown") == 0
    assert sample(registry, "redlease_held", kind=kind) == 0
    (acquire,) = spans(exporter, "redlease.acquire")
    assert await eventually(lambda: len(spans(exporter, "redlease.lost")) == 1)
    (lost,) = spans(exporter, "redlease.lost")
    assert [link.context.span_id for link in lost.links] == [acquire.context.span_id]


async def test_a_downgrade_reports_the_write_released_and_a_read_acquired(
    make_locks, registry, exporter, tracer_provider, flavor
):
    """``redlease_held{kind="write"}`` used to stay at 1 for ever after a downgrade, and
    the read lease was reported released without ever being reported acquired."""
    hooks = [PrometheusHooks(registry), OpenTelemetryHooks(tracer_provider)]
    locks = await make_locks(hooks=hooks)
    rw = (locks.locks if flavor == "sync" else locks).rw_lock("catalogue", ttl=5)
    write = SyncLockAdapter(locks, rw.write) if flavor == "sync" else rw.write
    async with write:
        if flavor == "sync":
            await locks.run(rw.write.downgrade)
        else:
            await rw.write.downgrade()
        assert sample(registry, "redlease_held", kind="write") == 0
        assert sample(registry, "redlease_held", kind="read") == 1
    assert sample(registry, "redlease_held", kind="read") == 0
    assert sample(registry, "redlease_release_total", kind="write", outcome="released") == 1
    assert sample(registry, "redlease_release_total", kind="read", outcome="released") == 1
    assert sample(registry, "redlease_acquire_total", kind="read", outcome="acquired") == 1
    acquires = {
        span.attributes["redlease.kind"]: span for span in spans(exporter, "redlease.acquire")
    }  # type: ignore[index]
    for release in spans(exporter, "redlease.release"):
        kind = release.attributes["redlease.kind"]  # type: ignore[index]
        assert [link.context.span_id for link in release.links] == [acquires[kind].context.span_id]


async def test_a_downgraded_read_lease_is_held_from_the_downgrade(make_locks, registry, flavor):
    """Its hold time counted from the write grant: the write's hold was reported twice."""
    locks = await make_locks(hooks=PrometheusHooks(registry))
    rw = (locks.locks if flavor == "sync" else locks).rw_lock("catalogue", ttl=5)
    write = SyncLockAdapter(locks, rw.write) if flavor == "sync" else rw.write
    read = SyncLockAdapter(locks, rw.read) if flavor == "sync" else rw.read
    await write.acquire()
    await asyncio.sleep(0.5)
    if flavor == "sync":
        await locks.run(rw.write.downgrade)
    else:
        await rw.write.downgrade()
    await read.release()
    assert sample(registry, "redlease_hold_seconds_sum", kind="write") >= 0.5
    assert sample(registry, "redlease_hold_seconds_count", kind="read") == 1
    assert sample(registry, "redlease_hold_seconds_sum", kind="read") < 0.25


async def test_a_downgrade_that_finds_the_write_lease_ended_is_counted_released_and_lost(
    make_locks, registry, server, prefix, flavor
):
    """It forgets the lease, so nothing could bring ``redlease_held`` back down after it."""
    locks = await make_locks(hooks=PrometheusHooks(registry))
    rw = (locks.locks if flavor == "sync" else locks).rw_lock("stock", ttl=5)
    write = SyncLockAdapter(locks, rw.write) if flavor == "sync" else rw.write
    await write.acquire()
    for key in server.keys(f"{prefix}:{{stock}}*"):
        server.delete(key)
    with pytest.raises(redlease.LeaseLost):
        if flavor == "sync":
            await locks.run(rw.write.downgrade)
        else:
            await rw.write.downgrade()
    assert sample(registry, "redlease_held", kind="write") == 0
    assert sample(registry, "redlease_release_total", kind="write", outcome="expired") == 1
    assert await eventually(lambda: sample(registry, "redlease_lost_total", kind="write") == 1)


@pytest.mark.timeout(30)
async def test_a_lease_lost_at_its_deadline_with_the_server_down_is_a_lost_renewal(
    make_locks, registry, redlease_servers_factory
):
    """With the server killed no renewal is answered and the worker reports the lease lost at
    its local deadline: that loss was counted in ``redlease_lost_total`` but not in
    ``redlease_renewals_total{outcome="lost"}`` (a paused server's was)."""
    (server,) = redlease_servers_factory(1)
    locks = await make_locks(server.url, hooks=PrometheusHooks(registry))
    lease = await locks.lock("feed", ttl=1, renew=True).acquire()
    server.kill()
    assert await eventually(lambda: lease.lost, 5)
    assert await eventually(lambda: sample(registry, "redlease_lost_total", kind="lock") == 1)
    assert await eventually(lambda: sample(registry, "redlease_renewals_total", outcome="lost"))
    await asyncio.sleep(0.3)
    assert sample(registry, "redlease_renewals_total", outcome="lost") == 1


@pytest.mark.timeout(30)
async def test_kept_renewals_are_counted(make_locks, registry):
    lock = (await make_locks(hooks=PrometheusHooks(registry))).lock("job", ttl=0.15, renew=True)

    async with lock:
        assert await eventually(lambda: sample(registry, "redlease_renewals_total", outcome="kept"))

    assert sample(registry, "redlease_renewals_total", outcome="lost") == 0


def test_semaphore_permits_are_held_one_by_one(redlease_url, prefix, registry):
    with redlease.Locks(redlease_url, prefix=prefix, hooks=PrometheusHooks(registry)) as locks:
        semaphore = locks.semaphore("pool", 3)
        first, second = semaphore.acquire(), semaphore.acquire()
        assert sample(registry, "redlease_held", kind="semaphore") == 2
        semaphore.release(first)
        semaphore.release(second)

    assert sample(registry, "redlease_held", kind="semaphore") == 0
    assert sample(registry, "redlease_release_total", kind="semaphore", outcome="released") == 2


def test_a_multi_lock_holds_one_lease_per_part(redlease_url, prefix, registry):
    """One acquisition, a lease per name: each is held, released and timed on its own,
    under the acquisition's labels, so the gauge returns to zero, names labelled or not."""
    hooks = PrometheusHooks(registry, name_label=lambda name: name[:1])
    with redlease.Locks(redlease_url, prefix=prefix, hooks=hooks) as locks:
        with locks.multi_lock(["a1", "a2", "a3"]):
            assert sample(registry, "redlease_held", kind="multi", name="a") == 3
    assert sample(registry, "redlease_held", kind="multi", name="a") == 0
    acquired = {"kind": "multi", "outcome": "acquired", "name": "a"}
    assert sample(registry, "redlease_acquire_total", **acquired) == 1
    released = {"kind": "multi", "outcome": "released", "name": "a"}
    assert sample(registry, "redlease_release_total", **released) == 3


@pytest.mark.parametrize("mapping", ["split", "lookup"])
def test_a_multi_lock_over_names_of_different_labels_holds_each_under_its_own(
    redlease_url, prefix, registry, mapping
):
    """``name_label`` used to get the joined name (``orders:1+users:2``): the gauge showed
    both parts under ``orders``, and a lookup of real names raised and counted nothing."""
    groups = {"orders:1": "orders", "users:2": "users"}
    name_label = (lambda name: name.split(":", 1)[0]) if mapping == "split" else groups.__getitem__
    hooks = PrometheusHooks(registry, name_label=name_label)
    with redlease.Locks(redlease_url, prefix=prefix, hooks=hooks) as locks:
        with locks.multi_lock(["users:2", "orders:1"]):
            assert sample(registry, "redlease_held", kind="multi", name="orders") == 1
            assert sample(registry, "redlease_held", kind="multi", name="users") == 1
        with pytest.raises(redlease.LockTimeout), locks.multi_lock(["orders:1", "users:2"]):
            with locks.multi_lock(["orders:1", "users:2"], owner="other", timeout=0.05):
                pass
    acquired = {"kind": "multi", "outcome": "acquired", "name": "orders+users"}
    assert sample(registry, "redlease_acquire_total", **acquired) == 2
    timeouts = {"kind": "multi", "outcome": "timeout", "name": "orders+users"}
    assert sample(registry, "redlease_acquire_total", **timeouts) == 1
    for name in ("orders", "users"):
        assert sample(registry, "redlease_held", kind="multi", name=name) == 0
        released = {"kind": "multi", "outcome": "released", "name": name}
        assert sample(registry, "redlease_release_total", **released) == 2


async def test_names_are_labels_only_through_name_label(make_locks, registry):
    hooks = PrometheusHooks(registry, name_label=lambda name: name.split(":")[0])
    locks = await make_locks(hooks=hooks)

    for order in ("orders:1", "orders:2", "invoices:7"):
        async with locks.lock(order):
            pass

    acquired = {"kind": "lock", "outcome": "acquired"}
    assert sample(registry, "redlease_acquire_total", **acquired, name="orders") == 2
    assert sample(registry, "redlease_acquire_total", **acquired, name="invoices") == 1
    assert sample(registry, "redlease_held", kind="lock", name="orders") == 0


def test_lock_names_are_not_labels_by_default(redlease_url, prefix, registry):
    with redlease.Locks(redlease_url, prefix=prefix, hooks=PrometheusHooks(registry)) as locks:
        with locks.lock("orders:42"):
            pass

    labels = {
        name
        for metric in registry.collect()
        for metric_sample in metric.samples
        for name in metric_sample.labels
    }
    assert labels <= {"kind", "outcome", "le"}


def test_two_hooks_on_one_registry_share_the_metrics(redlease_url, prefix, registry):
    first, second = PrometheusHooks(registry), PrometheusHooks(registry)
    with (
        redlease.Locks(redlease_url, prefix=prefix, hooks=first) as one,
        redlease.Locks(redlease_url, prefix=prefix, hooks=second) as other,
    ):
        with one.lock("a"), other.lock("b"):
            assert sample(registry, "redlease_held", kind="lock") == 2

    assert sample(registry, "redlease_acquire_total", kind="lock", outcome="acquired") == 2
    assert sample(registry, "redlease_held", kind="lock") == 0


def test_hooks_on_one_registry_must_agree_on_the_name_label(registry):
    PrometheusHooks(registry)
    with pytest.raises(ValueError, match="name_label"):
        PrometheusHooks(registry, name_label=str)
    PrometheusHooks(registry, prefix="other", name_label=str)  # another prefix is fine


def test_importing_the_adapters_registers_nothing():
    code = (
        "import redlease.metrics, redlease.tracing\n"
        "from prometheus_client import REGISTRY\n"
        "names = [m.name for m in REGISTRY.collect() if m.name.startswith('redlease')]\n"
        "assert not names, names\n"
        "redlease.metrics.PrometheusHooks()\n"
        "assert REGISTRY.get_sample_value('redlease_renewals_total', {'outcome': 'kept'}) == 0\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)


# Hooks that fail


class Failing(Hooks):
    def acquire_started(self, name: str, kind: str) -> Any:
        raise RuntimeError("acquire_started failed")

    def acquire_finished(self, context: Any, event: AcquireEvent) -> None:
        raise RuntimeError("acquire_finished failed")

    def released(self, *args: Any) -> None:
        raise RuntimeError("released failed")


@pytest.mark.parametrize(
    "make_hooks",
    [
        pytest.param(lambda registry: Failing(), id="alone"),
        pytest.param(lambda registry: [Failing(), PrometheusHooks(registry)], id="with-others"),
    ],
)
async def test_a_failing_hook_is_logged_and_the_lock_still_works(
    make_locks, registry, caplog, make_hooks
):
    hooks = make_hooks(registry)
    locks = await make_locks(hooks=hooks)

    with caplog.at_level(logging.ERROR, logger="redlease"):
        async with locks.lock("orders:42") as lease:
            assert lease.fence > 0

    failures = [r.getMessage() for r in caplog.records if r.name == "redlease"]
    assert failures == [
        "redlease hook Failing.acquire_started raised",
        "redlease hook Failing.acquire_finished raised",
        "redlease hook Failing.released raised",
    ]
    if isinstance(hooks, list):  # the other hooks saw everything
        assert sample(registry, "redlease_release_total", kind="lock", outcome="released") == 1


# OpenTelemetry


async def test_acquire_and_release_spans(make_locks, exporter, tracer_provider):
    locks = await make_locks(hooks=OpenTelemetryHooks(tracer_provider))

    async with locks.lock("orders:42", ttl=5) as lease:
        await asyncio.sleep(0.02)

    (acquire,) = spans(exporter, "redlease.acquire")
    (release,) = spans(exporter, "redlease.release")
    assert acquire.attributes is not None
    assert release.attributes is not None
    assert dict(acquire.attributes) == {
        "redlease.name": "orders:42",
        "redlease.kind": "lock",
        "redlease.outcome": "acquired",
        "redlease.wait_ms": pytest.approx(acquire.attributes["redlease.wait_ms"]),
        "redlease.fence": lease.fence,
        "redlease.ttl_ms": 5000,
    }
    assert 0 <= float(acquire.attributes["redlease.wait_ms"]) < 1000  # type: ignore[arg-type]
    assert acquire.status.status_code is StatusCode.UNSET
    assert release.attributes["redlease.outcome"] == "released"
    assert float(release.attributes["redlease.hold_ms"]) >= 20  # type: ignore[arg-type]
    assert [link.context.span_id for link in release.links] == [acquire.context.span_id]
    assert acquire.instrumentation_scope is not None
    assert acquire.instrumentation_scope.name == "redlease"
    assert acquire.instrumentation_scope.version == redlease.__version__


async def test_every_part_of_a_multi_lock_links_to_its_acquire_span(
    redlease_url, prefix, exporter, tracer_provider
):
    hooks = OpenTelemetryHooks(tracer_provider)
    async with redlease.AsyncLocks(redlease_url, prefix=prefix, hooks=hooks) as locks:
        async with locks.multi_lock(["a", "b"]):
            pass

    (acquire,) = spans(exporter, "redlease.acquire")
    releases = spans(exporter, "redlease.release")
    assert sorted(span.attributes["redlease.name"] for span in releases) == ["a", "b"]  # type: ignore[index]
    for release in releases:
        assert [link.context.span_id for link in release.links] == [acquire.context.span_id]


@pytest.mark.timeout(30)
async def test_a_lease_the_worker_finds_lost_is_not_traced_inside_an_earlier_request(
    redlease_url, prefix, server, exporter, tracer_provider
):
    """The asyncio renewal worker, started inside one request's span, filed every later
    lost span under that request's trace."""
    tracer = tracer_provider.get_tracer("test")
    hooks = OpenTelemetryHooks(tracer_provider)
    async with redlease.AsyncLocks(redlease_url, prefix=prefix, hooks=hooks) as locks:
        with tracer.start_as_current_span("request-1"):
            async with locks.lock("first", ttl=1, renew=True):
                pass
        later = locks.lock("later", ttl=1, renew=True)
        with tracer.start_as_current_span("request-2"):
            lease = await later.acquire()
        server.delete(later.keys.lease)
        assert await eventually(lambda: spans(exporter, "redlease.lost"), 5)
        assert lease.lost
    (lost,) = spans(exporter, "redlease.lost")
    assert lost.parent is None
    (acquire,) = [
        span
        for span in spans(exporter, "redlease.acquire")
        if span.attributes and span.attributes["redlease.name"] == "later"
    ]
    assert [link.context.span_id for link in lost.links] == [acquire.context.span_id]


async def test_timeout_is_an_outcome_not_an_error(make_locks, exporter, tracer_provider):
    locks = await make_locks(hooks=OpenTelemetryHooks(tracer_provider))
    async with locks.lock("orders:42"):
        assert await locks.lock("orders:42", owner="someone else").try_acquire() is None

    timeouts = [
        span
        for span in spans(exporter, "redlease.acquire")
        if span.attributes and span.attributes["redlease.outcome"] == "timeout"
    ]
    (timeout,) = timeouts
    assert timeout.status.status_code is StatusCode.UNSET
    assert timeout.attributes is not None
    assert "redlease.fence" not in timeout.attributes


async def test_unreachable_server_is_an_error_span(make_locks, exporter, tracer_provider):
    hooks = OpenTelemetryHooks(tracer_provider)
    locks = await make_locks(DOWN_URL, hooks=hooks, sharded_pubsub=False)

    with pytest.raises(redlease.ServerUnavailable):
        await locks.lock("orders:42").acquire(timeout=1)

    (acquire,) = spans(exporter, "redlease.acquire")
    assert acquire.attributes is not None
    assert acquire.attributes["redlease.outcome"] == "error"
    assert acquire.status.status_code is StatusCode.ERROR
    assert "ServerUnavailable" in (acquire.status.description or "")
    (event,) = acquire.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"].endswith("ServerUnavailable")  # type: ignore[union-attr]


def test_spans_need_only_the_api(redlease_url, prefix):
    """Without an SDK the hooks cost nothing and break nothing (the API is a no-op)."""
    with redlease.Locks(redlease_url, prefix=prefix, hooks=OpenTelemetryHooks()) as locks:
        with locks.lock("orders:42") as lease:
            assert lease.fence > 0


class Recorder(Hooks):
    """What the hooks heard, in order."""

    def __init__(self) -> None:
        self.heard: list[tuple[Any, ...]] = []

    def released(self, lease: Any, kind: str, outcome: Any, held_for: float) -> None:
        self.heard.append(("released", outcome))

    def renewed(self, kept: int, lost: int) -> None:
        if lost:
            self.heard.append(("renewed", kept, lost))

    def lost(self, lease: Any) -> None:
        self.heard.append(("lost",))


def release_just_past_the_deadline(lock: Any) -> Any:
    """Hold ``lock`` busy (no sleep that lets the client's worker run first) until just
    past the lease's local deadline, then release it; the outcome."""
    lease = lock.acquire()
    while time.monotonic() < lease.expires_at + 0.001:
        pass
    return lock.release()


async def async_release_just_past_the_deadline(lock: Any) -> Any:
    lease = await lock.acquire()
    while time.monotonic() < lease.expires_at + 0.001:
        pass
    return await lock.release()


@pytest.mark.parametrize("client", ["lock", "redlock"])
async def test_a_release_just_past_the_deadline_reports_released_before_lost(
    flavor, prefix, redlease_servers_factory, round_trip, client
):
    """observability.md: ``lost`` runs once, and when a release finds the loss, its
    ``released`` says ``EXPIRED`` and comes first; the worker that finds it first reports a
    ``renewed(0, 1)``. A busy holder's release just past a ``renew=False`` lease's local
    deadline reported ``lost`` first (27 of 30 runs, an outside tester), and a Redlock
    release reported ``lost`` and then ``released(RELEASED)``."""
    servers = redlease_servers_factory(3 if client == "redlock" else 1)
    recorder = Recorder()
    urls = [server.url for server in servers]
    ttl = max(0.3, 20 * round_trip)
    if client == "redlock":
        make: Any = redlease.AsyncRedlock if flavor == "async" else redlease.Redlock
        locks = make(urls, prefix=prefix, hooks=recorder)
    else:
        make = redlease.AsyncLocks if flavor == "async" else redlease.Locks
        locks = make(urls[0], prefix=prefix, hooks=recorder)
    lock = locks.lock("ledger", ttl=ttl, renew=False)
    if flavor == "async":
        outcome = await async_release_just_past_the_deadline(lock)
        await locks.aclose()
    else:
        outcome = await asyncio.to_thread(release_just_past_the_deadline, lock)
        locks.close()
    assert outcome is redlease.ReleaseOutcome.EXPIRED
    heard = recorder.heard
    assert heard.count(("lost",)) == 1, heard
    if ("renewed", 0, 1) not in heard:  # not found by the worker first: by the release
        assert heard == [("released", redlease.ReleaseOutcome.EXPIRED), ("lost",)]


class ExitsOnce(Hooks):
    def __init__(self) -> None:
        self.rounds = 0

    def renewed(self, kept: int, lost: int) -> None:
        self.rounds += 1
        if self.rounds == 1:
            raise SystemExit("a hook that exits")


async def test_a_hook_that_raises_system_exit_is_logged_and_renewal_goes_on(
    make_locks, caplog, round_trip
):
    """observability.md: a hook that raises is logged and otherwise ignored, and the next
    hook is still called. A ``SystemExit`` from ``renewed`` ended the renewal worker
    silently: the next hook heard nothing more, and the lease was lost (an outside tester)."""
    recorder, exits = Recorder(), ExitsOnce()
    ttl = max(0.6, 30 * round_trip)
    locks = await make_locks(hooks=[exits, recorder])
    with caplog.at_level(logging.ERROR, logger="redlease"):
        async with locks.lock("ledger", ttl=ttl, renew=True) as lease:
            await asyncio.sleep(ttl * 1.5)
            assert not lease.lost
    assert "redlease hook ExitsOnce.renewed raised" in [r.getMessage() for r in caplog.records]
    assert exits.rounds >= 2, "the renewal worker stopped"
    assert ("released", redlease.ReleaseOutcome.RELEASED) in recorder.heard


@pytest.mark.timeout(60)
async def test_every_release_just_past_the_deadline_reports_lost(flavor, prefix, redlease_url):
    """observability.md: ``lost`` runs once per lease found lost, a release's included. The
    release's background started before the release marked the lease lost: when the
    background's answer came first it took the loss (and its callbacks) silently, and
    neither ``lost`` nor ``on_lost`` ran (an outside re-check: 4-6 of 400 sync releases)."""
    recorder = Recorder()
    make = redlease.AsyncLocks if flavor == "async" else redlease.Locks
    locks = make(redlease_url, prefix=prefix, hooks=recorder)
    lock = locks.lock("ledger", ttl=0.02, renew=False)
    for _ in range(200):
        if flavor == "async":
            await async_release_just_past_the_deadline(lock)
        else:
            await asyncio.to_thread(release_just_past_the_deadline, lock)
    if flavor == "async":
        await locks.aclose()
    else:
        locks.close()
    assert recorder.heard.count(("lost",)) == 200
