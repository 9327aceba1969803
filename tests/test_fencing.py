"""Fenced writes refuse a holder whose lease has ended, in Redis and in real SQL databases.

The Redis scenarios run once per flavour (``RedisGuard`` and ``AsyncRedisGuard``) on the
test server. The SQL scenarios run on SQLite and on this machine's PostgreSQL and MariaDB
(skipped, with the reason, only when a server does not answer), each in a table of its own.
The story is the flash sale's: a buyer whose lease ran out while it was paused comes back
and tries to write the stock; the guard refuses it, so the last item is sold once.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

import redlease
from redlease.errors import InvalidArgument, WrongKeyType
from redlease.fencing import (
    AsyncRedisGuard,
    FenceRejected,
    RedisGuard,
    RowNotFound,
    SqlGuard,
    paramstyle_of,
)


@dataclass(frozen=True)
class Holder:
    """Stands for a lease: the lock's name, its fencing token and its owner token."""

    fence: int
    token: str = "owner-a"
    name: str = "flash-sale:stock"


# Redis -------------------------------------------------------------------------------


class SyncGuardAdapter:
    """The awaitable face of a sync :class:`RedisGuard`, so each scenario is written once."""

    def __init__(self, guard: RedisGuard) -> None:
        self.guard = guard

    async def set(self, *args: Any, **kwargs: Any) -> None:
        self.guard.set(*args, **kwargs)

    async def hset(self, *args: Any) -> int:
        return self.guard.hset(*args)

    async def incrby(self, *args: Any) -> int:
        return self.guard.incrby(*args)

    async def claim(self, *args: Any) -> None:
        self.guard.claim(*args)


@pytest.fixture(params=["sync", "async"])
def guard(
    request: pytest.FixtureRequest,
    redlease_redis: redis.Redis,
    redlease_async_redis: redis.asyncio.Redis,
) -> Any:
    if request.param == "sync":
        return SyncGuardAdapter(RedisGuard(redlease_redis))
    return AsyncRedisGuard(redlease_async_redis)


@pytest.fixture
def server(redlease_redis: redis.Redis, prefix: str) -> Iterator[redis.Redis]:
    """The test server seen directly; the test's keys (under ``prefix``) are deleted after."""
    yield redlease_redis
    keys = list(redlease_redis.scan_iter(match=f"*{prefix}*"))
    if keys:
        redlease_redis.unlink(*keys)


@pytest.fixture
def key(prefix: str, server: redis.Redis) -> str:
    return f"shop:{{{prefix}}}:stock"


def record(server: redis.Redis, key: str) -> dict[bytes, bytes]:
    return server.hgetall(f"{key}:fence")  # type: ignore[return-value]


async def test_newer_token_is_accepted(guard: Any, server: redis.Redis, key: str) -> None:
    await guard.set(Holder(1, "a"), key, 10)
    await guard.set(Holder(2, "b"), key, 9)

    assert server.get(key) == b"9"
    assert record(server, key) == {b"fence": b"2", b"owner": b"b"}


async def test_older_token_is_refused_and_changes_nothing(
    guard: Any, server: redis.Redis, key: str
) -> None:
    await guard.set(Holder(5, "new"), key, 3)

    with pytest.raises(FenceRejected) as refused:
        await guard.set(Holder(4, "old"), key, 99)

    assert (refused.value.token, refused.value.newest) == (4, 5)
    assert refused.value.resource == key
    assert refused.value.lock == "flash-sale:stock"
    assert not refused.value.reused
    assert isinstance(refused.value, redlease.LockError)
    assert "stop" in str(refused.value)
    assert server.get(key) == b"3"
    assert record(server, key) == {b"fence": b"5", b"owner": b"new"}


async def test_holder_may_write_twice_with_its_token(
    guard: Any, server: redis.Redis, key: str
) -> None:
    counter = f"{key}:sold"
    assert await guard.incrby(Holder(7, "a"), counter) == 1
    assert await guard.incrby(Holder(7, "a"), counter, 5) == 6


