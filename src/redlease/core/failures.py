"""A failed lock command as the typed error its caller raises: the server unreachable,
our credentials refused, a cluster set-up mistake, or a command the server refused."""

from __future__ import annotations

from redlease.compat import AskErrors, AuthenticationErrors, MovedErrors, not_a_cluster
from redlease.core.ops import RunScript
from redlease.errors import (
    AuthenticationFailed,
    InvalidArgument,
    LockError,
    ServerRefused,
    ServerUnavailable,
)
from redlease.keys import LockKeys


def unavailable(keys: LockKeys | None, action: str, exc: BaseException) -> LockError:
    """The error for a failed round trip: unreachable, or our credentials refused (a
    redis-py ConnectionError too), or a cluster client on a server that is no cluster."""
    mistake = not_a_cluster(exc)
    if mistake is not None:
        return mistake
    what = f"lock {keys.name!r}" if keys is not None else "the server"
    if isinstance(exc, AuthenticationErrors):
        return AuthenticationFailed(
            f"could not {action} {what}: the server refused our credentials ({exc})"
        )
    return ServerUnavailable(f"could not {action} {what}: server unreachable ({exc})")


def refused(operation: RunScript, exc: BaseException) -> LockError:
    """An error reply to a lock command: :class:`ServerRefused`, but a MOVED (a plain client
    on a cluster node it could not find out about: the user may not run INFO)."""
    where = operation.keys[0] if operation.keys else operation.script.value
    if isinstance(exc, (*MovedErrors, *AskErrors)):
        return InvalidArgument(
            f"{where!r} lives on another node of a Redis Cluster ({exc}): give the client "
            "cluster=True (one made from a URL finds the cluster itself when INFO is allowed)"
        )
    return ServerRefused(f"the server refused a lock command on {where!r}: {exc}")
