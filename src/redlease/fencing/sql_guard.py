"""The SQL guard: one ``UPDATE ... WHERE`` whose condition is the fence check, run in the
caller's transaction through any DB-API 2 driver."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from redlease.errors import FenceRejected, InvalidArgument, RowNotFound
from redlease.fencing.holder import Fenced, as_text, holder_tokens

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


def _counts_changed_rows(cursor: object) -> bool:
    """Whether the driver reports changed rather than matched rows (MySQL's family), told by
    the module of the cursor's type or, for a wrapper's cursor, of its DB-API ``connection``."""
    return any(
        _driver(db) in CHANGED_ROWS_DRIVERS
        for db in (cursor, getattr(cursor, "connection", None))
        if db is not None
    )


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
        self._reserved = {
            column.lower()
            for column in (self.id_column, self.fence_column, self.owner_column)
            if column
        }

    def update(self, db: Any, holder: Fenced, row_id: object, values: Mapping[str, object]) -> None:
        """Set ``values`` on the row ``row_id`` if ``holder`` is the newest writer.

        ``db`` is a DB-API connection or cursor. Raises :class:`FenceRejected` (nothing
        changed) or :class:`RowNotFound`.
        """
        fence, owner = holder_tokens(holder)
        columns = [_identifier(column, "column") for column in values]
        if self._reserved & {column.lower() for column in columns}:  # SQL folds unquoted case
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
        which counts changed rather than matched rows) it was accepted but changed nothing:
        the row, read with a locking read, holds this holder's fence and owner. Elsewhere a
        row showing them is an older snapshot of the transaction, never an acceptance.

        MySQL's row is read with a locking read: a plain one would see the transaction's
        snapshot, which can predate the newer holder's write that refused this one.
        """
        fence, owner = holder.fence, holder.token
        counts_changed_rows = _counts_changed_rows(cursor)
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
        if isinstance(row, Mapping):  # psycopg's dict_row, PyMySQL's DictCursor
            row = tuple(row.values())
        resource = f"{self.table} row {self.id_column}={row_id!r}"
        newest = None if row[0] is None else int(row[0])
        same_owner = self.owner_column is None or as_text(row[1]) == owner
        if counts_changed_rows and newest == fence and same_owner:
            return  # the row already holds exactly this write: accepted, nothing to change
        if newest is None or newest < fence or (newest == fence and same_owner):
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