async def test_equal_token_from_another_owner_is_refused(
    guard: Any, server: redis.Redis, key: str
) -> None:
    """After a failover lost the counter's last INCR, two holders can carry token 7."""
    await guard.set(Holder(7, "before-failover"), key, 1)

    with pytest.raises(FenceRejected) as refused:
        await guard.set(Holder(7, "after-failover"), key, 0)

    assert refused.value.reused
    assert "another owner" in str(refused.value)
    assert server.get(key) == b"1"


async def test_claim_before_reading_shuts_out_a_paused_holder(
    guard: Any, server: redis.Redis, key: str
) -> None:
    """Bob claims the stock, then reads it; Alice's stale write lands between Bob's read and
    his write. Without the claim it would be accepted (5 is newer than anything seen yet) and
    Bob's write would then sell the same item again."""
    server.set(key, 1)
    alice, bob = Holder(5, "alice"), Holder(6, "bob")

    await guard.claim(bob, key)
    stock = int(server.get(key) or 0)
    with pytest.raises(FenceRejected):
        await guard.set(alice, key, 0)
    await guard.set(bob, key, stock - 1)

    assert server.get(key) == b"0"
    assert record(server, key) == {b"fence": b"6", b"owner": b"bob"}


async def test_hset_and_expiry(guard: Any, server: redis.Redis, key: str) -> None:
    order = f"{key}:order"
    assert await guard.hset(Holder(1), order, {"item": "lamp", "qty": 1}) == 2
    assert await guard.hset(Holder(2), order, {"qty": 2, "state": "paid"}) == 1
    assert server.hgetall(order) == {b"item": b"lamp", b"qty": b"2", b"state": b"paid"}

    await guard.set(Holder(3), key, "x", px=60_000)
    assert 0 < server.pttl(key) <= 60_000
    assert server.pttl(f"{key}:fence") == -1  # the record never expires


async def test_many_fields_in_one_write(guard: Any, server: redis.Redis, key: str) -> None:
    mapping = {f"f{index}": index for index in range(3000)}
    assert await guard.hset(Holder(1), key, mapping) == 3000
    assert server.hlen(key) == 3000


async def test_tokens_beyond_a_doubles_precision_compare_exactly(
    guard: Any, server: redis.Redis, key: str
) -> None:
    """2**53 + 1 and 2**53 are the same Lua number; the script compares decimal strings."""
    await guard.set(Holder(2**53 + 1), key, "newer")
    with pytest.raises(FenceRejected):
        await guard.set(Holder(2**53), key, "older")
    await guard.set(Holder(2**63 - 1), key, "last")
    assert server.get(key) == b"last"


async def test_wrong_types_are_reported_without_writing(
    guard: Any, server: redis.Redis, key: str
) -> None:
    server.rpush(f"{key}:fence", "someone else's list")
    with pytest.raises(WrongKeyType) as wrong:
        await guard.set(Holder(1), key, 1)
    assert (wrong.value.key, wrong.value.found) == (f"{key}:fence", "list")
    assert server.get(key) is None

    counter = f"{key}:counter"
    server.hset(counter, "a", 1)
    with pytest.raises(WrongKeyType) as wrong:
        await guard.incrby(Holder(1), counter, 1)
    assert (wrong.value.found, wrong.value.expected) == ("hash", "string")
    assert server.exists(f"{counter}:fence") == 0

    for found, put in (("list", server.rpush), ("hash", server.hset)):
        other = f"{key}:{found}"
        put(other, *(("field", "kept") if found == "hash" else ("kept",)))
        with pytest.raises(WrongKeyType) as wrong:
            await guard.set(Holder(1), other, "overwritten?")
        assert (wrong.value.found, wrong.value.expected) == (found, "string")
        assert server.type(other) == found.encode()
        assert server.exists(f"{other}:fence") == 0


