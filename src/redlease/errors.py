"""One exception tree for everything redlease raises.

Every error is a :class:`LockError`; the ones with a standard-library meaning also
inherit it (a timeout is a :class:`TimeoutError`, bad input a :class:`ValueError`),
so callers can catch either the redlease name or the builtin one.
"""

from __future__ import annotations


class LockError(Exception):
    """Base of every error raised by redlease."""

    def _made_from(self, message: str, *made_from: object) -> None:
        """Say ``message``, with ``args`` the values the error was made from: pickle and
        Celery's result backends rebuild an error as ``type(error)(*error.args)``."""
        super().__init__(message)
        self.args = made_from
        self._message = message

    def __str__(self) -> str:
        message = self.__dict__.get("_message")
        return message if isinstance(message, str) else super().__str__()


class LockTimeout(LockError, TimeoutError):
    """The lock could not be had within the allowed time (or at once, when not blocking)."""

    def __init__(self, name: str, timeout: float | None, reason: str | None = None) -> None:
        self.name = name
        self.timeout = timeout
        waited = timeout is not None and timeout != 0
        if reason is not None:
            detail = f"{reason} (after {timeout:g} s)" if waited else reason
        elif waited:
            detail = f"still held by another owner after {timeout:g} s"
        else:
            detail = "it is held by another owner"
        self._made_from(f"could not acquire lock {name!r}: {detail}", name, timeout, reason)


class NotOwned(LockError):
    """Release or extend was asked by someone who does not hold the lock; nothing changed."""


class LeaseLost(LockError):
    """The lease ended while its holder still believed it held the lock.

    Raised at the exit of a ``with`` block whose lease expired, was deleted or was taken
    over: the critical section ran (at least partly) unprotected. Check the lease's
    fencing token at the resource to make such writes harmless.
    """

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        self._made_from(f"lease on lock {name!r} was lost: {reason}", name, reason)


class InvalidName(LockError, ValueError):
    """A lock name that cannot be used (wrong type, empty, too long, braces)."""


class InvalidArgument(LockError, ValueError):
    """An option with a value that makes no sense (ttl <= 0, negative counts, ...)."""


class WrongKeyType(LockError):
    """A key that the lock needs already holds a value of another type."""

    def __init__(
        self,
        key: str,
        found: str,
        expected: str,
        advice: str = "another program uses this key: choose another lock name or prefix",
    ) -> None:
        self.key = key
        self.found = found
        self.expected = expected
        self._made_from(
            f"key {key!r} holds {_a(found)}, but redlease needs {_a(expected)} there; {advice}",
            key,
            found,
            expected,
            advice,
        )


def _a(thing: str) -> str:
    """``thing`` with its indefinite article ("an integer counter", "a hash")."""
    return f"{'an' if thing[:1].lower() in 'aeiou' else 'a'} {thing}"


class NotReplicated(LockError):
    """Too few replicas confirmed a lock write in time; an acquisition was rolled back.

    Raised only when the client asked for replica acknowledgement (``replicas=N``). It
    narrows the window in which a failover loses a lock; it is not consensus.
    """


class FenceRejected(LockError):
    """A fenced write was refused: another holder has the lock now; nothing was written.

    ``token`` is the refused fencing token, ``newest`` the newest one the resource had
    accepted (``None`` when unknown), ``resource`` names what was written, ``lock`` the lock
    the token came from. ``reused`` is true when the token was equal to the newest but came
    from another owner (a failover repeated it).
    """

    def __init__(
        self,
        resource: str,
        token: int,
        newest: int | None = None,
        lock: str | None = None,
        reused: bool = False,
    ) -> None:
        self.resource = resource
        self.token = token
        self.newest = newest
        self.lock = lock
        self.reused = reused
        if reused:
            why = f"token {token} was already used by another owner (a failover repeated it)"
        elif newest is not None:
            why = f"token {token} is older than {newest}, the newest it accepted"
        else:
            why = f"token {token} is not newer than the one it holds"
        held = f"lock {lock!r}" if lock else "the lock"
        self._made_from(
            f"write to {resource} refused: {why}; another holder has {held} now: "
            "stop this work and do not retry it with this lease",
            resource,
            token,
            newest,
            lock,
            reused,
        )


class RowNotFound(LockError, LookupError):
    """A fenced SQL update found no row with the given id: insert it before fencing it."""


class FenceExhausted(LockError):
    """The fencing counter of a lock can no longer grow; no new grant can be fenced."""


class AuthenticationFailed(LockError, PermissionError):
    """The server refused our credentials (NOAUTH, WRONGPASS): not retried."""


class ServerRefused(LockError):
    """The server answered with an error: no permission (ACL), read-only replica, out of
    memory, a command it does not know. Nothing was granted."""


class ServerUnavailable(LockError, ConnectionError):
    """The Redis/Valkey server could not be reached or did not answer in time."""


class ServerNotFound(LockError, RuntimeError):
    """No server binary or URL was found to start or reach a Redis-compatible server."""
