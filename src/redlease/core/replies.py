"""What a script's reply means when it is no answer: another program's value at a key,
or a fence counter that gives no token, as the typed error the caller raises."""

from __future__ import annotations

from typing import Any

from redlease.core.ops import RunScript
from redlease.errors import FenceExhausted, WrongKeyType
from redlease.keys import LockKeys
from redlease.scripts import ScriptName


def script_answer(operation: RunScript, reply: object) -> object:
    """A script's reply, unless it is ``{-1, type, key index}``: another program's value."""
    if isinstance(reply, list) and reply and int(reply[0]) == -1:
        raise foreign_value(operation, reply)
    return reply


def fence_error(keys: LockKeys, message: str) -> Exception:
    if "overflow" in message:
        return FenceExhausted(
            f"fencing counter {keys.fence!r} of lock {keys.name!r} is at its maximum; "
            "no further grant can carry a larger token"
        )
    if "vanished" in message:
        return WrongKeyType(keys.fence, "nothing (it was deleted)", "integer counter")
    return WrongKeyType(keys.fence, message, "integer counter")


EXPECTED_TYPES = {
    ScriptName.ACQUIRE: ("string with an expiry (a lease)", "integer counter", "list (a queue)"),
    ScriptName.SHARED: (
        "sorted set (the holders)",
        "string with an expiry (a writer)",
        "list (a queue)",
    ),
    ScriptName.COUNTDOWN: ("integer string (a count)",),
}


def acquire_error(operation: RunScript, keys: LockKeys, reply: object) -> Exception | None:
    """The typed error an acquire reply stands for (another program's value at a key, a
    fence counter that gives no token), or ``None`` for a grant or a refusal."""
    if not isinstance(reply, list) or not reply:
        return None
    status = int(reply[0])
    if status == -1:
        return foreign_value(operation, reply)
    if status == -2:
        return fence_error(keys, text_of(reply[1]))
    return None


def foreign_value(operation: RunScript, reply: list[Any]) -> WrongKeyType:
    """The error for a ``{-1, type, key index}`` reply: another program's value is there."""
    index = int(reply[2]) if len(reply) > 2 else 1
    expected = EXPECTED_TYPES.get(operation.script, ("lease",) * 3)[index - 1]
    return WrongKeyType(operation.keys[index - 1], text_of(reply[1]), expected)


def text_of(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