async def test_incrby_on_a_string_that_is_no_integer_is_a_wrong_type(
    guard: Any, server: redis.Redis, key: str
) -> None:
    server.set(key, "not a number")
    with pytest.raises(WrongKeyType) as wrong:
        await guard.incrby(Holder(1), key, 1)
    assert wrong.value.found == "string that is not an integer"
    assert "lock name" not in str(wrong.value)
    assert server.get(key) == b"not a number"
    assert server.exists(f"{key}:fence") == 0


async def test_incrby_past_64_bits_is_refused_and_writes_nothing(
    guard: Any, server: redis.Redis, key: str
) -> None:
    server.set(key, 2**63 - 1)
    with pytest.raises(InvalidArgument, match="64 bits"):
        await guard.incrby(Holder(1), key, 1)
    assert server.get(key) == str(2**63 - 1).encode()
    assert server.exists(f"{key}:fence") == 0


async def test_incrby_returns_the_exact_value_past_2_to_the_53(
    guard: Any, server: redis.Redis, key: str
) -> None:
    """fencing.md: ``incrby`` "returns the new value"; a Lua number rounds one past 2^53."""
    server.set(key, 2**60)
    assert await guard.incrby(Holder(1), key, 1) == 2**60 + 1
    assert await guard.incrby(Holder(1), key, -(2**61)) == 2**60 + 1 - 2**61
    assert server.get(key) == str(2**60 + 1 - 2**61).encode()
    server.set(key, 0)
    assert await guard.incrby(Holder(1), key, -(2**63)) == -(2**63)  # the lowest 64-bit int


@pytest.mark.parametrize(
    ("holder", "call"),
    [
        (Holder(-1), ("set", 1)),
        (Holder(2**63), ("set", 1)),
        (Holder(True), ("set", 1)),  # type: ignore[arg-type]
        (Holder(1, ""), ("set", 1)),
        (Holder(1), ("set", 1, 0)),
        (Holder(1), ("set", 1, 2**63)),
        (Holder(1), ("hset", {})),
        (Holder(1), ("incrby", 1.5)),
        (Holder(1), ("incrby", 2**63)),
        (Holder(1), ("incrby", -(2**63) - 1)),
        (Holder(1), ("set", None)),
        (Holder(1), ("set", True)),
        (Holder(1), ("hset", {"field": None})),
        (None, ("set", 1)),
        ("a lease?", ("claim",)),
    ],
)
async def test_bad_input_is_refused_before_any_io(
    guard: Any, server: redis.Redis, key: str, holder: Holder, call: tuple[Any, ...]
) -> None:
    method, *args = call
    with pytest.raises(InvalidArgument):
        await getattr(guard, method)(holder, key, *args)
    assert server.exists(key, f"{key}:fence") == 0


async def test_a_refusal_needs_no_lock_name_and_survives_a_corrupt_record(
    guard: Any, server: redis.Redis, key: str
) -> None:
    """A holder with only ``fence`` and ``token`` (what fencing.md asks for) is refused as
    any other; a record another program spoilt is ``WrongKeyType``, not a ``ValueError``."""

    @dataclass(frozen=True)
    class Bare:
        fence: int
        token: str

    await guard.set(Bare(5, "owner-a"), key, 1)
    with pytest.raises(FenceRejected) as refused:
        await guard.set(Bare(4, "owner-b"), key, 2)
    assert refused.value.lock is None
    for spoilt, fence in [("abc", 6), ("zz", 100), ("1e3", 5000), ("", 5), ("007", 8)]:
        server.hset(f"{key}:fence", "fence", spoilt)
        with pytest.raises(WrongKeyType):
            await guard.set(Bare(fence, "owner-a"), key, 3)
        assert server.get(key) == b"1"
        assert server.hget(f"{key}:fence", "fence") == spoilt.encode()


