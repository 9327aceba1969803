"""Redlock's arithmetic: quorum, clock drift, validity, and what the masters' answers mean.

A Redlock lease is granted when a majority of independent masters granted it and time is
left: ``validity = ttl - elapsed - drift`` with ``drift = ttl * 1% + 2 ms`` (the Redis
documentation's algorithm), and, for the fence never to go back, once a majority holds a
counter at least as large as the fence handed out (any later majority shares a master
with that one). Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from redlease.compat import AuthenticationErrors, TimeoutErrors
from redlease.core.lease import drift_ms
from redlease.core.protocol import NETWORK_ERRORS
from redlease.errors import AuthenticationFailed, InvalidArgument, LockError, ServerUnavailable

STRAGGLER_GRACE_S = 0.01
"""Once enough masters answered a round, the others get as long again as those took, twice
the slowest one's usual answer time, and at least this long: a silent master never holds a
round up, a slow one still counts."""
RECONNECT_PAUSES_S = (0.05, 1.0)
"""A master whose connection could not be opened is not tried again for the first of these
(its rounds count it silent at once), then twice as long after each further failure, up
to the second: one opening at a time per master, never a pile of them, and a master back
from a restart counts again within a fraction of a second."""
ROUND_FLOOR_S = 1.0
"""The least time a round may wait for the masters when the caller's ``timeout`` is shorter
(or 0): one round trip to each, a far one included."""
SILENT_MAJORITY_S = 5.0
"""An acquire with no timeout reports a majority that answered none of its rounds for the
lease's validity, and at least this long, as unavailable (a short lease's rounds may just
be slower than its validity for a while)."""

RETRY_DELAYS_S = (0.005, 0.05)
"""A refused round retries after a random pause in this range, so contenders desynchronise."""
MAX_UNANSWERED = 16
"""The most recent rounds a silent majority left unanswered that a failed acquire gives back."""
RELEASE_AT_LEAST_S = 0.05
"""A release waits for the masters until the lease's local deadline, and at least this long."""


class _NotAwaited:
    def __repr__(self) -> str:
        return "NOT_AWAITED"


NOT_AWAITED = _NotAwaited()
"""The reply of a master that a round did not wait for, because a majority had already
decided it (see :func:`grants`): the reply is read, and dropped, before that
connection's next one."""


def grants(reply: object) -> bool:
    """An acquire or renewal that this master granted (``[1, ...]``)."""
    return isinstance(reply, list) and bool(reply) and reply[0] == 1


def releases(reply: object) -> bool:
    """A release this master carried out (the lease was there, and is gone)."""
    return isinstance(reply, int) and not isinstance(reply, bool) and reply >= 1


def raised_to(fence: int) -> Callable[[object], bool]:
    """Whether a fence-floor reply shows a counter at least ``fence``."""
    return lambda reply: _at_least(reply, fence)


def reconnect_pause(failures: int) -> float:
    """How long a master is left alone after ``failures`` openings failed in a row."""
    first, longest = RECONNECT_PAUSES_S
    doublings = min(max(failures - 1, 0), 32)  # past the longest anyway; 2**1024 overflows
    return min(first * float(2**doublings), longest)


def counted(replies: list[Any], decided: Callable[[object], bool] | None) -> int:
    """How many replies of a fan-out round count towards ``enough``: those that passed
    ``decided``, or else every answer."""
    if decided is not None:
        return sum(1 for reply in replies if decided(reply))
    return sum(1 for reply in replies if reply is not None and not isinstance(reply, Exception))


def master_list(masters: object) -> list[Any]:
    """The masters a Redlock is given, as a list: any iterable of clients or URLs."""
    if isinstance(masters, (str, bytes)) or not isinstance(masters, Iterable):
        raise InvalidArgument(
            f"Redlock needs a list of masters (3 or 5 is usual), got {type(masters).__name__}"
            f" {masters!r:.80}: pass [{'url' if isinstance(masters, str) else 'client'}, ...]"
        )
    listed = list(masters)
    if not listed:
        raise InvalidArgument("Redlock needs a list of masters (3 or 5 is usual), got none")
    return listed


def refuse_repeated(clients: Sequence[Any]) -> None:
    """A server given twice (another database of it included) would count twice toward a
    majority that is one server."""
    seen: set[tuple[object, ...]] = set()
    for client in clients:
        settings = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        port = settings.get("port")
        port = int(port) if isinstance(port, str) and port.isdigit() else port  # from the env
        where: tuple[object, ...] = (settings.get("host"), port, settings.get("path"))
        if where == (None, None, None):
            where = (id(client),)
        if where in seen:
            shown = settings.get("path") or f"{settings.get('host')}:{settings.get('port')}"
            raise InvalidArgument(
                f"Redlock was given the master {shown} twice: its majority must be of "
                "independent servers"
            )
        seen.add(where)


def quorum(masters: int) -> int:
    return masters // 2 + 1


