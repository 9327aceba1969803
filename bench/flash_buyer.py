"""One buyer process of the flash-sale claims benchmark (see claims_flash.py).

A buyer connects to the store of its approach, warms up (connection open, scripts
loaded), reports ready, waits for the parent's common start time, then buys one unit at
a time until it sees the stock sold out, its tries run out, or the run's deadline passes.

Every purchase is the same read-check-write wherever a database holds the stock::

    BEGIN; SELECT stock [FOR UPDATE]; (stock <= 0: sold out)
    UPDATE ... SET stock = <read> - 1; INSERT an order; COMMIT

and the approaches differ only in what protects it: nothing (``no_lock``), a redlease
lock taken around it (``redlease``, and ``segments`` with one lock per stock row), the
row lock of ``FOR UPDATE`` (``postgres_for_update``, ``mariadb_for_update``), or a
version check in the UPDATE (``optimistic_version``, which rolls back and tries again
when another buyer changed the row since the read). ``redis_lua`` keeps the stock in Redis
and takes a unit with one EVALSHA, then records the order with RPUSH.

A purchase's latency runs from its start to its commit (the lock's acquire and release
included); for ``optimistic_version`` it spans the retries, as a customer would wait.
"""

from __future__ import annotations

import enum
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

POSTGRES_DSN = "host=127.0.0.1 port=5432 user=postgres dbname=test connect_timeout=5"
MARIADB = {
    "host": "127.0.0.1",
    "port": 3306,
    "user": "root",
    "password": "",
    "database": "test",
    "connect_timeout": 5,
}
MAX_CONSECUTIVE_ERRORS = 50
WAIT_FOR_GO_S = 120.0


class Outcome(enum.Enum):
    SOLD = "sold"
    SOLD_OUT = "sold_out"
    RETRY = "retry"  # optimistic_version: the row changed since the read


class OutOfTime(Exception):
    """The run's deadline passed while waiting for the lock."""


@dataclass(frozen=True)
class BuyerSpec:
    """Everything a buyer needs; it crosses the process boundary, so plain data only."""

    approach: str  # an approach name, or "segments"
    index: int
    table: str  # the stock table; orders go to ``<table>_orders``
    segments: int  # stock rows (1 except for the segments part)
    redis_url: str | None
    key_prefix: str  # Redis keys and redlease lock prefix of the run
    lua: str  # the decrement script (redis_lua only)
    max_tries: int
    seconds: float


def buyer_main(spec: BuyerSpec, ready: Any, go: Any, start_at: Any, results: Any) -> None:
    """Process entry: put the pid on ``ready``, then one report dict on ``results``."""
    closers: list[Callable[[], None]] = []
    announced = False
    try:
        buy = _connect(spec, closers)
        ready.put(os.getpid())
        announced = True
        if not go.wait(WAIT_FOR_GO_S):
            return
        begin = start_at.value
        time.sleep(max(0.0, begin - time.monotonic()))
        report = _buy_until_sold_out(spec, buy, begin + spec.seconds)
    except Exception as exc:  # reported, not raised: the parent must see it
        report = {"index": spec.index, "fatal": f"{type(exc).__name__}: {exc}"}
        if not announced:  # never leave the parent waiting for a buyer that failed early
            ready.put(os.getpid())
    finally:
        for close in reversed(closers):
            with suppress(Exception):
                close()
    results.put(report)


def _buy_until_sold_out(
    spec: BuyerSpec, buy: Callable[[int, float], Outcome], deadline: float
) -> dict[str, Any]:
    rng = random.Random(f"{spec.key_prefix}:{spec.index}")
    open_segments = list(range(spec.segments))
    tries = retries = errors = consecutive_errors = 0
    latencies: list[float] = []
    last_buy_at: float | None = None
    first_error: str | None = None
    out_of_time = False
    began: float | None = None  # start of the purchase in progress (kept across retries)
    while open_segments and tries < spec.max_tries:
        now = time.monotonic()
        if now >= deadline:
            out_of_time = True
            break
        segment = rng.choice(open_segments)
        tries += 1
        began = now if began is None else began
        try:
            outcome = buy(segment, deadline - now)
        except OutOfTime:
            out_of_time = True
            break
        except Exception as exc:
            errors += 1
            consecutive_errors += 1
            first_error = first_error or f"{type(exc).__name__}: {exc}"
            began = None
            if consecutive_errors >= MAX_CONSECUTIVE_ERRORS:
                break
            continue
        consecutive_errors = 0
        if outcome is Outcome.RETRY:
            retries += 1
            continue
        if outcome is Outcome.SOLD:
            last_buy_at = time.monotonic()
            latencies.append((last_buy_at - began) * 1e6)
        else:
            open_segments.remove(segment)  # sold out here: try the other segments
        began = None
    return {
        "index": spec.index,
        "bought": len(latencies),
        "tries": tries,
        "retries": retries,
        "errors": errors,
        "first_error": first_error,
        "latencies_us": latencies,
        "last_buy_at": last_buy_at,
        "finished_at": time.monotonic(),
        "out_of_time": out_of_time,
        "sold_out": not open_segments,
    }


