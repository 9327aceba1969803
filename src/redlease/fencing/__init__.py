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

from redlease.errors import FenceRejected, RowNotFound
from redlease.fencing.holder import Fenced
from redlease.fencing.redis_guard import AsyncRedisGuard, RedisGuard
from redlease.fencing.sql_guard import SqlGuard, paramstyle_of

__all__ = [
    "AsyncRedisGuard",
    "FenceRejected",
    "Fenced",
    "RedisGuard",
    "RowNotFound",
    "SqlGuard",
    "paramstyle_of",
]
