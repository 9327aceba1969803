"""Redlock's arithmetic: quorum, clock drift, validity, and what the masters' answers mean.

A Redlock lease is granted when a majority of independent masters granted it and time is
left: ``validity = ttl - elapsed - drift`` with ``drift = ttl * 1% + 2 ms`` (the Redis
documentation's algorithm). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from redlease.core.lease import drift_ms
from redlease.core.protocol import NETWORK_ERRORS
from redlease.errors import LockError


def quorum(masters: int) -> int:
    return masters // 2 + 1


@dataclass(frozen=True)
class Tally:
    """The masters' answers to one round: grants (with fences), refusals, errors."""

    fences: list[int]
    refused_ms: list[int]
    """Remaining TTL reported by each master that refused (another holder's lease)."""
    errors: list[BaseException]
    masters: int

    @property
    def reachable(self) -> int:
        return self.masters - len(self.errors)

    def granted(self, elapsed_ms: float, ttl_ms: int) -> bool:
        return len(self.fences) >= quorum(self.masters) and validity_ms(elapsed_ms, ttl_ms) > 0


def validity_ms(elapsed_ms: float, ttl_ms: int) -> float:
    return ttl_ms - elapsed_ms - drift_ms(ttl_ms)


def tally_acquire(replies: Sequence[object]) -> Tally:
    """Sort acquire-script replies (or the exceptions raised instead) by meaning."""
    fences: list[int] = []
    refused: list[int] = []
    errors: list[BaseException] = []
    for reply in replies:
        if isinstance(reply, BaseException):
            if not isinstance(reply, (*NETWORK_ERRORS, LockError)):
                raise reply
            errors.append(reply)
        elif isinstance(reply, list) and int(reply[0]) == 1:
            fences.append(int(reply[1]))
        elif isinstance(reply, list) and int(reply[0]) == 0:
            refused.append(int(reply[1]))
        else:
            errors.append(LockError(f"unexpected reply {reply!r}"))
    return Tally(fences, refused, errors, len(replies))


def quorum_answer(answers: Sequence[bool | None]) -> bool | None:
    """Renewal across masters: kept by a majority (True), lost for good (False), or unknown."""
    needed = quorum(len(answers))
    if sum(1 for answer in answers if answer) >= needed:
        return True
    if sum(1 for answer in answers if answer is False) > len(answers) - needed:
        return False
    return None
