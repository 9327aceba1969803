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
from types import ModuleType
from typing import Any

from redlease.errors import InvalidArgument, LockError, ServerRefused


def _module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_LIBRARIES = [module for module in (_module("redis"), _module("valkey")) if module is not None]
DEFAULT_LIBRARY = _LIBRARIES[0]
"""redis-py (valkey-py when it is the only one installed): whose URL parser reads a URL."""


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
MovedErrors = _errors("MovedError")
AuthenticationErrors = _errors("AuthenticationError")
NoPermissionErrors = _errors("NoPermissionError")
ClusterErrors = _errors("RedisClusterException")
"""What redis-py's cluster client raises when no node answers, or the nodes do not agree on
the slots (mid-failover): no ConnectionError, though that is what it stands for."""


def not_a_cluster(error: BaseException) -> LockError | None:
    """The error for a cluster client whose server answered that it is no cluster node (a
    setting to change, not a server to wait for); ``None`` for any other error. redis-py
    says so for any error reply to CLUSTER SLOTS: one that refused a permission is
    :class:`ServerRefused` instead, naming what the user lacks."""
    if not isinstance(error, ClusterErrors) or "Cluster mode is not enabled" not in str(error):
        return None
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, NoPermissionErrors):
        cause = cause.__cause__ or cause.__context__
    if cause is not None:
        return ServerRefused(
            f"the server refused what a cluster client needs to learn where the slots are "
            f"({cause}): grant the user +cluster|slots and +command"
        )
    return InvalidArgument(
        "the server is not a cluster node (cluster mode is not enabled on it): "
        "drop cluster=True (--cluster)"
    )


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


def several_urls(count: int) -> InvalidArgument:
    """The error for several server URLs where one client is wanted (Django's cache
    ``LOCATION`` can list its servers: the first is where it writes)."""
    if count < 2:
        got = "an empty list" if count == 0 else "a list of one: give the URL itself"
        return InvalidArgument(f"a lock client takes one server's URL as a str, got {got}")
    return InvalidArgument(
        f"a lock client takes one server's URL, got {count} URLs: give the first (where "
        "Django's cache LOCATION writes), or take locks on several independent masters with "
        "Redlock"
    )


def check_client(client: Any, *, asyncio: bool, user: str | None = None) -> None:
    """Refuse, with the fix in the message, a client of the other flavour or no client.

    ``user`` names what takes the client (default: ``AsyncLocks`` or ``Locks``).
    """
    wanted, other = ("AsyncLocks", "Locks") if asyncio else ("Locks", "AsyncLocks")
    if user is not None:
        other = user.removeprefix("Async") if asyncio else f"Async{user}"
        wanted = user
    if isinstance(client, (list, tuple)) and all(isinstance(url, str) for url in client):
        raise several_urls(len(client))
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


def asking_last(nodes_manager: Any, name: str | None) -> dict[str, str]:
    """How a cluster client's slot-map refresh asks the node ``name`` last: a node that may
    be silent (paused, cut off) holds a refresh that asks it first for the whole socket
    timeout. redis-py takes the node's name for that since mid-2026
    (``last_failed_node_name``); before, it asked its startup nodes in order, so the node
    moves to the end of them."""
    if name is None:
        return {}
    if "last_failed_node_name" in inspect.signature(nodes_manager.initialize).parameters:
        return {"last_failed_node_name": name}
    startup = nodes_manager.startup_nodes
    node = startup.pop(name, None)
    if node is not None:
        startup[name] = node
    return {}
