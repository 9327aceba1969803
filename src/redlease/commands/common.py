"""What every subcommand shares: exit codes, reaching a server, option types.

Exit codes follow flock(1) and sysexits.h, so a script can tell "someone else holds the
lock" (1, or ``--conflict-exit-code``) from a usage mistake (64), a server that cannot be
reached (69) and a lease lost while the command ran (75).
"""

from __future__ import annotations

import argparse
import enum
import functools
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from redlease.errors import InvalidArgument, ServerUnavailable
from redlease.keys import DEFAULT_PREFIX, ttl_to_ms
from redlease.server import URL_ENV, resolve_url, server_url
from redlease.urls import from_url, redacted

__all__ = [
    "PROBE_TIMEOUT",
    "URL_ONLY_HINT",
    "ExitCode",
    "Reached",
    "UsageError",
    "add_connection_options",
    "connect",
    "exit_code",
    "lease_ttl",
    "non_negative_float",
    "port_number",
    "positive_float",
    "positive_int",
    "reach",
    "reachable_server",
    "required_url",
    "writable_directory",
]

PROBE_TIMEOUT = 2.0
PRIVATE_HINT = f"correct --url / {URL_ENV}, or unset both to run a private server"
SHARED_HINT = f"correct --url / {URL_ENV}"
URL_ONLY_HINT = "correct --url"
"""For the chaos tools, which read no ``REDIS_URL`` (a run must not land on a server by
accident)."""
T = TypeVar("T")


class ExitCode(enum.IntEnum):
    """The sysexits.h codes, so scripts can tell a usage mistake from a server that is down."""

    OK = 0
    CONFLICT = 1
    USAGE = 64
    UNAVAILABLE = 69
    SOFTWARE = 70
    TEMPFAIL = 75
    REFUSED = 77
    CANNOT_EXECUTE = 126
    NOT_FOUND = 127
    INTERRUPTED = 130


class UsageError(Exception):
    """A command line that names no server, or asks for something impossible (exit 64)."""


@dataclass(frozen=True)
class Reached:
    """A server that answered: its URL, and whether it is a node of a Redis Cluster."""

    url: str
    cluster: bool


@contextmanager
def reachable_server(url: str | None, *, hint: str = PRIVATE_HINT) -> Iterator[str]:
    """Yield the URL of a server that answered PING: ``url``, ``REDIS_URL`` or a private one.

    The probe makes one attempt with a short timeout, because redis-py's default retries
    would leave the user staring at a silent terminal for seconds before the error.
    ``hint`` ends the error message: what the user can do about an unreachable server.
    """
    with server_url(url) as resolved:
        _probe(resolved, hint)
        yield resolved


def reach(url: str, *, cluster: bool = False, hint: str = SHARED_HINT) -> Reached:
    """Probe ``url`` and tell whether it is a cluster node, so no one has to say ``--cluster``.

    A plain client pointed at one node of a cluster sees only that node's slots: a lock
    elsewhere answers MOVED, and a SCAN lists a third of the locks. ``cluster`` (the
    ``--cluster`` option) insists on cluster mode; on a server that says it is not a
    cluster, that is a usage mistake, said plainly rather than left to fail later.
    """
    detected = _probe(url, hint)
    if cluster and detected is False:
        raise UsageError(
            f"{redacted(url)} is not a cluster node (cluster_enabled:0); drop --cluster"
        )
    return Reached(url, cluster or bool(detected))


def _probe(url: str, hint: str) -> bool | None:
    """PING ``url`` once; whether it runs in cluster mode (None: it will not say)."""
    client = from_url(
        functools.partial(
            redis.Redis.from_url,
            socket_timeout=PROBE_TIMEOUT,
            socket_connect_timeout=PROBE_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
        ),
        url,
    )
    try:
        client.ping()
        try:
            info = client.info("cluster")
        except redis.ResponseError:  # INFO forbidden (ACL, a renamed command)
            return None
        return bool(int(info.get("cluster_enabled", 0)))
    except redis.AuthenticationError as error:
        raise ServerUnavailable(f"{redacted(url)} refused the credentials: {error}") from error
    except redis.RedisError as error:
        raise ServerUnavailable(
            f"cannot reach a Redis/Valkey server at {redacted(url)} ({error}); start it, or {hint}"
        ) from error
    finally:
        client.close()