async def test_empty_key_is_refused(guard: Any) -> None:
    with pytest.raises(InvalidArgument):
        await guard.set(Holder(1), "", 1)


async def test_script_flushed_from_the_server_is_loaded_again(
    guard: Any, server: redis.Redis, key: str
) -> None:
    await guard.set(Holder(1), key, 1)
    server.script_flush()
    await guard.set(Holder(2), key, 2)
    assert server.get(key) == b"2"


@pytest.mark.cluster
def test_cluster_key_needs_a_hash_tag(redlease_cluster: Any) -> None:
    client = redis.RedisCluster.from_url(redlease_cluster.url)
    try:
        guard = RedisGuard(client)
        tag = uuid.uuid4().hex
        guard.set(Holder(1), f"stock:{{{tag}}}", 5)
        with pytest.raises(FenceRejected):
            guard.set(Holder(0), f"stock:{{{tag}}}", 6)
        assert client.get(f"stock:{{{tag}}}") == b"5"

        untagged = next(
            f"stock-{tag}-{index}"
            for index in range(100)
            if client.keyslot(f"stock-{tag}-{index}")
            != client.keyslot(f"stock-{tag}-{index}:fence")
        )
        with pytest.raises(InvalidArgument, match="hash tag"):
            guard.set(Holder(1), untagged, 5)
        assert client.exists(untagged) == 0
        client.delete(f"stock:{{{tag}}}", f"stock:{{{tag}}}:fence")
    finally:
        client.close()


# The flash sale, with two real clients and a lease that really expires ----------------

LEASE_TTL = 0.3  # seconds, not renewed: the paused buyer's lease runs out


def test_paused_buyer_is_fenced_off_in_redis(redlease_url: str, prefix: str) -> None:
    stock_key, sold_key = f"shop:{{{prefix}}}:stock", f"shop:{{{prefix}}}:sold"
    with (
        redlease.Locks(redlease_url, prefix=prefix) as alice_client,
        redlease.Locks(redlease_url, prefix=prefix) as bob_client,
        redis.Redis.from_url(redlease_url) as shop,
    ):
        shop.set(stock_key, 1)  # the last item
        guard = RedisGuard(shop)

        def buy(lease: redlease.Lease) -> None:
            stock = int(shop.get(stock_key) or 0)
            if stock > 0:
                guard.set(lease, stock_key, stock - 1)
                shop.incr(sold_key)

        alice_lock = alice_client.lock("flash-sale:stock", ttl=LEASE_TTL)
        bob_lock = bob_client.lock("flash-sale:stock", ttl=LEASE_TTL)
        with pytest.raises(FenceRejected) as refused, alice_lock as alice:
            seen = int(shop.get(stock_key) or 0)
            started = time.monotonic()
            # Alice pauses (GC, SIGSTOP) past her TTL; Bob's wait ends when her lease does.
            with bob_lock as bob:
                assert time.monotonic() - started >= LEASE_TTL / 2
                assert bob.fence > alice.fence
                buy(bob)
            # Alice wakes up, unaware, and writes the stock she read before her pause.
            guard.set(alice, stock_key, seen - 1)
            shop.incr(sold_key)

        assert (refused.value.token, refused.value.newest) == (alice.fence, bob.fence)
        assert int(shop.get(sold_key) or 0) == 1
        assert int(shop.get(stock_key) or 0) == 0
        shop.delete(stock_key, sold_key, f"{stock_key}:fence")


