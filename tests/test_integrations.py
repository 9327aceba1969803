"""The Celery and FastAPI integrations, driven by the real frameworks.

Celery: one real worker (threads pool, four at once) consumes a queue of its own on the
machine's Redis (``REDLEASE_CELERY_BROKER``, default ``redis://127.0.0.1:6379/11``, else
the session's test server); only this run's keys are removed afterwards. FastAPI: the real
application over httpx's ASGI transport. The locks live on the session's test server,
under a prefix unique to the run.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import redis
from celery import Celery
from celery.contrib.testing.worker import start_worker
from fastapi import BackgroundTasks, FastAPI, HTTPException

import redlease
from conftest import eventually
from redlease import Lease
from redlease.integrations.celery import AlreadyRunning, current_lease, singleton
from redlease.integrations.fastapi import lock_dependency
from redlease.server import EmbeddedServer, ServerInfo

BROKER_URL = os.environ.get("REDLEASE_CELERY_BROKER", "redis://127.0.0.1:6379/11")
pytestmark = pytest.mark.filterwarnings(
    "ignore:Call to deprecated setex:DeprecationWarning"  # inside Celery's Redis backend
)


def delete_keys(client: redis.Redis, pattern: str) -> None:
    for key in client.scan_iter(match=pattern, count=500):
        client.delete(key)


# --- Celery -----------------------------------------------------------------------------


@dataclass
class CeleryRig:
    app: Celery
    locks: redlease.Locks
    store: redis.Redis  # where tasks count their runs and record their intervals
    prefix: str
    tasks: dict[str, Any]

    def runs(self, customer_id: int) -> int:
        return int(self.store.get(f"{self.prefix}:runs:{customer_id}") or 0)

    def intervals(self, customer_id: int) -> list[tuple[float, float]]:
        raw = self.store.lrange(f"{self.prefix}:intervals:{customer_id}", 0, -1)
        pairs = [tuple(map(float, item.split())) for item in raw]
        return sorted((start, end) for start, end in pairs)


@pytest.fixture(scope="module")
def celery_rig(redlease_server: ServerInfo) -> Iterator[CeleryRig]:
    broker_url = BROKER_URL
    broker = redis.Redis.from_url(broker_url)
    try:
        broker.ping()
    except redis.ConnectionError:  # no machine Redis: the session's test server will do
        broker.close()
        broker_url = redlease_server.url
        broker = redis.Redis.from_url(broker_url)
    run = uuid.uuid4().hex[:12]
    prefix, queue = f"test-celery-{run}", f"redlease-test-{run}"
    locks = redlease.Locks(redlease_server.url, prefix=prefix)
    store = redis.Redis.from_url(redlease_server.url, decode_responses=True)
    app = Celery(f"redlease-test-{run}", broker=broker_url, backend=broker_url)
    app.conf.update(
        task_default_queue=queue,
        result_expires=600,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
        worker_enable_remote_control=False,  # no pidbox keys left behind in the broker
    )

    def record(customer_id: int, seconds: float) -> None:
        """One run: counted, and its interval recorded, in Redis."""
        store.incr(f"{prefix}:runs:{customer_id}")
        start = time.time()
        time.sleep(seconds)
        store.rpush(f"{prefix}:intervals:{customer_id}", f"{start} {time.time()}")

    @app.task(name=f"{run}.report")
    @singleton(locks, "report:{customer_id}")
    def report(customer_id: int, seconds: float) -> str:
        record(customer_id, seconds)
        return "built"

    @app.task(name=f"{run}.export")
    @singleton(locks, "export:{customer_id}", on_conflict="wait", timeout=20)
    def export(customer_id: int, seconds: float) -> str:
        record(customer_id, seconds)
        return "exported"

    @app.task(name=f"{run}.invoice", bind=True)
    @singleton(locks, "invoice:{customer_id}", on_conflict="raise")
    def invoice(self: Any, customer_id: int, seconds: float) -> str:
        record(customer_id, seconds)
        return f"invoiced by {self.name}"

    @app.task(name=f"{run}.long")
    @singleton(locks, "long:{customer_id}", ttl=1)
    def long_job(customer_id: int, seconds: float) -> dict[str, int]:
        record(customer_id, seconds)
        lease = current_lease()
        assert lease is not None
        return {"fence": lease.fence, "renewals": lease.renewals}

    tasks = {"report": report, "export": export, "invoice": invoice, "long": long_job}
    rig = CeleryRig(app, locks, store, prefix, tasks)
    try:
        with start_worker(
            app, pool="threads", concurrency=4, perform_ping_check=False, queues=[queue]
        ):
            yield rig
    finally:
        locks.close()
        delete_keys(store, f"{prefix}*")
        store.close()
        broker.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        broker.close()


def gather(results: list[Any], timeout: float = 20) -> list[Any]:
    try:
        return [result.get(timeout=timeout, propagate=False) for result in results]
    finally:
        for result in results:
            result.forget()


def test_skip_runs_one_of_four_concurrent_sends(celery_rig: CeleryRig) -> None:
    report = celery_rig.tasks["report"]

    outcomes = gather([report.delay(7, 1.5) for _ in range(4)])

    assert outcomes.count("built") == 1
    assert outcomes.count(None) == 3
    assert celery_rig.runs(7) == 1


def test_wait_runs_all_four_one_after_another(celery_rig: CeleryRig) -> None:
    export = celery_rig.tasks["export"]

    outcomes = gather([export.delay(8, 0.3) for _ in range(4)])

    assert outcomes == ["exported"] * 4
    intervals = celery_rig.intervals(8)
    assert len(intervals) == 4
    for (_, end), (next_start, _) in itertools.pairwise(intervals):
        assert end <= next_start, f"runs overlapped: {intervals}"


def test_raise_gives_the_caller_a_typed_error(celery_rig: CeleryRig) -> None:
    invoice = celery_rig.tasks["invoice"]
    first = invoice.delay(9, 1.0)
    time.sleep(0.3)

    outcomes = gather([first, invoice.delay(9, 0)])

    assert outcomes[0] == f"invoiced by {invoice.name}"
    error = outcomes[1]
    assert isinstance(error, AlreadyRunning)
    assert (error.name, error.timeout) == ("invoice:9", 0)
    assert "already running" in str(error)
    assert celery_rig.runs(9) == 1


def test_long_task_keeps_its_lock_beyond_the_ttl(celery_rig: CeleryRig) -> None:
    long_job = celery_rig.tasks["long"]
    lease_key = celery_rig.locks._keys_for("long:10").lease
    first = long_job.delay(10, 3.0)
    time.sleep(2.0)  # twice the 1 s TTL

    assert 0 < celery_rig.store.pttl(lease_key) <= 1000
    duplicate = gather([long_job.delay(10, 0)])[0]
    assert duplicate is None  # skipped: the first run still holds the lock
    outcome = gather([first])[0]

    assert isinstance(outcome, dict), outcome  # no LeaseLost
    assert outcome["renewals"] >= 2
    assert celery_rig.runs(10) == 1
    assert not celery_rig.store.exists(lease_key)


def test_skip_is_logged_and_returns_none(
    celery_rig: CeleryRig, caplog: pytest.LogCaptureFixture
) -> None:
    report = celery_rig.tasks["report"]
    caplog.set_level(logging.INFO, logger="redlease")

    with celery_rig.locks.lock("report:11"):
        skipped = report.apply(args=(11, 0))

    assert skipped.get() is None
    assert celery_rig.runs(11) == 0
    assert "skipped a run" in caplog.text
    assert "'report:11'" in caplog.text
    assert report.apply(args=(11, 0)).get() == "built"


def test_task_keeps_its_signature_for_celery_checks(celery_rig: CeleryRig) -> None:
    with pytest.raises(TypeError):
        celery_rig.tasks["report"].delay(1, 2, 3)


def test_default_key_is_the_task_and_bad_uses_fail_early(celery_rig: CeleryRig) -> None:
    locks = celery_rig.locks

    @singleton(locks)
    def nightly() -> str:
        return "ran"

    with locks.lock(f"celery:{__name__}.{nightly.__qualname__}"):
        assert nightly() is None
    assert nightly() == "ran"

    with pytest.raises(redlease.InvalidArgument, match="customer"):
        singleton(locks, "report:{customer}")(nightly)
    with pytest.raises(redlease.InvalidArgument, match="on_conflict"):
        singleton(locks, on_conflict="queue")  # type: ignore[arg-type]
    with pytest.raises(redlease.InvalidArgument, match=r"below @app\.task"):
        singleton(locks)(celery_rig.tasks["report"])
    unfinalized = Celery("redlease-test-unfinalized", autofinalize=False)
    with pytest.raises(redlease.InvalidArgument, match=r"below @app\.task"):
        singleton(locks)(unfinalized.task(nightly))  # a proxy, not evaluated: no RuntimeError


# --- FastAPI ----------------------------------------------------------------------------


@pytest.fixture
async def alocks(redlease_server: ServerInfo) -> AsyncIterator[redlease.AsyncLocks]:
    prefix = f"test-fastapi-{uuid.uuid4().hex[:12]}"
    async with redlease.AsyncLocks(redlease_server.url, prefix=prefix) as alocks:
        yield alocks
        async for key in alocks.client.scan_iter(match=f"{prefix}*"):
            await alocks.client.delete(key)


def order_app(alocks: redlease.AsyncLocks, **options: Any) -> FastAPI:
    app = FastAPI()
    order_lock = lock_dependency(alocks, "order:{user_id}", **options)
    report_lock = lock_dependency(alocks, "report:{customer}")
    app.state.seen_during_teardown = []

    async def look_at_lock(name: str) -> None:
        app.state.seen_during_teardown.append(await alocks.lock(name).locked())

    @app.post("/orders/{user_id}")
    async def create_order(
        user_id: int,
        background: BackgroundTasks,
        seconds: float = 0,
        fail: bool = False,
        lease: Lease = order_lock,
    ) -> dict[str, Any]:
        await asyncio.sleep(seconds)
        if fail:
            raise HTTPException(400, "the order was refused")
        background.add_task(look_at_lock, f"order:{user_id}")  # runs after the response
        return {"user_id": user_id, "fence": lease.fence}

    @app.get("/reports", dependencies=[report_lock])
    async def get_report(customer: str) -> dict[str, str]:
        return {"customer": customer}

    return app


def client_for(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_overlapping_requests_for_one_user_get_200_and_409(
    alocks: redlease.AsyncLocks,
) -> None:
    async with client_for(order_app(alocks)) as client:
        first, second = await asyncio.gather(
            client.post("/orders/1", params={"seconds": 0.5}),
            client.post("/orders/1", params={"seconds": 0.5}),
        )

    assert sorted([first.status_code, second.status_code]) == [200, 409]
    refused = first if first.status_code == 409 else second
    assert refused.json()["detail"]["error"] == "locked"
    assert refused.json()["detail"]["lock"] == "order:1"
    assert "another request" in refused.json()["detail"]["message"]
    assert not await alocks.client.exists(alocks._keys_for("order:1").lease)


async def test_requests_for_different_users_both_run(alocks: redlease.AsyncLocks) -> None:
    async with client_for(order_app(alocks)) as client:
        responses = await asyncio.gather(
            client.post("/orders/1", params={"seconds": 0.3}),
            client.post("/orders/2", params={"seconds": 0.3}),
        )

    assert [response.status_code for response in responses] == [200, 200]
    assert [response.json()["user_id"] for response in responses] == [1, 2]
    for user in (1, 2):
        assert not await alocks.client.exists(alocks._keys_for(f"order:{user}").lease)


async def test_lock_is_released_before_the_response_is_sent(
    alocks: redlease.AsyncLocks,
) -> None:
    app = order_app(alocks)
    async with client_for(app) as client:
        response = await client.post("/orders/3")

    assert response.status_code == 200
    assert app.state.seen_during_teardown == [False]  # free once the response went out


async def test_request_scope_holds_the_lock_until_after_the_response(
    alocks: redlease.AsyncLocks,
) -> None:
    app = order_app(alocks, scope="request")
    async with client_for(app) as client:
        response = await client.post("/orders/3")

    assert response.status_code == 200
    assert app.state.seen_during_teardown == [True]
    assert not await alocks.client.exists(alocks._keys_for("order:3").lease)


async def test_a_failing_endpoint_releases_the_lock(alocks: redlease.AsyncLocks) -> None:
    async with client_for(order_app(alocks)) as client:
        refused = await client.post("/orders/4", params={"fail": True})
        again = await client.post("/orders/4")

    assert refused.status_code == 400
    assert again.status_code == 200
    assert not await alocks.client.exists(alocks._keys_for("order:4").lease)


async def test_423_with_retry_after_and_a_wait(alocks: redlease.AsyncLocks) -> None:
    app = order_app(alocks, status_code=423, retry_after=2)
    async with client_for(app) as client, alocks.lock("order:5"):
        refused = await client.post("/orders/5")

    assert refused.status_code == 423
    assert refused.headers["retry-after"] == "2"

    waiting = order_app(alocks, timeout=5)
    held = await alocks.lock("order:5", owner="holder").acquire()
    assert held.fence > 0
    async with client_for(waiting) as client:
        pending = asyncio.ensure_future(client.post("/orders/5"))
        await asyncio.sleep(0.2)
        assert not pending.done()
        await alocks.lock("order:5", owner="holder").release()
        response = await pending

    assert response.status_code == 200
    assert response.json()["fence"] > held.fence


async def test_key_from_a_query_parameter(alocks: redlease.AsyncLocks) -> None:
    async with client_for(order_app(alocks)) as client, alocks.lock("report:acme"):
        refused = await client.get("/reports", params={"customer": "acme"})
        other = await client.get("/reports", params={"customer": "globex"})
        missing = await client.get("/reports")

    assert refused.status_code == 409
    assert refused.json()["detail"]["lock"] == "report:acme"
    assert other.status_code == 200
    assert missing.status_code == 422  # FastAPI validates the key's parameters


def test_bad_dependency_options_fail_early() -> None:
    alocks = redlease.AsyncLocks("redis://127.0.0.1:1")  # never connects
    with pytest.raises(redlease.InvalidArgument, match="409 or 423"):
        lock_dependency(alocks, "order:{user_id}", status_code=500)
    with pytest.raises(redlease.InvalidArgument, match="field"):
        lock_dependency(alocks, "order:{0}")
    for template in ("x:{a.b}", "x:{a[0]}", "x:{class}"):
        with pytest.raises(redlease.InvalidArgument, match="field"):
            lock_dependency(alocks, template)
    for template in ("o:{a:{b}}", "o:{a:d}", "o:{a!z}"):
        with pytest.raises(redlease.InvalidArgument, match="template"):
            lock_dependency(alocks, template)


async def test_a_parameter_that_makes_no_lock_name_is_the_clients_mistake(
    alocks: redlease.AsyncLocks,
) -> None:
    """A brace (reserved for cluster hash tags) or an over-long value in a request is bad
    input from the client: FastAPI's 422, not a 500."""
    async with client_for(order_app(alocks)) as client:
        braced = await client.get("/reports", params={"customer": "a}b"})
        long = await client.get("/reports", params={"customer": "c" * 2000})
    for response in (braced, long):
        assert response.status_code == 422, response.text
        assert response.json()["detail"]["error"] == "invalid lock name"