def required_url(url: str | None) -> str:
    """``--url``, else ``REDIS_URL``; the lock tools never start a private server.

    A private server would hold no one else's locks, so running a command "under a lock"
    there would protect nothing; naming no server is a usage mistake.
    """
    resolved = resolve_url(url)
    if resolved is None:
        raise UsageError(
            f"no server given: pass --url redis://HOST:PORT/DB or set {URL_ENV} "
            "(every process sharing the lock must use the same server)"
        )
    return resolved


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``--url``, ``--prefix`` and ``--cluster``, the same for every lock tool."""
    parser.add_argument("--url", help=f"Redis/Valkey URL (default: ${URL_ENV}; one is required)")
    parser.add_argument(
        "--prefix",
        default=DEFAULT_PREFIX,
        help=f"key prefix the locks live under (default: {DEFAULT_PREFIX})",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the URL names a node of a Redis Cluster (detected without it, unless the "
        "server forbids INFO)",
    )


@contextmanager
def connect(args: argparse.Namespace, *, timeout: float | None = None) -> Iterator[Any]:
    """A client of the server named by ``args`` that answered PING, closed afterwards.

    On a cluster node it is a cluster client, so every command reaches the master that
    owns its keys, and :func:`~redlease.commands.state.names` scans every master.
    ``timeout`` bounds every reply (None: redis-py's default, no bound).
    """
    reached = reach(required_url(args.url), cluster=args.cluster)
    options: dict[str, Any] = {}
    if timeout is not None:
        options = {"socket_timeout": timeout, "socket_connect_timeout": timeout}
    make = RedisCluster.from_url if reached.cluster else redis.Redis.from_url
    client: Any = from_url(functools.partial(make, **options), reached.url)
    try:
        yield client
    finally:
        client.close()


def exit_code(text: str) -> int:
    value = _parse(text, int, "a whole number")
    if not 0 <= value <= 255:
        raise argparse.ArgumentTypeError(f"must be between 0 and 255, got {text}")
    return value


def positive_int(text: str) -> int:
    value = _parse(text, int, "a whole number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def port_number(text: str) -> int:
    value = _parse(text, int, "a whole number")
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a TCP port, 1 to 65535, got {text}")
    return value


SECONDS_MAX = 1e9
"""About 31 years: a longer wait, grace or interval overflows the system's clock types."""


def positive_float(text: str) -> float:
    value = _parse(text, float, "a number")
    if not 0 < value <= SECONDS_MAX:
        raise argparse.ArgumentTypeError(
            f"must be a positive number of seconds, at most {SECONDS_MAX:g}, got {text}"
        )
    return value


def lease_ttl(text: str) -> float:
    """A lease's TTL in seconds, within what a lock takes (at least 10 ms)."""
    value = positive_float(text)
    try:
        ttl_to_ms(value)
    except InvalidArgument as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def non_negative_float(text: str) -> float:
    value = _parse(text, float, "a number")
    if not 0 <= value <= SECONDS_MAX:
        raise argparse.ArgumentTypeError(
            f"must be zero or a positive number of seconds, at most {SECONDS_MAX:g}, got {text}"
        )
    return value


def _parse(text: str, kind: Callable[[str], T], what: str) -> T:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None


def writable_directory(path: Path, option: str) -> None:
    """Before any work: ``path`` is a directory (made if missing) this process can write a
    file in; else a :class:`UsageError` naming ``option``."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{option} {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise UsageError(f"{option} {path}: {error.strerror or error}") from error