async def test_paused_buyer_is_fenced_off_with_asyncio(
    redlease_url: str, prefix: str, redlease_async_redis: redis.asyncio.Redis
) -> None:
    shop = redlease_async_redis
    stock_key = f"shop:{{{prefix}}}:stock"
    await shop.set(stock_key, 1)
    guard = AsyncRedisGuard(shop)
    alice_client = redlease.AsyncLocks(redlease_url, prefix=prefix)
    bob_client = redlease.AsyncLocks(redlease_url, prefix=prefix)
    try:
        alice_lock = alice_client.lock("flash-sale:stock", ttl=LEASE_TTL)
        bob_lock = bob_client.lock("flash-sale:stock", ttl=LEASE_TTL)
        with pytest.raises(FenceRejected):
            async with alice_lock as alice:
                seen = int(await shop.get(stock_key) or 0)
                async with bob_lock as bob:  # waits until Alice's lease has expired
                    await guard.set(bob, stock_key, int(await shop.get(stock_key) or 0) - 1)
                await guard.set(alice, stock_key, seen - 1)
        assert int(await shop.get(stock_key) or 0) == 0
        assert alice.lost or alice.fence < bob.fence
    finally:
        await shop.delete(stock_key, f"{stock_key}:fence")
        await alice_client.aclose()
        await bob_client.aclose()


# SQL ---------------------------------------------------------------------------------


@dataclass
class Database:
    """One real database: how to connect, and its column types for the fence columns."""

    kind: str
    connect: Callable[[], Any]
    owner_type: str

    def create(self, table: str, rows: dict[int, int]) -> None:
        with closing(self.connect()) as connection:
            cursor = connection.cursor()
            cursor.execute(
                f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, stock INTEGER NOT NULL, "
                "fence BIGINT NOT NULL DEFAULT 0, "
                f"fence_owner {self.owner_type} NOT NULL DEFAULT '')"
            )
            for row_id, stock in rows.items():
                cursor.execute(f"INSERT INTO {table} (id, stock) VALUES ({row_id}, {stock})")
            connection.commit()

    def drop(self, table: str) -> None:
        with closing(self.connect()) as connection:
            connection.cursor().execute(f"DROP TABLE IF EXISTS {table}")
            connection.commit()

    def row(self, table: str, row_id: int = 1) -> tuple[int, int, str]:
        with closing(self.connect()) as connection:
            cursor = connection.cursor()
            cursor.execute(f"SELECT stock, fence, fence_owner FROM {table} WHERE id = {row_id}")
            stock, fence, owner = cursor.fetchone()
            connection.rollback()
        return int(stock), int(fence), owner.decode() if isinstance(owner, bytes) else owner


def sqlite_database(tmp_path: Path) -> Database:
    path = tmp_path / "shop.sqlite3"
    return Database("sqlite", lambda: sqlite3.connect(path, timeout=5), "TEXT")


def postgres_database() -> Database:
    psycopg = pytest.importorskip("psycopg", reason="install psycopg[binary] for PostgreSQL")
    errors = []
    for user in ("postgres", "root"):
        dsn = f"host=127.0.0.1 port=5432 dbname=test user={user} connect_timeout=3"
        try:
            psycopg.connect(dsn).close()
        except psycopg.OperationalError as error:
            errors.append(f"{user}: {error}".strip())
            continue
        return Database("postgres", lambda dsn=dsn: psycopg.connect(dsn), "TEXT")
    pytest.skip(f"PostgreSQL on 127.0.0.1:5432 (database test) does not answer: {errors}")


def mariadb_database() -> Database:
    pymysql = pytest.importorskip("pymysql", reason="install PyMySQL for MariaDB/MySQL")

    def connect() -> Any:
        return pymysql.connect(
            host="127.0.0.1", port=3306, user="root", password="", database="test",
            connect_timeout=3,
        )  # fmt: skip

    try:
        connect().close()
    except pymysql.MySQLError as error:
        pytest.skip(f"MariaDB on 127.0.0.1:3306 (database test) does not answer: {error}")
    # VARBINARY: owner tokens compare byte for byte, not by a case-insensitive collation.
    return Database("mariadb", connect, "VARBINARY(512)")


