"""What a guard needs from a holder, and the check of its tokens before any write."""

from __future__ import annotations

from typing import Protocol

from redlease.errors import InvalidArgument

MAX_FENCE = 2**63 - 1


class Fenced(Protocol):
    """What a guard needs from a holder: a :class:`~redlease.Lease` has it."""

    @property
    def name(self) -> str: ...

    @property
    def fence(self) -> int: ...

    @property
    def token(self) -> str: ...


def holder_tokens(holder: Fenced) -> tuple[int, str]:
    """The holder's fencing and owner tokens, refused with a clear error before any I/O."""
    fence = getattr(holder, "fence", None)
    owner = getattr(holder, "token", None)
    if fence is None or owner is None:
        raise InvalidArgument(
            f"a guard needs the holder's lease (something with name, fence and token), "
            f"not {holder!r}"
        )
    if isinstance(fence, bool) or not isinstance(fence, int) or not 0 <= fence <= MAX_FENCE:
        raise InvalidArgument(f"fencing token must be an int in [0, 2**63 - 1], not {fence!r}")
    if not isinstance(owner, str) or not owner:
        raise InvalidArgument(f"owner token must be a non-empty str, not {owner!r}")
    return fence, owner


def as_text(value: object) -> str:
    """A value read from a server or a row, as text for messages and comparisons."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    return str(value)
