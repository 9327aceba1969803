"""Fenced writes: the resource refuses a holder whose lease has ended.

A lease can end while its holder still works (a pause, a slow network, a failover), and no
check made *before* a write can rule that out. The fix is at the resource: each write
carries the lease's fencing token (``lease.fence``) and owner token (``lease.token``); the
resource remembers the newest pair it accepted and refuses

* a token older than the newest one: a newer holder has written since, and
* an equal token from another owner: a failover can lose the counter's last increment and
  hand the same token out twice.

Two guards apply that rule: :class:`RedisGuard` / :class:`AsyncRedisGuard` for keys in
Redis (one Lua script checks, writes and records), and :class:`SqlGuard` for a row of a SQL
table reached through any DB-API driver (one ``UPDATE ... WHERE`` inside the caller's
transaction). A refused write raises :class:`FenceRejected` and changes nothing.

Tokens count per lock name on one server: guard a resource always with the same lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Protocol

import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot

from redlease.compat import (
    AsyncClusterClients,
    ClusterClients,
    ClusterErrors,
    NoScriptErrors,
    ResponseErrors,
    check_client,
)
from redlease.errors import (
    FenceRejected,
    InvalidArgument,
    RowNotFound,
    WrongKeyType,
)

__all__ = [
    "AsyncRedisGuard",
    "FenceRejected",
    "Fenced",
    "RedisGuard",
    "RowNotFound",
    "SqlGuard",
    "paramstyle_of",
]

FENCED_WRITE = files("redlease.scripts").joinpath("fenced_write.lua").read_text(encoding="utf-8")
FENCED_WRITE_SHA = hashlib.sha1(FENCED_WRITE.encode(), usedforsecurity=False).hexdigest()

MAX_FENCE = 2**63 - 1
DEFAULT_RECORD_SUFFIX = ":fence"


class Fenced(Protocol):
    """What a guard needs from a holder: a :class:`~redlease.Lease` has it."""

    @property
    def name(self) -> str: ...

    @property
    def fence(self) -> int: ...

    @property
    def token(self) -> str: ...


def _holder_tokens(holder: Fenced) -> tuple[int, str]:
    fence, owner = holder.fence, holder.token
    if isinstance(fence, bool) or not isinstance(fence, int) or not 0 <= fence <= MAX_FENCE:
        raise InvalidArgument(f"fencing token must be an int in [0, 2**63 - 1], not {fence!r}")
    if not isinstance(owner, str) or not owner:
        raise InvalidArgument(f"owner token must be a non-empty str, not {owner!r}")
    return fence, owner


def _text(value: object) -> str:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)


# Redis: what to send, and what a reply means. The guards below only move the bytes.

RedisKey = str | bytes
RedisValue = str | bytes | int | float


@dataclass(frozen=True)
class FencedWrite:
    """One call of ``fenced_write.lua``: its keys and arguments, and how to read its reply."""

    keys: tuple[RedisKey, RedisKey]
    args: tuple[RedisValue, ...]
    holder: Fenced
    expected_type: str

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Turn a cross-slot refusal (from the server or a cluster client) into advice."""
        try:
            yield
        except (*ResponseErrors, *ClusterErrors) as error:
            message = str(error)
            if "CROSSSLOT" in message or "same key slot" in message:
                raise _cross_slot(self.keys) from error
            raise

    def outcome(self, reply: Any) -> int:
        """The operation's result if the write was accepted; raise if it was refused."""
        status = int(reply[0])
        if status == 1:
            return int(reply[1])
        if status == 0:
            raise FenceRejected(
                _text(self.keys[0]),
                int(self.args[0]),
                int(reply[1]),
                lock=self.holder.name,
                reused=_text(reply[2]) == "owner",
            )
        which = int(reply[1])
        expected = "hash" if which == 2 else self.expected_type
        raise WrongKeyType(_text(self.keys[which - 1]), _text(reply[2]), expected)


def _slot(key: RedisKey) -> int:
    return key_slot(key.encode() if isinstance(key, str) else key)


def _cross_slot(keys: tuple[RedisKey, RedisKey]) -> InvalidArgument:
    return InvalidArgument(
        f"{_text(keys[0])!r} and its fence record {_text(keys[1])!r} fall in different "
        "cluster slots: put a hash tag in the key (for example 'stock:{sale-42}') so both "
        "live in one slot"
    )