def _connect(spec: BuyerSpec, closers: list[Callable[[], None]]) -> Callable[[int, float], Outcome]:
    """Open this approach's connections, warm them up, and return its ``buy(segment, left_s)``."""
    if spec.approach == "redis_lua":
        return _redis_lua(spec, closers)
    if spec.approach == "mariadb_for_update":
        return _mariadb(spec, closers)
    import psycopg  # noqa: PLC0415 - each buyer imports only its own driver

    connection = psycopg.connect(POSTGRES_DSN)
    closers.append(connection.close)
    connection.execute(f"SELECT stock FROM {spec.table} WHERE id = 0").fetchone()
    connection.rollback()
    if spec.approach == "optimistic_version":
        return lambda segment, _left: _optimistic(connection, spec.table, segment, spec.index)
    if spec.approach == "postgres_for_update":
        return lambda segment, _left: _read_check_write(
            connection, spec.table, segment, spec.index, " FOR UPDATE"
        )
    if spec.approach == "no_lock":
        return lambda segment, _left: _read_check_write(connection, spec.table, segment, spec.index)
    return _locked(spec, connection, closers)


def _locked(
    spec: BuyerSpec, connection: Any, closers: list[Callable[[], None]]
) -> Callable[[int, float], Outcome]:
    """``redlease`` and ``segments``: the read-check-write under the segment's redlease lock."""
    import redis  # noqa: PLC0415

    from redlease import Locks, LockTimeout  # noqa: PLC0415

    assert spec.redis_url is not None
    client = redis.Redis.from_url(spec.redis_url)
    closers.append(client.close)
    locks = Locks(client, prefix=spec.key_prefix)
    closers.append(locks.close)
    with locks.lock(f"warmup:{spec.index}"):  # load the scripts, open the pub/sub link
        pass
    names = [f"stock:{segment}" for segment in range(spec.segments)]

    def buy(segment: int, left_s: float) -> Outcome:
        try:
            with locks.lock(names[segment], timeout=left_s):
                return _read_check_write(connection, spec.table, segment, spec.index)
        except LockTimeout as exc:
            raise OutOfTime from exc

    return buy


def _read_check_write(
    connection: Any, table: str, segment: int, buyer: int, for_update: str = ""
) -> Outcome:
    """The purchase: safe only under a lock, or with ``for_update`` = ``" FOR UPDATE"``."""
    with _rolled_back_on_error(connection) as cursor:
        cursor.execute(f"SELECT stock FROM {table} WHERE id = %s{for_update}", (segment,))
        (stock,) = cursor.fetchone()
        if stock <= 0:
            connection.rollback()
            return Outcome.SOLD_OUT
        cursor.execute(f"UPDATE {table} SET stock = %s WHERE id = %s", (stock - 1, segment))
        return _order(connection, cursor, table, segment, buyer)


def _optimistic(connection: Any, table: str, segment: int, buyer: int) -> Outcome:
    """Read stock and version; write only if the version is still the one read."""
    with _rolled_back_on_error(connection) as cursor:
        cursor.execute(f"SELECT stock, version FROM {table} WHERE id = %s", (segment,))
        stock, version = cursor.fetchone()
        if stock <= 0:
            connection.rollback()
            return Outcome.SOLD_OUT
        cursor.execute(
            f"UPDATE {table} SET stock = %s, version = version + 1 WHERE id = %s AND version = %s",
            (stock - 1, segment, version),
        )
        if cursor.rowcount == 0:
            connection.rollback()
            return Outcome.RETRY
        return _order(connection, cursor, table, segment, buyer)


@contextmanager
def _rolled_back_on_error(connection: Any) -> Iterator[Any]:
    """A cursor; an error inside rolls the transaction back, and is raised."""
    try:
        with connection.cursor() as cursor:
            yield cursor
    except Exception:
        with suppress(Exception):
            connection.rollback()
        raise


def _order(connection: Any, cursor: Any, table: str, segment: int, buyer: int) -> Outcome:
    """Record the order and commit the purchase."""
    cursor.execute(f"INSERT INTO {table}_orders (buyer, segment) VALUES (%s, %s)", (buyer, segment))
    connection.commit()
    return Outcome.SOLD


def _mariadb(spec: BuyerSpec, closers: list[Callable[[], None]]) -> Callable[[int, float], Outcome]:
    import pymysql  # noqa: PLC0415

    connection = pymysql.connect(**MARIADB, autocommit=False)
    closers.append(connection.close)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT stock FROM {spec.table} WHERE id = 0")
        cursor.fetchone()
    connection.rollback()

    # autocommit off: like psycopg, the first statement opens the transaction
    return lambda segment, _left: _read_check_write(
        connection, spec.table, segment, spec.index, " FOR UPDATE"
    )


def _redis_lua(
    spec: BuyerSpec, closers: list[Callable[[], None]]
) -> Callable[[int, float], Outcome]:
    import redis  # noqa: PLC0415

    assert spec.redis_url is not None
    client = redis.Redis.from_url(spec.redis_url)
    closers.append(client.close)
    decrement = client.register_script(spec.lua)
    client.script_load(spec.lua)
    stock_key, orders_key = f"{spec.key_prefix}:stock", f"{spec.key_prefix}:orders"
    client.exists(stock_key)

    def buy(_segment: int, _left_s: float) -> Outcome:
        if int(decrement(keys=[stock_key])) < 0:
            return Outcome.SOLD_OUT
        client.rpush(orders_key, spec.index)
        return Outcome.SOLD

    return buy