@pytest.fixture(params=["sqlite", "postgres", "mariadb"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        return sqlite_database(tmp_path)
    if request.param == "postgres":
        return postgres_database()
    return mariadb_database()


@pytest.fixture
def table(database: Database) -> Iterator[str]:
    """A table of its own (two items in stock on row 1), dropped after the test."""
    name = f"stock_{uuid.uuid4().hex[:12]}"
    database.create(name, {1: 2})
    try:
        yield name
    finally:
        database.drop(name)


def update(
    database: Database, table: str, holder: Holder, stock: int, guard: SqlGuard | None = None
) -> None:
    """One fenced update in a transaction of its own: committed if accepted."""
    with closing(database.connect()) as connection:
        try:
            (guard or SqlGuard(table)).update(connection, holder, 1, {"stock": stock})
        except BaseException:
            connection.rollback()
            raise
        connection.commit()


def test_sql_newer_token_is_accepted(database: Database, table: str) -> None:
    update(database, table, Holder(1, "a"), 1)
    update(database, table, Holder(2, "b"), 0)
    assert database.row(table) == (0, 2, "b")


def test_sql_older_token_is_refused_and_changes_nothing(database: Database, table: str) -> None:
    update(database, table, Holder(5, "new"), 1)

    with pytest.raises(FenceRejected) as refused:
        update(database, table, Holder(4, "old"), 0)

    assert (refused.value.token, refused.value.newest) == (4, 5)
    assert table in refused.value.resource
    assert database.row(table) == (1, 5, "new")


def test_sql_holder_may_write_twice_even_the_same_values(database: Database, table: str) -> None:
    """MySQL counts changed rows: an identical second write changes none, and is accepted."""
    update(database, table, Holder(7, "a"), 1)
    update(database, table, Holder(7, "a"), 1)
    update(database, table, Holder(7, "a"), 0)
    assert database.row(table) == (0, 7, "a")


def test_sql_equal_token_from_another_owner_is_refused(database: Database, table: str) -> None:
    update(database, table, Holder(7, "before-failover"), 1)
    with pytest.raises(FenceRejected) as refused:
        update(database, table, Holder(7, "after-failover"), 0)
    assert refused.value.reused
    assert database.row(table) == (1, 7, "before-failover")


class DictRowsCursor:
    """A cursor of another module than the driver's (as a pool's or a wrapper's is) that
    returns rows as dicts (as psycopg's ``dict_row`` or PyMySQL's ``DictCursor`` do)."""

    def __init__(self, cursor: Any, connection: Any = None) -> None:
        self._cursor = cursor
        if connection is not None:
            self.connection = connection  # DB-API's optional extension: names the driver

    def execute(self, statement: str, parameters: Any = ()) -> Any:
        return self._cursor.execute(statement, parameters)

    @property
    def rowcount(self) -> int:
        return int(self._cursor.rowcount)

    def fetchone(self) -> dict[str, Any] | None:
        row = self._cursor.fetchone()
        if row is None:
            return None
        return {column[0]: value for column, value in zip(self._cursor.description, row)}


def update_through_a_wrapper(database: Database, table: str, holder: Holder, stock: int) -> None:
    style = "qmark" if database.kind == "sqlite" else "pyformat"
    with closing(database.connect()) as connection:
        try:
            cursor = DictRowsCursor(connection.cursor(), connection)
            SqlGuard(table, paramstyle=style).update(cursor, holder, 1, {"stock": stock})
        except BaseException:
            connection.rollback()
            raise
        connection.commit()


def test_sql_rows_as_dicts_through_a_wrapped_cursor(database: Database, table: str) -> None:
    update_through_a_wrapper(database, table, Holder(7, "a"), 1)
    update_through_a_wrapper(database, table, Holder(7, "a"), 1)  # identical: still accepted
    with pytest.raises(FenceRejected) as older:
        update_through_a_wrapper(database, table, Holder(6, "b"), 0)
    assert (older.value.token, older.value.newest, older.value.reused) == (6, 7, False)
    with pytest.raises(FenceRejected) as reused:
        update_through_a_wrapper(database, table, Holder(7, "c"), 0)
    assert reused.value.reused
    assert database.row(table) == (1, 7, "a")


def test_sql_without_owner_column_accepts_an_equal_token(database: Database, table: str) -> None:
    guard = SqlGuard(table, owner_column=None)
    update(database, table, Holder(7, "a"), 1, guard)
    update(database, table, Holder(7, "b"), 0, guard)
    with pytest.raises(FenceRejected):
        update(database, table, Holder(6, "c"), 5, guard)
    assert database.row(table)[:2] == (0, 7)


def test_sql_claim_with_no_values(database: Database, table: str) -> None:
    """An update of no columns only records the token: older holders are shut out."""
    with closing(database.connect()) as connection:
        SqlGuard(table).update(connection, Holder(6, "bob"), 1, {})
        connection.commit()
    with pytest.raises(FenceRejected):
        update(database, table, Holder(5, "alice"), 0)
    assert database.row(table) == (2, 6, "bob")


def test_sql_missing_row(database: Database, table: str) -> None:
    with closing(database.connect()) as connection, pytest.raises(RowNotFound, match="insert"):
        SqlGuard(table).update(connection, Holder(1), 404, {"stock": 1})


def test_sql_update_stays_in_the_callers_transaction(database: Database, table: str) -> None:
    with closing(database.connect()) as connection:
        cursor = connection.cursor()
        SqlGuard(table).update(cursor, Holder(3), 1, {"stock": 0})
        connection.rollback()
    assert database.row(table) == (2, 0, "")


@pytest.mark.parametrize("through", ["the driver's cursor", "a wrapper hiding the driver"])
def test_sql_refusal_sees_past_a_stale_snapshot(
    database: Database, table: str, through: str
) -> None:
    """A transaction that began before the newer holder's commit must still be refused.

    In MariaDB's REPEATABLE READ a plain SELECT would show the transaction's old snapshot,
    where the row still holds this holder's own earlier write: that is no acceptance, also
    when a wrapper hides which driver it is (then no locking read tells the newest token).
    """
    if database.kind == "sqlite":
        pytest.skip("SQLite lets no other connection commit during a write transaction")
    update(database, table, Holder(7, "alice"), 1)
    with closing(database.connect()) as alice:
        cursor = alice.cursor()
        cursor.execute(f"SELECT stock FROM {table} WHERE id = 1")
        assert cursor.fetchone()[0] == 1
        update(database, table, Holder(8, "bob"), 0)  # Bob commits meanwhile
        wrapped = through != "the driver's cursor"
        guard = SqlGuard(table, paramstyle="pyformat") if wrapped else SqlGuard(table)
        with pytest.raises(FenceRejected) as refused:
            guard.update(
                DictRowsCursor(cursor) if wrapped else cursor, Holder(7, "alice"), 1, {"stock": 1}
            )
        alice.rollback()
    assert refused.value.newest == (None if wrapped and database.kind == "mariadb" else 8)
    assert database.row(table) == (0, 8, "bob")


def test_sql_paramstyles() -> None:
    connection = sqlite3.connect(":memory:")
    assert paramstyle_of(connection) == "qmark"
    assert paramstyle_of(connection.cursor()) == "qmark"
    connection.execute(
        "CREATE TABLE s (id INTEGER PRIMARY KEY, n INTEGER, fence INTEGER NOT NULL DEFAULT 0, "
        "fence_owner TEXT NOT NULL DEFAULT '')"
    )
    connection.execute("INSERT INTO s (id, n) VALUES (1, 0)")
    for fence, style in enumerate(["qmark", "named", "numeric"], 1):
        SqlGuard("s", paramstyle=style).update(connection, Holder(fence), 1, {"n": fence})
    assert connection.execute("SELECT n, fence FROM s").fetchone() == (3, 3)
    connection.close()
    psycopg = pytest.importorskip("psycopg")
    pymysql = pytest.importorskip("pymysql")
    assert psycopg.paramstyle == "pyformat"
    assert pymysql.paramstyle == "pyformat"


@pytest.mark.parametrize(
    "make",
    [
        lambda: SqlGuard("stock; DROP TABLE users"),
        lambda: SqlGuard("stock", fence_column="fence--"),
        lambda: SqlGuard("stock", owner_column="owner = owner OR 1=1"),
        lambda: SqlGuard("stock", paramstyle="dollar"),
        lambda: SqlGuard("stock").update(
            sqlite3.connect(":memory:"), Holder(1), 1, {"n = 0 --": 1}
        ),
        lambda: SqlGuard("stock").update(sqlite3.connect(":memory:"), Holder(1), 1, {"fence": 9}),
        lambda: SqlGuard("stock").update(sqlite3.connect(":memory:"), Holder(1), 1, {"ID": 9}),
        lambda: SqlGuard("stock").update(sqlite3.connect(":memory:"), Holder(1), 1, {"Fence": 9}),
        lambda: SqlGuard("stock", owner_column="Owner").update(
            sqlite3.connect(":memory:"), Holder(1), 1, {"owner": "x"}
        ),
    ],
)
def test_sql_identifiers_are_validated(make: Callable[[], object]) -> None:
    with pytest.raises(InvalidArgument):
        make()


def test_paused_buyer_is_fenced_off_in_sql(
    database: Database, table: str, redlease_url: str, prefix: str
) -> None:
    """The flash sale on a SQL stock: one item left, two buyers, one of them paused."""
    database.drop(table)
    database.create(table, {1: 1})
    guard = SqlGuard(table)
    select = f"SELECT stock FROM {table} WHERE id = 1"
    with (
        redlease.Locks(redlease_url, prefix=prefix) as alice_client,
        redlease.Locks(redlease_url, prefix=prefix) as bob_client,
        closing(database.connect()) as alice_db,
        closing(database.connect()) as bob_db,
    ):
        alice_lock = alice_client.lock("flash-sale:stock", ttl=LEASE_TTL)
        bob_lock = bob_client.lock("flash-sale:stock", ttl=LEASE_TTL)
        with pytest.raises(FenceRejected) as refused, alice_lock as alice:
            started = time.monotonic()  # her lease runs from here, not from her slow SELECT
            alice_cursor = alice_db.cursor()
            alice_cursor.execute(select)
            (seen,) = alice_cursor.fetchone()
            with bob_lock as bob:  # Alice is paused; Bob gets the lock when her lease ends
                assert time.monotonic() - started >= LEASE_TTL / 2
                bob_cursor = bob_db.cursor()
                bob_cursor.execute(select)
                (stock,) = bob_cursor.fetchone()
                guard.update(bob_cursor, bob, 1, {"stock": stock - 1})
                bob_db.commit()
            try:
                guard.update(alice_cursor, alice, 1, {"stock": seen - 1})
            finally:
                alice_db.rollback()

    assert (refused.value.token, refused.value.newest) == (alice.fence, bob.fence)
    assert database.row(table)[:2] == (0, bob.fence)


def test_the_documented_counter_reseed_raises_it_exactly_and_never_lowers_it(
    server: redis.Redis, key: str
) -> None:
    """fencing.md's re-seed ``EVAL``, as written there, compares past 2^53."""
    text = " ".join((Path(__file__).parents[1] / "docs" / "fencing.md").read_text().split())
    script = text.split('`EVAL "', 1)[1].split('" 1 <that key>', 1)[0]
    counter = f"{key}:fence"
    server.set(counter, 2**60)
    server.eval(script, 1, counter, 2**60 + 1)
    assert server.get(counter) == str(2**60 + 1).encode()
    server.eval(script, 1, counter, 7)
    assert server.get(counter) == str(2**60 + 1).encode()
    server.delete(counter)
    server.eval(script, 1, counter, 12)
    assert server.get(counter) == b"12"
