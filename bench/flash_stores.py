"""The stores the flash sale sells from: which store each approach uses, whether it
answers, and a private stock in it (PostgreSQL or MariaDB tables, or Redis keys) that is
put on sale, read after the run and removed, whatever happens."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import redis

from flash_buyer import MARIADB, POSTGRES_DSN

STORES = {
    "redlease": "postgresql",
    "postgres_for_update": "postgresql",
    "mariadb_for_update": "mariadb",
    "optimistic_version": "postgresql",
    "redis_lua": "redis",
    "no_lock": "postgresql",
}
APPROACHES = tuple(STORES)
NEEDS_REDIS = frozenset({"redlease", "redis_lua", "segments"})


@dataclass
class Servers:
    redis_url: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    down: dict[str, str] = field(default_factory=dict)  # store -> reason

    def reason_to_skip(self, part: str) -> str | None:
        store = STORES.get(part, "postgresql")  # segments: PostgreSQL rows
        stores = {store} | ({"redis"} if part in NEEDS_REDIS else set())
        reasons = [self.down[store] for store in sorted(stores) if store in self.down]
        return "; ".join(reasons) or None


def one_line(exc: BaseException) -> str:
    """An error on one line, for ``skipped`` and the log."""
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def probe(stack: ExitStack, redis_url: str | None) -> Servers:
    """Ask each server for its version; a server that does not answer is marked down."""
    servers = Servers()
    try:
        servers.versions["postgresql"] = _sql_version("postgresql")
    except Exception as exc:
        servers.down["postgresql"] = (
            f"PostgreSQL on 127.0.0.1:5432 does not answer: {one_line(exc)}"
        )
    try:
        servers.versions["mariadb"] = _sql_version("mariadb")
    except Exception as exc:
        servers.down["mariadb"] = f"MariaDB on 127.0.0.1:3306 does not answer: {one_line(exc)}"
    try:
        if redis_url is None:
            from redlease.server import EmbeddedServer  # noqa: PLC0415

            redis_url = stack.enter_context(EmbeddedServer()).url
        client = redis.Redis.from_url(redis_url, socket_timeout=5)
        info = client.info("server")
        client.close()
        kind = "valkey" if info.get("valkey_version") else "redis"
        servers.versions["redis_server"] = f"{kind} {info.get(f'{kind}_version')}"
        servers.redis_url = redis_url
    except Exception as exc:
        servers.down["redis"] = f"no Redis server: {one_line(exc)}"
    return servers


@contextmanager
def stocked(
    store: str, table: str, prefix: str, shares: list[int], redis_url: str | None
) -> Iterator[Callable[[], tuple[list[int], list[int]]]]:
    """Put the stock on sale; yield a reader of (orders, stock left) per segment; remove all."""
    try:
        if store == "redis":
            yield from _redis_stocked(prefix, shares[0], redis_url)
        else:
            with _sql(store) as connection:
                try:
                    _create_tables(connection, store, table, shares)
                    yield lambda: _sql_state(connection, table, len(shares))
                finally:
                    _drop_tables(connection, table)
    finally:
        if redis_url is not None:  # the redis_lua keys, or the redlease locks of the run
            client = redis.Redis.from_url(redis_url)
            _delete_keys(client, prefix)
            client.close()


def _redis_stocked(
    prefix: str, stock: int, redis_url: str | None
) -> Iterator[Callable[[], tuple[list[int], list[int]]]]:
    assert redis_url is not None
    client = redis.Redis.from_url(redis_url)
    try:
        client.set(f"{prefix}:stock", stock)

        def state() -> tuple[list[int], list[int]]:
            left = int(client.get(f"{prefix}:stock") or 0)
            return [int(client.llen(f"{prefix}:orders"))], [left]

        yield state
    finally:
        client.close()


@contextmanager
def _sql(store: str) -> Iterator[Any]:
    if store == "mariadb":
        import pymysql  # noqa: PLC0415

        connection = pymysql.connect(**MARIADB, autocommit=False)
    else:
        import psycopg  # noqa: PLC0415

        connection = psycopg.connect(POSTGRES_DSN)
    try:
        yield connection
    finally:
        connection.close()


def _sql_version(store: str) -> str:
    with _sql(store) as connection, connection.cursor() as cursor:
        cursor.execute("SHOW server_version" if store == "postgresql" else "SELECT VERSION()")
        (version,) = cursor.fetchone()
        connection.rollback()
        return str(version)


def _create_tables(connection: Any, store: str, table: str, shares: list[int]) -> None:
    serial, engine = (
        ("BIGINT AUTO_INCREMENT", " ENGINE=InnoDB") if store == "mariadb" else ("BIGSERIAL", "")
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {table} (id INT PRIMARY KEY, stock INT NOT NULL,"
            f" version INT NOT NULL DEFAULT 0){engine}"
        )
        cursor.execute(
            f"CREATE TABLE {table}_orders (id {serial} PRIMARY KEY,"
            f" buyer INT NOT NULL, segment INT NOT NULL){engine}"
        )
        cursor.executemany(
            f"INSERT INTO {table} (id, stock) VALUES (%s, %s)", list(enumerate(shares))
        )
    connection.commit()


def _sql_state(connection: Any, table: str, segments: int) -> tuple[list[int], list[int]]:
    orders, left = [0] * segments, [0] * segments
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT segment, COUNT(*) FROM {table}_orders GROUP BY segment")
        for segment, count in cursor.fetchall():
            orders[segment] = int(count)
        cursor.execute(f"SELECT id, stock FROM {table}")
        for segment, stock in cursor.fetchall():
            left[segment] = int(stock)
    connection.rollback()
    return orders, left


def _drop_tables(connection: Any, table: str) -> None:
    with suppress(Exception):
        connection.rollback()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}_orders")
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
    connection.commit()


def _delete_keys(client: redis.Redis, prefix: str) -> None:
    """Delete the run's keys (the lock's included); bounded by count."""
    keys = list(client.scan_iter(match=f"{prefix}*", count=1000))[:100_000]
    for start in range(0, len(keys), 500):
        client.unlink(*keys[start : start + 500])


def split_stock(stock: int, segments: int) -> list[int]:
    share, extra = divmod(stock, segments)
    return [share + (segment < extra) for segment in range(segments)]