class _RedisGuardBase:
    """What both Redis guards share: the keys, the validation and the script's arguments."""

    def __init__(self, client: Any, cluster: bool, record_suffix: str) -> None:
        if not isinstance(record_suffix, str) or not record_suffix:
            raise InvalidArgument("record_suffix must be a non-empty str")
        self.client = client
        self.record_suffix = record_suffix
        self._cluster = cluster

    def record_key(self, key: RedisKey) -> RedisKey:
        """Where the newest (fence, owner) accepted for ``key`` is kept."""
        if isinstance(key, str) and key:
            return key + self.record_suffix
        if isinstance(key, bytes) and key:
            return key + self.record_suffix.encode()
        raise InvalidArgument(f"key must be a non-empty str or bytes, not {key!r}")

    def _write(
        self, holder: Fenced, key: RedisKey, expected_type: str, *operation: RedisValue
    ) -> FencedWrite:
        """Validate everything before any I/O; on a cluster both keys must share a slot."""
        fence, owner = _holder_tokens(holder)
        keys = (key, self.record_key(key))
        if self._cluster and _slot(keys[0]) != _slot(keys[1]):
            raise _cross_slot(keys)
        return FencedWrite(keys, (str(fence), owner, *operation), holder, expected_type)

    def _set(self, holder: Fenced, key: RedisKey, value: RedisValue, px: int | None) -> FencedWrite:
        if px is not None and (isinstance(px, bool) or not isinstance(px, int) or px <= 0):
            raise InvalidArgument(f"px must be a positive int of milliseconds or None, not {px!r}")
        return self._write(holder, key, "string", "set", value, "" if px is None else str(px))

    def _hset(
        self, holder: Fenced, key: RedisKey, mapping: Mapping[RedisKey, RedisValue]
    ) -> FencedWrite:
        if not isinstance(mapping, Mapping) or not mapping:
            raise InvalidArgument("mapping must be a mapping of at least one field")
        pairs = [part for field, value in mapping.items() for part in (field, value)]
        return self._write(holder, key, "hash", "hset", *pairs)

    def _claim(self, holder: Fenced, key: RedisKey) -> FencedWrite:
        return self._write(holder, key, "", "claim")

    def _incrby(self, holder: Fenced, key: RedisKey, amount: int) -> FencedWrite:
        if isinstance(amount, bool) or not isinstance(amount, int) or abs(amount) > MAX_FENCE:
            raise InvalidArgument(f"amount must be an int within 64 bits, not {amount!r}")
        return self._write(holder, key, "string", "incrby", amount)


class RedisGuard(_RedisGuardBase):
    """Fenced writes to Redis keys: accepted only from the newest holder of the lock.

    Next to each key ``k`` lives its fence record ``k:fence`` (a hash ``{fence, owner}``,
    without expiry, so an old token stays refused however long it arrives late). On a
    cluster the key needs a hash tag (``stock:{sale-42}``) so that both share a slot;
    otherwise every call raises :class:`~redlease.InvalidArgument` before any I/O.
    """

    def __init__(
        self, client: redis.Redis | RedisCluster, *, record_suffix: str = DEFAULT_RECORD_SUFFIX
    ) -> None:
        check_client(client, asyncio=False, user="RedisGuard")
        super().__init__(client, isinstance(client, ClusterClients), record_suffix)

    def set(self, holder: Fenced, key: RedisKey, value: RedisValue, px: int | None = None) -> None:
        """``SET key value [PX px]`` if ``holder`` is the newest writer, else raise."""
        self._run(self._set(holder, key, value, px))

    def hset(self, holder: Fenced, key: RedisKey, mapping: Mapping[RedisKey, RedisValue]) -> int:
        """``HSET key field value ...``; returns the number of fields added."""
        return self._run(self._hset(holder, key, mapping))

    def incrby(self, holder: Fenced, key: RedisKey, amount: int = 1) -> int:
        """``INCRBY key amount``; returns the new value."""
        return self._run(self._incrby(holder, key, amount))

    def claim(self, holder: Fenced, key: RedisKey) -> None:
        """Record ``holder``'s token without writing: older holders are refused from now on.

        Call it first in a read-modify-write, before the read, so that a paused older
        holder cannot slip a write in between this holder's read and its write.
        """
        self._run(self._claim(holder, key))

    def _run(self, write: FencedWrite) -> int:
        with write.errors():
            try:
                reply = self.client.evalsha(FENCED_WRITE_SHA, 2, *write.keys, *write.args)
            except NoScriptErrors:
                self.client.script_load(FENCED_WRITE)
                reply = self.client.evalsha(FENCED_WRITE_SHA, 2, *write.keys, *write.args)
        return write.outcome(reply)


