"""The client libraries redlease works with: redis-py, and valkey-py (its fork) when installed.

Every place that recognises a client class or catches a client's error uses the tuples
here, so a ``valkey.Valkey`` behaves exactly as a ``redis.Redis``. A client of the wrong
flavour (an asyncio client given to the sync ``Locks``, or the reverse) is refused when the
``Locks`` is made, not deep inside the first acquire.
"""

from __future__ import annotations

import codecs
import importlib
import inspect
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from redlease.errors import InvalidArgument, ServerUnavailable

T = TypeVar("T")


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_LIBRARIES = [module for module in (_module("redis"), _module("valkey")) if module is not None]


def _errors(name: str) -> tuple[type[Exception], ...]:
    """``library.exceptions.<name>`` for every library present (``Redis`` in a name is
    ``Valkey`` in valkey-py's)."""
    found = []
    for library in _LIBRARIES:
        exceptions = importlib.import_module(f"{library.__name__}.exceptions")
        if library.__name__ == "valkey":
            name = name.replace("Redis", "Valkey")
        found.append(getattr(exceptions, name))
    return tuple(found)


def _classes(*paths: str) -> tuple[type[Any], ...]:
    """``library.module:Class`` for every library present (``valkey`` spells ``Redis``
    ``Valkey``)."""
    found: list[type[Any]] = []
    for library in _LIBRARIES:
        for path in paths:
            module_name, _, class_name = path.partition(":")
            if library.__name__ == "valkey":
                class_name = class_name.replace("Redis", "Valkey")
            module = _module(f"{library.__name__}{module_name}")
            if module is not None and hasattr(module, class_name):
                found.append(getattr(module, class_name))
    return tuple(found)


ConnectionErrors = _errors("ConnectionError")
"""The server could not be reached, or the connection broke (an auth failure is one too)."""
TimeoutErrors = _errors("TimeoutError")
ResponseErrors = _errors("ResponseError")
NoScriptErrors = _errors("NoScriptError")
AskErrors = _errors("AskError")
AuthenticationErrors = _errors("AuthenticationError")
NoPermissionErrors = _errors("NoPermissionError")
ClusterErrors = _errors("RedisClusterException")
"""What redis-py's cluster client raises when no node answers, or the nodes do not agree on
the slots (mid-failover): no ConnectionError, though that is what it stands for."""


def not_a_cluster(error: BaseException) -> InvalidArgument | None:
    """The error for a cluster client whose server answered that it is no cluster node (a
    setting to change, not a server to wait for); ``None`` for any other error."""
    if isinstance(error, ClusterErrors) and "Cluster mode is not enabled" in str(error):
        return InvalidArgument(
            "the server is not a cluster node (cluster mode is not enabled on it): "
            "drop cluster=True (--cluster)"
        )
    return None


Clients = _classes(":Redis", ".cluster:RedisCluster")
"""Sync clients: ``redis.Redis``, ``redis.RedisCluster`` and their valkey-py twins."""
ClusterClients = _classes(".cluster:RedisCluster")
AsyncClients = _classes(".asyncio:Redis", ".asyncio.cluster:RedisCluster")
AsyncClusterClients = _classes(".asyncio.cluster:RedisCluster")


def library_of(client: Any) -> ModuleType:
    """The library (``redis`` or ``valkey``) a client object comes from."""
    root = type(client).__module__.split(".")[0]
    return next((library for library in _LIBRARIES if library.__name__ == root), _LIBRARIES[0])


def narrow_encoding(client: Any) -> str | None:
    """The client's encoding when it is not UTF-8, else None.

    redis-py packs a str by the client's encoding in some places and as UTF-8 in others
    (the sync client with hiredis), so under such an encoding only ASCII text is the same
    bytes everywhere.
    """
    get_encoder = getattr(client, "get_encoder", None)
    encoding = getattr(get_encoder(), "encoding", "utf-8") if get_encoder else "utf-8"
    try:
        return None if codecs.lookup(encoding).name == "utf-8" else str(encoding)
    except LookupError:
        return str(encoding)


def check_client(client: Any, *, asyncio: bool, user: str | None = None) -> None:
    """Refuse, with the fix in the message, a client of the other flavour or no client.

    ``user`` names what takes the client (default: ``AsyncLocks`` or ``Locks``).
    """
    wanted, other = ("AsyncLocks", "Locks") if asyncio else ("Locks", "AsyncLocks")
    if user is not None:
        other = user.removeprefix("Async") if asyncio else f"Async{user}"
        wanted = user
    execute = getattr(client, "execute_command", None)
    if execute is None:
        raise InvalidArgument(
            f"{wanted} needs a redis-py or valkey-py client (or a URL), got {client!r:.100}"
        )
    if inspect.iscoroutinefunction(execute) != asyncio:
        kind = "an asyncio" if not asyncio else "a sync"
        raise InvalidArgument(
            f"{wanted} got {kind} client ({type(client).__module__}."
            f"{type(client).__qualname__}); use redlease.{other} with it, or give {wanted} "
            f"a {'redis.asyncio.Redis' if asyncio else 'redis.Redis'} (or a URL)"
        )


def from_url(make: Callable[[str], T], url: str) -> T:
    """``make(url)`` (a client class's ``from_url``), with a URL it cannot read refused as
    :class:`~redlease.InvalidArgument` that says what a URL looks like."""
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
    connection = importlib.import_module(f"{_LIBRARIES[0].__name__}.connection")
    for name in _OBJECT_OPTIONS.intersection(connection.parse_url(url)):
        why = f"{name} takes a Python object, which a URL cannot give"
        raise _RefusedOption() from ValueError(why)
    try:
        client = make(url)
    except ClusterErrors as error:  # a cluster client connects at once, to learn the slots
        _check_url_options(url, _LIBRARIES[0])  # a typo first: no server answers it
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