@dataclass(frozen=True)
class Tally:
    """The masters' answers to one round: grants (with fences), refusals, errors."""

    granted_by: list[int | None]
    """Per master, in order: the fence it granted, or ``None``."""
    refused_ms: list[int]
    """Remaining TTL reported by each master that refused (another holder's lease)."""
    errors: list[BaseException]
    masters: int
    answered: list[bool]
    """Per master, in order: whether it answered (a grant or a refusal, not an error)."""
    unread: list[int]
    """The masters whose answer the round did not wait for (see :data:`NOT_AWAITED`)."""

    @cached_property
    def fences(self) -> list[int]:
        return [fence for fence in self.granted_by if fence is not None]

    @cached_property
    def fence(self) -> int:
        """The round's fence: the largest counter drawn (only for a round with grants)."""
        return max(self.fences)

    @cached_property
    def drawn(self) -> int:
        """How many masters drew the round's fence itself."""
        return self.fences.count(self.fence)

    @property
    def reachable(self) -> int:
        return self.masters - len(self.errors)

    @property
    def silent(self) -> int:
        """Masters that did not answer in time (as opposed to refusing the connection)."""
        return sum(1 for error in self.errors if isinstance(error, TimeoutErrors))

    def may_hold(self) -> list[int]:
        """The masters that granted the round's lease, or may have (their answer unread)."""
        granted = [index for index, fence in enumerate(self.granted_by) if fence is not None]
        return sorted(granted + self.unread)

    def granted(self, elapsed_ms: float, ttl_ms: int) -> bool:
        return len(self.fences) >= quorum(self.masters) and validity_ms(elapsed_ms, ttl_ms) > 0

    def behind(self) -> list[int]:
        """The masters whose counter is not known to be at the round's fence yet: each must
        be raised to it before a majority can vouch for it."""
        return [index for index, drawn in enumerate(self.granted_by) if drawn != self.fence]

    def to_raise(self) -> list[int]:
        """Where the round's fence-floor goes: the masters behind that answered this round,
        when with those that drew the fence they can make a majority; else every master
        behind. A master silent in this round is not waited for twice."""
        behind = self.behind()
        answered = [index for index in behind if self.answered[index]]
        needed = quorum(self.masters) - self.drawn
        return answered if len(answered) >= needed else behind

    def confirmed(self, raised: dict[int, object]) -> int:
        """How many masters now hold a counter at least the round's fence: those that drew
        it, and those whose raise (the fence-floor script) answered with it or more."""
        return self.drawn + sum(1 for reply in raised.values() if _at_least(reply, self.fence))


def _at_least(reply: object, fence: int) -> bool:
    if isinstance(reply, (bytes, str, int)) and not isinstance(reply, bool):
        try:
            return int(reply) >= fence
        except ValueError:
            return False
    return False


def straggler_deadline(
    started: float, enough_at: float, deadline: float, patience: float = 0.0
) -> float:
    """When a fan-out round stops waiting, once enough answers came in at ``enough_at``;
    ``patience`` is what the slowest target usually takes (see :func:`learned`)."""
    return min(deadline, enough_at + max(STRAGGLER_GRACE_S, enough_at - started, patience))


def learned(known: float | None, seconds: float) -> float:
    """A target's usual answer time, after one more answer that took ``seconds``."""
    return seconds if known is None else 0.7 * known + 0.3 * seconds


def too_few_answers(name: str, tally: Tally, waited_ms: float) -> LockError:
    """The error for a round that no majority answered (within ``waited_ms``): a
    :class:`ServerUnavailable`, or :class:`AuthenticationFailed` when the masters that refused
    our credentials are enough on their own to leave no majority."""
    needed = quorum(tally.masters)
    in_time = f" in time (waited {waited_ms:.0f} ms)" if tally.silent else ""
    message = (
        f"could not acquire lock {name!r}: only {tally.reachable} of {tally.masters} masters "
        f"answered{in_time}, Redlock needs {needed}"
    )
    refusing = [error for error in tally.errors if isinstance(error, AuthenticationErrors)]
    if not refusing:
        return ServerUnavailable(message)
    message += f"; {len(refusing)} of {tally.masters} refused our credentials ({refusing[0]})"
    if tally.masters - len(refusing) < needed:
        return AuthenticationFailed(message)
    return ServerUnavailable(message)


def not_granted(tally: Tally, elapsed_ms: float, ttl_ms: int) -> str | None:
    """Why a round that a majority answered was no grant, when it is not that another owner
    holds the lock (``None``): the answers came too late for the lease."""
    if len(tally.fences) >= quorum(tally.masters) and validity_ms(elapsed_ms, ttl_ms) <= 0:
        return (
            f"a majority granted it, but not in time: the round took {elapsed_ms:.0f} ms of "
            f"a {ttl_ms} ms lease; the masters answer too slowly for this TTL"
        )
    return None


def validity_ms(elapsed_ms: float, ttl_ms: int) -> float:
    return ttl_ms - elapsed_ms - drift_ms(ttl_ms)


def tally_acquire(replies: Sequence[object]) -> Tally:
    """Sort acquire-script replies (or the exceptions raised instead) by meaning."""
    granted: list[int | None] = []
    refused: list[int] = []
    errors: list[BaseException] = []
    answered: list[bool] = []
    unread: list[int] = []
    for index, reply in enumerate(replies):
        fence = None
        answered.append(not isinstance(reply, BaseException) and reply is not NOT_AWAITED)
        if reply is NOT_AWAITED:
            unread.append(index)
        elif isinstance(reply, BaseException):
            if not isinstance(reply, (*NETWORK_ERRORS, LockError)):
                raise reply
            errors.append(reply)
        elif isinstance(reply, list) and int(reply[0]) == 1:
            fence = int(reply[1])
        elif isinstance(reply, list) and int(reply[0]) == 0:
            refused.append(int(reply[1]))
        else:
            errors.append(LockError(f"unexpected reply {reply!r}"))
        granted.append(fence)
    return Tally(granted, refused, errors, len(replies), answered, unread)


def quorum_answer(answers: Sequence[bool | None]) -> bool | None:
    """Renewal across masters: kept by a majority (True), lost for good (False), or unknown."""
    needed = quorum(len(answers))
    if sum(1 for answer in answers if answer) >= needed:
        return True
    if sum(1 for answer in answers if answer is False) > len(answers) - needed:
        return False
    return None