class AsyncRedisGuard(_RedisGuardBase):
    """The asyncio twin of :class:`RedisGuard`: same keys, same rules, awaitable calls."""

    def __init__(
        self,
        client: redis.asyncio.Redis | AsyncRedisCluster,
        *,
        record_suffix: str = DEFAULT_RECORD_SUFFIX,
    ) -> None:
        check_client(client, asyncio=True, user="AsyncRedisGuard")
        super().__init__(client, isinstance(client, AsyncClusterClients), record_suffix)

    async def set(
        self, holder: Fenced, key: RedisKey, value: RedisValue, px: int | None = None
    ) -> None:
        """``SET key value [PX px]`` if ``holder`` is the newest writer, else raise."""
        await self._run(self._set(holder, key, value, px))

    async def hset(
        self, holder: Fenced, key: RedisKey, mapping: Mapping[RedisKey, RedisValue]
    ) -> int:
        """``HSET key field value ...``; returns the number of fields added."""
        return await self._run(self._hset(holder, key, mapping))

    async def incrby(self, holder: Fenced, key: RedisKey, amount: int = 1) -> int:
        """``INCRBY key amount``; returns the new value."""
        return await self._run(self._incrby(holder, key, amount))

    async def claim(self, holder: Fenced, key: RedisKey) -> None:
        """Record ``holder``'s token without writing; see :meth:`RedisGuard.claim`."""
        await self._run(self._claim(holder, key))

    async def _run(self, write: FencedWrite) -> int:
        with write.errors():
            try:
                reply = await self.client.evalsha(FENCED_WRITE_SHA, 2, *write.keys, *write.args)
            except NoScriptErrors:
                await self.client.script_load(FENCED_WRITE)
                reply = await self.client.evalsha(FENCED_WRITE_SHA, 2, *write.keys, *write.args)
        return write.outcome(reply)


# SQL: one UPDATE whose WHERE clause is the fence check, in the caller's transaction.

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
PARAMSTYLES = ("qmark", "numeric", "named", "format", "pyformat")
# Drivers of MySQL and MariaDB: their rowcount counts changed rows, not matched ones.
CHANGED_ROWS_DRIVERS = frozenset({"pymysql", "MySQLdb", "mysql", "mariadb", "aiomysql", "asyncmy"})


def _identifier(name: object, what: str, dotted: bool = False) -> str:
    parts = name.split(".") if isinstance(name, str) and dotted else [name]
    if not all(isinstance(part, str) and IDENTIFIER.fullmatch(part) for part in parts):
        raise InvalidArgument(
            f"{what} {name!r} is not a plain SQL identifier (letters, digits, '_')"
        )
    return str(name)


def _driver(db: object) -> str:
    return type(db).__module__.split(".")[0]


def paramstyle_of(db: object) -> str:
    """The DB-API paramstyle of the driver that made ``db`` (a connection or a cursor)."""
    module = sys.modules.get(_driver(db))
    style = getattr(module, "paramstyle", None)
    if style not in PARAMSTYLES:
        raise InvalidArgument(
            f"cannot tell the paramstyle of {type(db).__module__}.{type(db).__qualname__}: "
            "pass SqlGuard(paramstyle=...)"
        )
    return str(style)


class _Parameters:
    """Placeholders in the driver's style, and the values to bind to them."""

    def __init__(self, style: str) -> None:
        self.style = style
        self.values: list[object] = []

    def add(self, value: object) -> str:
        self.values.append(value)
        index = len(self.values)
        return {
            "qmark": "?",
            "numeric": f":{index}",
            "named": f":p{index}",
            "format": "%s",
            "pyformat": f"%(p{index})s",
        }[self.style]

    def bound(self) -> Sequence[object] | dict[str, object]:
        if self.style in ("named", "pyformat"):
            return {f"p{index}": value for index, value in enumerate(self.values, 1)}
        return tuple(self.values)


