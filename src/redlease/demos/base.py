"""What every demo shares: its registration, the exit codes, and reaching a server.

A demo is one module under :mod:`redlease.demos` that builds a :class:`Demo`; the CLI only
lists the registered demos and dispatches to one, so adding a demo touches no CLI code.
"""

from __future__ import annotations

import argparse
import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlease.errors import ServerUnavailable
from redlease.server import server_url

__all__ = [
    "Demo",
    "DemoFailed",
    "ExitCode",
    "non_negative_float",
    "positive_float",
    "positive_int",
    "reachable_server",
]

PROBE_TIMEOUT = 2.0
T = TypeVar("T")


class ExitCode(enum.IntEnum):
    """The sysexits.h codes, so scripts can tell a usage mistake from a server that is down."""

    OK = 0
    USAGE = 64
    UNAVAILABLE = 69
    SOFTWARE = 70
    INTERRUPTED = 130


class DemoFailed(Exception):
    """A demo could not finish (a worker crashed, the time ran out); the message says why."""


@dataclass(frozen=True)
class Demo:
    """A runnable scenario: ``configure`` adds its options, ``run`` returns an exit code.

    The CLI adds ``--url`` itself, so ``run`` always finds ``args.url`` (None if not given).
    """

    name: str
    summary: str
    description: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


@contextmanager
def reachable_server(url: str | None) -> Iterator[str]:
    """Yield the URL of a server that answered PING: ``url``, ``REDIS_URL`` or a private one.

    The probe makes one attempt with a short timeout, because redis-py's default retries
    would leave the user staring at a silent terminal for seconds before the error.
    """
    with server_url(url) as resolved:
        client = redis.Redis.from_url(
            resolved,
            socket_timeout=PROBE_TIMEOUT,
            socket_connect_timeout=PROBE_TIMEOUT,
            retry=Retry(NoBackoff(), 0),
        )
        try:
            client.ping()
        except redis.AuthenticationError as error:
            raise ServerUnavailable(f"{resolved} refused the credentials: {error}") from error
        except redis.RedisError as error:
            raise ServerUnavailable(
                f"cannot reach a Redis/Valkey server at {resolved} ({error}); start it, or "
                "correct --url / REDIS_URL, or unset both to run a private server"
            ) from error
        finally:
            client.close()
        yield resolved


def positive_int(text: str) -> int:
    value = _parse(text, int, "a whole number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def positive_float(text: str) -> float:
    value = _parse(text, float, "a number")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _parse(text, float, "a number")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be zero or a positive number, got {text}")
    return value


def _parse(text: str, kind: Callable[[str], T], what: str) -> T:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
