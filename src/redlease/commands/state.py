"""What the server says about a lock name: who holds it, how long for, who waits.

Everything is read in one script per name, so a snapshot is consistent (one instant on
the server's clock) and works on a Redis Cluster, where all keys of a name share a slot.
Nothing here writes except :func:`evict`, the forced release.

What the server cannot tell: a fair lock looks like a plain one (fairness is the
client's choice at acquire time), a reader of a read-write lock looks like a permit of a
semaphore (both are members of the ``holders`` sorted set) unless a writer is involved,
no lease records when it began (so there is no age), and reentry counts live only in the
holding process.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from redis.exceptions import AskError, MovedError, ResponseError

from redlease.commands.common import UsageError
from redlease.core.claims import split_lease_value
from redlease.errors import ServerRefused
from redlease.keys import LockKeys
from redlease.scripts import ScriptName

__all__ = ["Holder", "LockState", "evict", "names", "parse_token", "snapshot", "snapshots"]

SCAN_COUNT = 1000
FENCE_SUFFIX = "}:fence"
QUEUE_SHOWN = 100


@dataclass(frozen=True)
class Holder:
    """One lease on a name: who holds it (parsed from its token) and for how much longer.

    ``kind`` is ``lock`` (a plain or fair lock), ``rw-write``, ``rw-read`` (a reader, known
    to be one because a writer holds or waits), or ``shared`` (a reader or a semaphore
    permit: the server stores both alike).
    """

    kind: str
    token: str
    host: str | None
    pid: int | None
    thread: str | None
    ttl_s: float | None

    def describe(self) -> str:
        """``host:pid owner`` (``web-3:4121 thread MainThread``), or the token as it is."""
        if self.host is None:
            return _printable(self.token)
        who = f"{self.host}:{self.pid}" if self.pid is not None else self.host
        return _printable(f"{who} {self.thread}" if self.thread else who)

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "label": self.describe()}


@dataclass(frozen=True)
class LockState:
    """Everything the server knows about one lock name at one instant."""

    name: str
    fence: int | None
    """The current holder's fencing token, for a held lock; otherwise the last token the
    name's cluster slot handed out (the counter the slot's names share)."""
    waiters: int
    """Queue entries; a waiter that left is only removed when the lock would reach it."""
    holders: list[Holder] = field(default_factory=list)
    latch_count: int | None = None
    latch_ttl_s: float | None = None
    queued: list[Holder] = field(default_factory=list)
    slot_counter: int | None = None
    """The fencing counter of the name's cluster slot: it grows with every grant there."""

    @property
    def held(self) -> bool:
        return bool(self.holders) or self.latch_count is not None

    @property
    def kinds(self) -> list[str]:
        kinds = [holder.kind for holder in self.holders]
        if self.latch_count is not None:
            kinds.append("latch")
        return list(dict.fromkeys(kinds)) or ["free"]

    def as_json(self, *, waiting: bool = False) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "kinds": self.kinds,
            "fence": self.fence,
            "waiters": self.waiters,
            "holders": [holder.as_json() for holder in self.holders],
        }
        if self.latch_count is not None:
            data["latch"] = {"count": self.latch_count, "ttl_s": self.latch_ttl_s}
        if waiting:
            data["queued"] = [holder.as_json() for holder in self.queued]
        return data


def parse_token(token: str) -> tuple[str | None, int | None, str | None]:
    """``<random>|<host>|<pid>|<owner>`` as written by redlease: (host, pid, owner).

    The owner comes last and is the caller's text (``owner=``, a thread's name), so it may
    hold ``|`` itself: the token is cut from the left. A token from a custom
    ``token_factory`` or another program without that shape (no number where the pid
    goes) gives ``(None, None, None)``.
    """
    parts = token.split("|", 3)
    if len(parts) < 4:
        return None, None, None
    _, host, pid, owner = parts
    if not _is_pid(pid):  # a token_factory that writes "|" itself: cut from the right
        host, pid, owner = token.rsplit("|", 3)[1:]
    if not _is_pid(pid):  # no redlease tail: another program's value
        return None, None, None
    return host, int(pid), _readable_owner(owner) or None


PID_DIGITS = 19
"""Longer is no process id (and ``int()`` refuses past 4,300 digits)."""


def _is_pid(text: str) -> bool:
    """ASCII digits only: ``isdigit()`` alone takes ``²`` and ``٣``, which ``int()`` refuses
    or no process id is written with."""
    return text.isascii() and text.isdigit() and len(text) <= PID_DIGITS


def _readable_owner(owner: str) -> str:
    """An owner written by an older redlease as ``owner <object object at 0x7f…>``: shorter.

    The default repr of an object is long and says nothing but its address; the type and
    the address's last six hex digits tell two owners apart just as well.
    """
    return _DEFAULT_REPR.sub(lambda found: f"{found[1]}#{found[2][-6:]}", owner)


_DEFAULT_REPR = re.compile(r"<(?:[\w.]+\.)?(\w+) object at 0x([0-9a-fA-F]+)>")


def _printable(text: str) -> str:
    """No control characters in a table cell: a newline in an owner must not break a row."""
    return "".join(char if char.isprintable() else "?" for char in text)


def names(client: Any, prefix: str, pattern: str = "*") -> list[str]:
    """Sorted names under ``prefix`` matching the glob ``pattern``, found with SCAN.

    ``pattern`` is a Redis glob (``*``, ``?``, ``[...]``, ``\\``), matched by SCAN's MATCH
    against ``<prefix>:{<pattern>}*``. On a cluster client, redis-py's ``scan_iter`` walks
    every primary in turn.
    """
    match = f"{_glob_escape(prefix)}:{{{pattern}}}*"
    keys: Iterable[Any]
    if hasattr(client, "get_primaries"):
        keys = client.scan_iter(match=match, count=SCAN_COUNT, target_nodes=client.PRIMARIES)
    else:
        keys = client.scan_iter(match=match, count=SCAN_COUNT)
    return sorted(set(_names_of(keys, f"{prefix}:{{")))