class SqlGuard:
    """Fenced updates of one row of ``table``, through any DB-API 2 driver.

    The row needs a fence column (``BIGINT NOT NULL DEFAULT 0``) and, to refuse a token
    repeated by a failover, an owner column; see ``docs/fencing.md`` for the DDL. Without an
    owner column (``owner_column=None``) an equal token is accepted from anyone.

    The guard never commits: it runs in the transaction of the connection or cursor it is
    given, so the fenced update and the caller's other writes commit (or roll back)
    together. On a refusal nothing was changed; roll back what the transaction did before.
    """

    def __init__(
        self,
        table: str,
        *,
        id_column: str = "id",
        fence_column: str = "fence",
        owner_column: str | None = "fence_owner",
        paramstyle: str | None = None,
    ) -> None:
        self.table = _identifier(table, "table", dotted=True)
        self.id_column = _identifier(id_column, "id_column")
        self.fence_column = _identifier(fence_column, "fence_column")
        self.owner_column = (
            None if owner_column is None else _identifier(owner_column, "owner_column")
        )
        if paramstyle is not None and paramstyle not in PARAMSTYLES:
            raise InvalidArgument(f"paramstyle must be one of {PARAMSTYLES}, not {paramstyle!r}")
        self.paramstyle = paramstyle
        self._reserved = {self.id_column, self.fence_column, self.owner_column}

    def update(self, db: Any, holder: Fenced, row_id: object, values: Mapping[str, object]) -> None:
        """Set ``values`` on the row ``row_id`` if ``holder`` is the newest writer.

        ``db`` is a DB-API connection or cursor. Raises :class:`FenceRejected` (nothing
        changed) or :class:`RowNotFound`.
        """
        fence, owner = _holder_tokens(holder)
        columns = [_identifier(column, "column") for column in values]
        if self._reserved & set(columns):
            raise InvalidArgument("values may not set the id, fence or owner column")
        style = self.paramstyle or paramstyle_of(db)
        update = _Parameters(style)
        assignments = [f"{column} = {update.add(values[column])}" for column in columns]
        assignments.append(f"{self.fence_column} = {update.add(fence)}")
        if self.owner_column is not None:
            assignments.append(f"{self.owner_column} = {update.add(owner)}")
        # Placeholders are added in the order they appear in the text (positional styles).
        where = f"{self.id_column} = {update.add(row_id)} AND "
        if self.owner_column is None:
            where += f"{self.fence_column} <= {update.add(fence)}"
        else:
            where += (
                f"({self.fence_column} < {update.add(fence)} OR ({self.fence_column} = "
                f"{update.add(fence)} AND {self.owner_column} = {update.add(owner)}))"
            )
        statement = f"UPDATE {self.table} SET {', '.join(assignments)} WHERE {where}"  # noqa: S608 - identifiers validated
        with _cursor(db) as cursor:
            cursor.execute(statement, update.bound())
            if cursor.rowcount == 1:
                return
            if cursor.rowcount > 1:
                raise InvalidArgument(
                    f"{cursor.rowcount} rows of {self.table} have {self.id_column} = "
                    f"{row_id!r}: the id column must be unique; roll back this transaction"
                )
            if cursor.rowcount < 0:
                raise InvalidArgument(
                    f"{type(cursor).__module__} does not report affected rows (rowcount -1): "
                    "the guard cannot tell whether its update was accepted"
                )
            self._explain_no_change(cursor, style, holder, row_id)

    def _explain_no_change(self, cursor: Any, style: str, holder: Fenced, row_id: object) -> None:
        """No row changed: the row is missing, or the fence refused the write, or (MySQL,
        which counts changed rather than matched rows) it was accepted but changed nothing.

        MySQL's row is read with a locking read: a plain one would see the transaction's
        snapshot, which can predate the newer holder's write that refused this one.
        """
        fence, owner = holder.fence, holder.token
        counts_changed_rows = _driver(cursor) in CHANGED_ROWS_DRIVERS
        select = _Parameters(style)
        columns = self.fence_column + (f", {self.owner_column}" if self.owner_column else "")
        statement = (
            f"SELECT {columns} FROM {self.table} "  # noqa: S608 - identifiers validated
            f"WHERE {self.id_column} = {select.add(row_id)}"
            + (" FOR UPDATE" if counts_changed_rows else "")
        )
        cursor.execute(statement, select.bound())
        row = cursor.fetchone()
        if row is None:
            raise RowNotFound(
                f"no row of {self.table} has {self.id_column} = {row_id!r}: insert it "
                f"(with {self.fence_column} = 0) before fenced updates"
            )
        resource = f"{self.table} row {self.id_column}={row_id!r}"
        newest = None if row[0] is None else int(row[0])
        same_owner = self.owner_column is None or _text(row[1]) == owner
        if counts_changed_rows and newest == fence and same_owner:
            return  # the row already holds exactly this write: accepted, nothing to change
        if newest is None or newest < fence:
            newest = None  # an older snapshot, or a NULL fence (declare it NOT NULL DEFAULT 0)
        reused = newest == fence and not same_owner
        raise FenceRejected(resource, fence, newest, lock=holder.name, reused=reused)


@contextlib.contextmanager
def _cursor(db: Any) -> Iterator[Any]:
    """A cursor of ``db``: its own if ``db`` is a connection (closed after), else ``db``."""
    if not hasattr(db, "cursor"):
        yield db
        return
    cursor = db.cursor()
    try:
        yield cursor
    finally:
        cursor.close()
