"""Server URLs as a user writes them: read into a client, or shown in a message.

:func:`from_url` makes a redis-py client of a URL and refuses, as
:class:`~redlease.InvalidArgument` at once, what redis-py would only fail on at the first
command (an option it does not know, a value it refuses) or read wrongly (a database that
is no number). :func:`redacted` is the URL fit for a message: no password, no query value.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from redlease.compat import (
    DEFAULT_LIBRARY,
    ClusterErrors,
    NoPermissionErrors,
    library_of,
    not_a_cluster,
    several_urls,
)
from redlease.errors import InvalidArgument, ServerRefused, ServerUnavailable

T = TypeVar("T")


def from_url(make: Callable[[str], T], url: str) -> T:
    """``make(url)`` (a client class's ``from_url``), with a URL it cannot read refused as
    :class:`~redlease.InvalidArgument` that says what a URL looks like."""
    if (count := len(_ANOTHER_URL.findall(url))) > 0:
        raise several_urls(count + 1)
    try:
        return _made_from(make, url)
    except InvalidArgument:  # a ValueError too, but no parser's: it says what is wrong
        raise
    except TypeError as error:
        option = _UNEXPECTED_OPTION.search(str(error))
        if option is None:
            raise
        raise InvalidArgument(
            f"{redacted(url)!r} has the option {option[1]!r}, which the client "
            "does not know (see redis-py's from_url for the ones it does)"
        ) from None
    except _RefusedOption as refused:
        raise InvalidArgument(
            f"{redacted(url)!r} has an option the client refuses: {refused.__cause__}"
        ) from None
    except ValueError as error:  # an unknown scheme, a port out of range, a bad db number
        shown = redacted(url)
        # the parser's message quotes pieces of the URL: a password's too, when there is one
        why = f" ({error})" if _without_user_password(url) == url.strip() else ""
        raise InvalidArgument(
            f"{shown!r} is not a server URL{why}: write redis://HOST:PORT/DB, "
            "rediss://HOST:PORT/DB for TLS, or unix:///path/to/socket"
        ) from None


def _made_from(make: Callable[[str], T], url: str) -> T:
    _check_database(url.strip())
    url = _lower_scheme(url)
    connection = importlib.import_module(f"{DEFAULT_LIBRARY.__name__}.connection")
    for name in _OBJECT_OPTIONS.intersection(connection.parse_url(url)):
        why = f"{name} takes a Python object, which a URL cannot give"
        raise _RefusedOption() from ValueError(why)
    try:
        client = make(url)
    except NoPermissionErrors as error:  # a cluster client reads the command table too
        raise ServerRefused(
            f"the server at {redacted(url)!r} refused what a cluster client needs to start "
            f"({error}): grant the user +cluster|slots and +command"
        ) from None
    except ClusterErrors as error:  # a cluster client connects at once, to learn the slots
        _check_url_options(url, DEFAULT_LIBRARY)  # a typo first: no server answers it
        mistake = not_a_cluster(error)
        if mistake is not None:
            raise mistake from None
        raise ServerUnavailable(
            f"could not reach the cluster at {redacted(url)!r}: {error}"
        ) from None
    pool = getattr(client, "connection_pool", None)
    if pool is None:
        _check_url_options(url, library_of(client))
    else:
        _connection_of(pool.connection_class, pool.connection_kwargs, _blank_options(url))
    return client


_ANOTHER_URL = re.compile(r"[,;]\s*[A-Za-z][A-Za-z0-9+.-]*://")
"""What follows one URL in a list of them (Django splits its LOCATION on "," and ";")."""
_UNEXPECTED_OPTION = re.compile(r"unexpected keyword argument '([^']*)'")


class _RefusedOption(Exception):
    """A URL option redis-py knows, with a value it refuses (raised from its error)."""


def _check_url_options(url: str, library: ModuleType) -> None:
    """A cluster client's options: the sync one drops those it does not know without a
    word, so the URL's are checked as a plain client's."""
    connection = importlib.import_module(f"{library.__name__}.connection")
    cluster = importlib.import_module(f"{library.__name__}.cluster")
    own = inspect.signature(getattr(cluster, "RedisCluster", None) or cluster.ValkeyCluster)
    options = {
        name: value
        for name, value in connection.parse_url(url).items()
        if name not in own.parameters  # the cluster client's own (read_from_replicas...)
    }
    blank = [name for name in _blank_options(url) if name not in own.parameters]
    _connection_of(options.pop("connection_class", connection.Connection), options, blank)


_OBJECT_OPTIONS = frozenset(
    {
        "retry",
        "retry_on_error",
        "credential_provider",
        "redis_connect_func",
        "parser_class",
        "event_dispatcher",
        "cache",
        "cache_config",
        "maint_notifications_config",
        "driver_info",
    }
)
"""Connection options whose value is an object: a URL gives them a str, which the
connection takes and fails on at its first command."""
_POOL_OPTIONS = frozenset({"max_connections", "timeout", "connection_class", "queue_class"})
"""Options of the pool, not of a connection (``?max_connections=5``); blank, redis-py
drops them as any other."""


def _blank_options(url: str) -> list[str]:
    """The options written without a value (``?foo``, ``?foo=``): redis-py drops them."""
    return [name for name, value in parse_qsl(urlsplit(url).query, True) if not value]


def _connection_of(connection_class: type[Any], options: dict[str, Any], blank: list[str]) -> None:
    """Make (no I/O) a connection object of these options: redis-py keeps a URL option it
    does not know, and fails on it at the first connection (a TypeError), as it does on a
    value it refuses (``?protocol=9``); this finds both where the URL is given. Options
    without a value are tried one by one, for their names only."""
    try:
        connection_class(**options)
    except TypeError:
        raise
    except Exception as error:
        raise _RefusedOption() from error
    for name in blank:
        if name in options or name in _POOL_OPTIONS:
            continue
        try:
            connection_class(**options, **{name: None})
        except TypeError as error:
            if _UNEXPECTED_OPTION.search(str(error)):
                raise
        except Exception:  # noqa: S110 - a known option, which None does not suit
            pass


def _lower_scheme(url: str) -> str:
    """Schemes ignore case (RFC 3986), but redis-py's sync parser only knows them in lower
    case (nor spaces around the URL) where its asyncio one takes any: one spelling for both
    flavours."""
    scheme, colon, rest = url.strip().partition(":")
    return scheme.lower() + colon + rest


_QUERY_VALUE = re.compile(r"([?&][^=&#]*=)[^&]*")


def redacted(url: str) -> str:
    """``url`` with its password, if any, and every query value replaced by ``***``: fit
    for a message.

    Works on the text as written, so a URL no parser accepts is masked too (a slash or the
    scheme missing), and a password holding ``#``, ``/``, ``?`` or ``@`` unencoded is
    masked whole: everything from the first colon of the user part to the last ``@``
    (sometimes more than the password, never less). Query values go whatever the option
    is called: a password can hide in a misspelt name, or an escaped one (``%70assword``).
    """
    return _QUERY_VALUE.sub(r"\1***", _without_user_password(url))


def _without_user_password(url: str) -> str:
    text = url.strip()
    if "@" in text:
        head, tail = text.rsplit("@", 1)
        start = head.find("://") + 3 if "://" in head else 0
        colon = head.find(":", start)
        if colon >= 0:
            text = f"{head[: colon + 1]}***@{tail}"
    return text


def _check_database(url: str) -> None:
    """redis-py reads ``redis://host/abc`` as database 0: a typo would put the locks in
    another database than the one meant, so a path that is no database number is refused."""
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("redis", "rediss"):
        return
    database = unquote(parts.path).lstrip("/")
    if database and not database.isdigit():
        raise ValueError(f"the database {database!r} is not a number from 0 up")
