"""What both topologies do to their nodes: one command each, and bounded waits."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlease.topology.errors import TopologyError

HOST = "127.0.0.1"
PROBE_TIMEOUT = 1.0
NODE_ATTEMPTS = 3
# Shared by both topologies: an empty data set syncs at once instead of after the
# default five-second wait for more replicas to join a diskless transfer.
DATA_ARGS = ("--repl-diskless-sync-delay", "0")


def wait_for(what: str, condition: Callable[[], bool], timeout: float) -> None:
    """Poll ``condition`` until it holds; Redis errors count as "not yet"."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    last_error: Exception | None = None
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, KeyError, ValueError, TypeError) as error:
            last_error = error
        if time.monotonic() >= deadline:
            detail = f"; last error: {last_error!r}" if last_error is not None else ""
            raise TopologyError(f"gave up waiting for {what} after {timeout:.1f} s{detail}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def command(port: int, *args: Any) -> Any:
    """One command on a fresh connection that gives up quickly; replies are decoded."""
    client: Any = redis.Redis(  # Any: redis-py leaves execute_command untyped
        host=HOST,
        port=port,
        decode_responses=True,
        socket_timeout=PROBE_TIMEOUT,
        socket_connect_timeout=PROBE_TIMEOUT,
        retry=Retry(NoBackoff(), 0),
    )
    with client:
        return client.execute_command(*args)


def role(port: int) -> list[Any]:
    """``ROLE``: ``["master", ...]``, or ``["slave", host, master_port, ...]``."""
    reply: list[Any] = command(port, "ROLE")
    return reply


def info(port: int, section: str) -> dict[str, Any]:
    reply: dict[str, Any] = command(port, "INFO", section)
    return reply


def link_is_up(port: int) -> bool:
    return info(port, "replication").get("master_link_status") == "up"
