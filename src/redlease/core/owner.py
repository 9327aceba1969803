"""Who holds a lease (a thread, a task, or an explicit id) and the tokens that name it."""

from __future__ import annotations

import binascii
import os
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from redlease.errors import InvalidArgument

TokenFactory = Callable[[], str]


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def random_token() -> str:
    """``secrets.token_urlsafe(16)``, spelled out: 128 random bits, 22 URL-safe characters."""
    return binascii.b2a_base64(os.urandom(16), newline=False).translate(_URLSAFE)[:22].decode()


@dataclass(frozen=True)
class Owner:
    """Who holds a lease for reentrancy: a thread, a task, or an explicit id."""

    kind: str
    ident: Hashable
    label: str = field(default="", compare=False)

    def describe(self) -> str:
        """How the owner reads in messages and in tokens (what ``redlease ls`` shows).

        An ``owner=`` object without a text of its own reads as its type and the last six
        hex digits of its id (``owner Job#3fa2c0``), not ``<Job object at 0x7f…>``; a long
        text is cut, since it travels in every token of the owner.
        """
        if self.label:
            return f"{self.kind} {self.label}"
        ident = self.ident
        kind = type(ident)
        if kind.__str__ is object.__str__ and kind.__repr__ is object.__repr__:
            text = f"{kind.__name__}#{id(ident) & 0xFFFFFF:06x}"
        else:
            text = str(ident)
        return f"{self.kind} {text if len(text) <= 64 else text[:63] + '…'}"


def explicit_owner(value: Hashable) -> Owner:
    """The owner a lock's ``owner=`` names; it must be hashable (it keys the held leases)."""
    try:
        hash(value)
    except TypeError:
        raise InvalidArgument(
            f"owner must be hashable (a str, an int, a tuple of them...), got {value!r:.80}"
        ) from None
    return Owner("owner", value)