def snapshot(client: Any, keys: LockKeys) -> LockState:
    """One consistent reading of every key of ``keys.name``."""
    with refusals(f"read lock {keys.name!r}"):
        return _state(keys, client.eval(ScriptName.SNAPSHOT.source, *_snapshot_args(keys)))


def snapshots(client: Any, many: list[LockKeys]) -> list[LockState]:
    """:func:`snapshot` of every name in one pipeline: one round trip (per master)."""
    if not many:
        return []
    pipe = client.pipeline(transaction=False)
    for keys in many:  # a cluster pipeline has no eval(); it routes EVAL by its keys
        pipe.execute_command("EVAL", ScriptName.SNAPSHOT.source, *_snapshot_args(keys))
    with refusals("read the locks"):
        replies = pipe.execute()
    return [_state(keys, reply) for keys, reply in zip(many, replies, strict=True)]


@contextmanager
def refusals(action: str) -> Iterator[None]:
    """A command the server answered with an error: :class:`ServerRefused` (an ACL
    permission, also one a script needs, which some servers do not name), or, for a slot
    that lives on another node, a cluster node the tool was not told of (``--cluster``)."""
    try:
        yield
    except (MovedError, AskError) as exc:
        raise UsageError(
            f"the server is a node of a Redis Cluster that does not say so (INFO is not "
            f"allowed): pass --cluster ({exc})"
        ) from exc
    except ResponseError as exc:
        raise ServerRefused(f"the server refused to {action}: {exc}") from exc


def _snapshot_args(keys: LockKeys) -> tuple[Any, ...]:
    return (
        6,
        keys.lease,
        keys.fence,
        keys.queue,
        keys.holders,
        keys.writer,
        keys.count,
        QUEUE_SHOWN,
    )


def _state(keys: LockKeys, reply: Any) -> LockState:
    (now, lease, lease_pttl, fence, queue_length, queue, shared, writer, writer_pttl) = reply[:9]
    count, count_pttl = reply[9:11]
    queued = [_waiter(_text(entry)) for entry in queue]
    writer_involved = writer is not None or any(entry.kind == "rw-write" for entry in queued)
    holders: list[Holder] = []
    holder_fence = None
    if lease is not None:
        holder_fence, token = split_lease_value(_text(lease))
        holders.append(_holder("lock", token, _seconds(lease_pttl)))
    if writer is not None:
        holders.append(_holder("rw-write", _text(writer), _seconds(writer_pttl)))
    shared_kind = "rw-read" if writer_involved else "shared"
    for token, expiry in zip(shared[::2], shared[1::2], strict=True):
        holders.append(_holder(shared_kind, _text(token), (int(expiry) - int(now)) / 1000))
    if not writer_involved:
        queued = [_retyped(entry) for entry in queued]
    counter = int(fence) if fence is not None and _text(fence).isdigit() else None
    return LockState(
        name=keys.name,
        fence=holder_fence if holder_fence is not None else counter,
        slot_counter=counter,
        waiters=int(queue_length),
        holders=holders,
        latch_count=int(count) if count is not None and _is_int(_text(count)) else None,
        latch_ttl_s=_seconds(count_pttl),
        queued=queued,
    )


def evict(client: Any, keys: LockKeys) -> list[Holder]:
    """Delete the lease, writer and holders of ``keys.name`` at once and wake its waiters;
    return who held them."""
    with refusals(f"release lock {keys.name!r}"):
        lease, writer, shared = client.eval(
            ScriptName.EVICT.source,
            4,
            keys.lease,
            keys.writer,
            keys.holders,
            keys.queue,
            keys.wake_prefix,
        )
    evicted = [_holder("lock", split_lease_value(_text(lease))[1], None)] if lease else []
    if writer is not None:
        evicted.append(_holder("rw-write", _text(writer), None))
    evicted.extend(_holder("shared", _text(token), None) for token in shared)
    return evicted


def _names_of(keys: Iterable[Any], start: str) -> Iterator[str]:
    for key in keys:
        text = _text(key)
        if not text.startswith(start) or text.endswith(FENCE_SUFFIX):
            continue  # a slot's fencing counter, not a lock: its tag is no lock name
        end = text.find("}", len(start))
        if end > len(start):
            yield text[len(start) : end]


def _holder(kind: str, token: str, ttl_s: float | None) -> Holder:
    host, pid, owner = parse_token(token)
    return Holder(kind, token, host, pid, owner, ttl_s)


def _waiter(entry: str) -> Holder:
    """A queue entry: ``<ttl>:<client>:<token>`` (a lock) or ``<r|w>:<ttl>:<client>:<token>``
    (shared)."""
    kind = "lock"
    if entry[:2] in ("r:", "w:"):
        kind = "rw-write" if entry[0] == "w" else "rw-read"
        entry = entry[2:]
    _, _, rest = entry.partition(":")
    _, _, token = rest.partition(":")
    return _holder(kind, token, None)


def _retyped(waiter: Holder) -> Holder:
    if waiter.kind != "rw-read":
        return waiter
    return Holder("shared", waiter.token, waiter.host, waiter.pid, waiter.thread, None)


def _seconds(pttl: Any) -> float | None:
    value = int(pttl)
    return value / 1000 if value >= 0 else None


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _glob_escape(text: str) -> str:
    """Escape the characters Redis's MATCH treats as glob syntax."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)
