"""Fenced writes to Redis: what to send (``fenced_write.lua``), and what a reply means.

The guards of :mod:`redlease.fencing.redis_guard` only move the bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from redis.crc import key_slot

from redlease.compat import ClusterErrors, ResponseErrors
from redlease.errors import FenceRejected, InvalidArgument, WrongKeyType
from redlease.fencing.holder import MAX_FENCE, Fenced, as_text, holder_tokens

FENCED_WRITE = files("redlease.scripts").joinpath("fenced_write.lua").read_text(encoding="utf-8")
FENCED_WRITE_SHA = hashlib.sha1(FENCED_WRITE.encode(), usedforsecurity=False).hexdigest()
DEFAULT_RECORD_SUFFIX = ":fence"

KEY_ADVICE = "nothing was written: pass the key that holds your resource, or delete this value"
RECORD_ADVICE = (
    "nothing was written: another program uses the guard's record key; choose another record_suffix"
)

MAX_PX = 2**53 - 1
"""The longest expiry ``set`` takes (285,000 years): past about 2**63 ms from now the
server refuses it, after a round trip."""

NOT_AN_INTEGER = "string that is not an integer"
"""What ``fenced_write.lua`` finds where ``incrby`` wants an integer."""

RedisKey = str | bytes
RedisValue = str | bytes | int | float


@dataclass(frozen=True)
class FencedWrite:
    """One call of ``fenced_write.lua``: its keys and arguments, and how to read its reply."""

    keys: tuple[RedisKey, RedisKey]
    args: tuple[RedisValue, ...]
    holder: Fenced
    expected_type: str

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Turn a cross-slot refusal (from the server or a cluster client) into advice."""
        try:
            yield
        except (*ResponseErrors, *ClusterErrors) as error:
            message = str(error)
            if "CROSSSLOT" in message or "same key slot" in message:
                raise _cross_slot(self.keys) from error
            raise

    def outcome(self, reply: Any) -> int:
        """The operation's result if the write was accepted; raise if it was refused."""
        status = int(reply[0])
        if status == 1:
            return int(reply[1])
        if status == 0:
            raise FenceRejected(
                as_text(self.keys[0]),
                int(self.args[0]),
                int(reply[1]),
                lock=getattr(self.holder, "name", None),
                reused=as_text(reply[2]) == "owner",
            )
        if status == -3:
            raise InvalidArgument(
                f"INCRBY {as_text(self.args[3])} would take {as_text(self.keys[0])!r} past "
                "64 bits; nothing was written"
            )
        which = int(reply[1])
        if which == 2:
            raise WrongKeyType(as_text(self.keys[1]), as_text(reply[2]), "hash", RECORD_ADVICE)
        found = as_text(reply[2])
        expected = "integer string" if found == NOT_AN_INTEGER else self.expected_type
        raise WrongKeyType(as_text(self.keys[0]), found, expected, KEY_ADVICE)


def _slot(key: RedisKey) -> int:
    return key_slot(key.encode() if isinstance(key, str) else key)


def _cross_slot(keys: tuple[RedisKey, RedisKey]) -> InvalidArgument:
    return InvalidArgument(
        f"{as_text(keys[0])!r} and its fence record {as_text(keys[1])!r} fall in different "
        "cluster slots: put a hash tag in the key (for example 'stock:{sale-42}') so both "
        "live in one slot"
    )


class RedisGuardBase:
    """What both Redis guards share: the keys, the validation and the script's arguments."""

    def __init__(self, client: Any, cluster: bool, record_suffix: str) -> None:
        if not isinstance(record_suffix, str) or not record_suffix:
            raise InvalidArgument("record_suffix must be a non-empty str")
        self.client = client
        self.record_suffix = record_suffix
        self._cluster = cluster

    def record_key(self, key: RedisKey) -> RedisKey:
        """Where the newest (fence, owner) accepted for ``key`` is kept."""
        if isinstance(key, str) and key:
            return key + self.record_suffix
        if isinstance(key, bytes) and key:
            return key + self.record_suffix.encode()
        raise InvalidArgument(f"key must be a non-empty str or bytes, not {key!r}")

    def _write(
        self, holder: Fenced, key: RedisKey, expected_type: str, *operation: RedisValue
    ) -> FencedWrite:
        """Validate everything before any I/O; on a cluster both keys must share a slot."""
        fence, owner = holder_tokens(holder)
        keys = (key, self.record_key(key))
        if self._cluster and _slot(keys[0]) != _slot(keys[1]):
            raise _cross_slot(keys)
        return FencedWrite(keys, (str(fence), owner, *operation), holder, expected_type)

    def _set(self, holder: Fenced, key: RedisKey, value: RedisValue, px: int | None) -> FencedWrite:
        _check_value(value, "value")
        if px is not None and (
            isinstance(px, bool) or not isinstance(px, int) or not 0 < px <= MAX_PX
        ):
            raise InvalidArgument(
                f"px must be an int of milliseconds from 1 to 2**53 - 1, or None, not {px!r}"
            )
        return self._write(holder, key, "string", "set", value, "" if px is None else str(px))

    def _hset(
        self, holder: Fenced, key: RedisKey, mapping: Mapping[RedisKey, RedisValue]
    ) -> FencedWrite:
        if not isinstance(mapping, Mapping) or not mapping:
            raise InvalidArgument("mapping must be a mapping of at least one field")
        for field, value in mapping.items():
            _check_value(field, "field")
            _check_value(value, f"value of field {field!r}")
        pairs = [part for field, value in mapping.items() for part in (field, value)]
        return self._write(holder, key, "hash", "hset", *pairs)

    def _claim(self, holder: Fenced, key: RedisKey) -> FencedWrite:
        return self._write(holder, key, "", "claim")

    def _incrby(self, holder: Fenced, key: RedisKey, amount: int) -> FencedWrite:
        within_64_bits = isinstance(amount, int) and -MAX_FENCE - 1 <= amount <= MAX_FENCE
        if isinstance(amount, bool) or not within_64_bits:
            raise InvalidArgument(f"amount must be an int within 64 bits, not {amount!r}")
        return self._write(holder, key, "string", "incrby", amount)


def _check_value(value: object, what: str) -> None:
    """What redis-py would refuse with a bare DataError (None, a bool, a list...)."""
    if isinstance(value, bool) or not isinstance(value, str | bytes | int | float):
        raise InvalidArgument(f"{what} must be a str, bytes, int or float, not {value!r}")