@pytest.mark.parametrize("scope", ["function", "request"])
async def test_a_release_the_server_does_not_answer_leaves_the_response_standing(
    scope: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The endpoint did its work: a release that meets a stopped server is logged, and the
    response stands (a 500 would make a client repeat the work); the release goes on from
    the background and frees the lock once the server answers again."""
    with EmbeddedServer() as server, redis.Redis.from_url(server.url) as admin:
        prefix = f"test-fastapi-{uuid.uuid4().hex[:12]}"
        alocks = redlease.AsyncLocks(f"{server.url}?socket_timeout=0.5", prefix=prefix)
        app = FastAPI()
        order_lock = lock_dependency(alocks, "order:{user_id}", scope=scope)  # type: ignore[arg-type]

        @app.post("/orders/{user_id}")
        async def create_order(user_id: int, lease: Lease = order_lock) -> dict[str, int]:
            server.pause()
            return {"fence": lease.fence}

        try:
            with caplog.at_level(logging.WARNING, logger="redlease"):
                async with client_for(app) as client:
                    response = await client.post("/orders/1")
        finally:
            server.resume()
        assert response.status_code == 200
        assert "could not release 'order:1'" in caplog.text
        lease_key = alocks.lock("order:1").keys.lease
        assert await eventually(lambda: not admin.exists(lease_key), 5)
        await alocks.aclose()
