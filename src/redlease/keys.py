"""Key naming: every key of one lock lives in the same Redis Cluster hash slot.

A lock named ``orders:42`` under the default prefix owns the keys
``redlease:{orders:42}`` (the lease) and, while waiters come, the waiter queue
``redlease:{orders:42}:queue``; its fencing token comes from the counter of its cluster
slot, ``redlease:{<slot tag>}:fence`` (see :func:`slot_tag`), which outlives every lease so
tokens never go back, and which the other names of the slot share.
The braces are the cluster hash tag, so names may not contain braces themselves.
"""

from __future__ import annotations

import math
import numbers
from binascii import crc_hqx
from dataclasses import dataclass, field
from decimal import Decimal
from importlib.resources import files

from redlease.errors import InvalidArgument, InvalidName

DEFAULT_PREFIX = "redlease"
MAX_NAME_BYTES = 1024
MAX_TTL_MS = 10**12
MIN_TTL_MS = 10
"""A shorter lease could end before the reply that grants it arrives (a loaded round trip
is a few ms), and its renewals would spin: such a lease would be dead on arrival."""


SLOTS = 16384
_slot_tags: list[str] = []


def slot_tag(name: str) -> str:
    """The shortest hash tag that lands in the same cluster slot as ``{name}``.

    A lock's fencing counter lives under it, so one counter serves every name of a slot
    (nothing is kept per name once its lease is gone) and the lock's scripts still touch
    one slot only. The table is ``slot_tags.txt`` (written by ``tools/slot_tags.py``).
    """
    if not _slot_tags:
        table = files("redlease").joinpath("slot_tags.txt").read_text(encoding="ascii")
        _slot_tags.extend(table.split())
    return _slot_tags[crc_hqx(name.encode("utf-8"), 0) % SLOTS]


def validate_name(name: object) -> str:
    if not isinstance(name, str):
        raise InvalidName(f"lock name must be a str, got {type(name).__name__}: {name!r:.80}")
    if not name:
        raise InvalidName("lock name must not be empty")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidName(
            f"lock name {name!r:.80} cannot be sent to the server: {exc.reason} at "
            f"position {exc.start} (a lone surrogate, often from a mis-decoded byte string)"
        ) from None
    if size > MAX_NAME_BYTES:
        raise InvalidName(f"lock name is {size} bytes long; at most {MAX_NAME_BYTES} are allowed")
    if "{" in name or "}" in name:
        raise InvalidName(
            f"lock name {name!r:.80} contains a brace; braces are reserved for the "
            "cluster hash tag that keeps a lock's keys together"
        )
    return name


def validate_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix or "{" in prefix or "}" in prefix:
        raise InvalidArgument(f"key prefix must be a non-empty str without braces, got {prefix!r}")
    return prefix


SECONDS_TYPES = (numbers.Real, Decimal)
"""What a number of seconds may be: any real number (int, float, ``Fraction``, numpy's) or a
``Decimal`` from a configuration, never a bool."""


def ttl_to_ms(ttl: object, what: str = "ttl", least_ms: int = MIN_TTL_MS) -> int:
    """Seconds (any real number) to whole milliseconds, refusing what a lease cannot be."""
    if isinstance(ttl, bool) or not isinstance(ttl, SECONDS_TYPES):
        raise InvalidArgument(f"{what} must be a number of seconds, got {ttl!r}")
    try:
        seconds = float(ttl)
    except OverflowError:  # an int beyond any float
        raise InvalidArgument(f"{what} of {ttl!r} s is too long") from None
    except ValueError:  # a signalling NaN
        seconds = math.nan
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidArgument(f"{what} must be a positive, finite number of seconds, got {ttl!r}")
    ms = round(seconds * 1000)
    if seconds * 1000 < least_ms:  # before rounding: 9.5 ms is under 10 ms
        raise InvalidArgument(f"{what} must be at least {least_ms} ms, got {ttl!r} s")
    if ms > MAX_TTL_MS:
        raise InvalidArgument(f"{what} of {ttl!r} s is too long")
    return ms


@dataclass(frozen=True)
class LockKeys:
    """The keys and channel of one lock, all sharing the ``{name}`` hash tag.

    The keys every acquisition and release sends are built once, with the object (a client
    keeps one per recently used name, so a lock cycle formats none of them).
    """

    name: str
    prefix: str = DEFAULT_PREFIX
    base: str = field(init=False, repr=False, compare=False)
    lease: str = field(init=False, repr=False, compare=False)
    """The lease itself (the base key)."""
    fence: str = field(init=False, repr=False, compare=False)
    """The fencing counter: one per cluster slot, shared by every name of the slot."""
    queue: str = field(init=False, repr=False, compare=False)
    wake_prefix: str = field(init=False, repr=False, compare=False)
    """A client's channel for the locks of this slot, but for the client's id."""

    def __post_init__(self) -> None:
        base = f"{self.prefix}:{{{self.name}}}"
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "lease", base)
        object.__setattr__(self, "fence", f"{self.prefix}:{{{slot_tag(self.name)}}}:fence")
        object.__setattr__(self, "queue", f"{base}:queue")
        object.__setattr__(self, "wake_prefix", f"{self.prefix}:{{{slot_tag(self.name)}}}:wake:")

    @property
    def holders(self) -> str:
        """Shared holders (readers, permits) by lease expiry."""
        return f"{self.base}:holders"

    @property
    def writer(self) -> str:
        return f"{self.base}:writer"

    @property
    def count(self) -> str:
        """A count-down latch's remaining count."""
        return f"{self.base}:count"

    @property
    def broadcast(self) -> str:
        """A channel every waiter of the name listens on (count-down latches)."""
        return f"{self.base}:zero"

    def client_channel(self, client: str) -> str:
        """Where the hand-offs to ``client``'s waiters on the locks of this slot arrive."""
        return f"{self.wake_prefix}{client}"

    def latch(self, request_id: str) -> str:
        return f"{self.base}:latch:{request_id}"
