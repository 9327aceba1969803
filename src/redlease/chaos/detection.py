"""How soon a holder is told that a fault took its lease away (detection latency).

Per injection into a worker with probe leases (:mod:`redlease.chaos.probes`), an
:class:`ExpiryWatch` follows each probe's lease key from just before the fault, on a
direct connection to the lock server: the owner's token and the key's expiry, read with
``PTTL`` every few milliseconds and dated from when the reading was *sent* (so never later
than the server's own expiry); the latest of those dates is kept, so a reading slowed on a
busy machine does not pull the expiry early. The lease could first be taken by another client at:

* its expiry on the server, when the holder could not renew it (a black hole, a
  partition, a slow link, a stalled server);
* the moment the server forgot it (``forgot_at``: a ``PEXPIRE``, a crash);
* and in either case not before the server could answer anyone again
  (``serving_again_at``: a stall, a pause, a restart).

Detection latency is the probe's ``lost`` event (logged from ``on_lost``) minus that
moment: zero or less means the holder was told before anyone else could hold the lease.
For :attr:`Detects.DEADLINE` faults that is the bound; for :attr:`Detects.FORGOTTEN`
faults (no client can know before its next renewal) the bound is the lease's local
deadline. A lease that never left its holder (the server kept renewing it) has nothing
to detect.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from redlease.chaos.fault import Detects

WATCH_POLL = 0.003
ERROR_PAUSE = 0.01
STOP_TIMEOUT = 15.0
BOUNDS = {
    Detects.DEADLINE: "<= 0 ms: told before another client could take the lease",
    Detects.FORGOTTEN: "by the lease's local deadline (the server forgot the lease)",
}


@dataclass
class KeyWatch:
    """What the watch saw of one probe's lease key."""

    key: str
    owner: bytes | None = None
    """The token at the first reading (None: no lease was held when the fault began)."""
    read: bool = False
    expiry: float | None = None
    """The latest expiry read while ``owner`` held the key (monotonic, dated by the send)."""
    gone_at: float | None = None
    """The first reading that found no key or another owner."""
    held_at: float | None = None
    """The latest reading that found ``owner`` still holding the key."""

    def survived(self, since: float) -> bool:
        """Whether ``owner`` kept the key through a fault at ``since``: read holding it
        after, never seen without it (a renewal that reached the server within the
        millisecond a ``PEXPIRE`` left extends the lease, and nobody could take it)."""
        return self.gone_at is None and self.held_at is not None and self.held_at > since


class ExpiryWatch:
    """A thread that reads the owner and expiry of some keys until stopped."""

    def __init__(self, connect: Callable[[], Any], keys: dict[str, str]) -> None:
        self.connect = connect
        self.keys = {flavour: KeyWatch(key) for flavour, key in keys.items()}
        self.stopping = threading.Event()
        self.first_read = threading.Event()
        self.first_read_at: float | None = None
        """When the first reading was sent: what the probes knew then is what the fault hit."""
        self.thread = threading.Thread(target=self._run, name="chaos-watch", daemon=True)

    def __enter__(self) -> ExpiryWatch:
        self.thread.start()
        self.first_read.wait(STOP_TIMEOUT)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join(STOP_TIMEOUT)

    def _run(self) -> None:
        client = self.connect()
        try:
            while not self.stopping.is_set():
                watching = [w for w in self.keys.values() if w.gone_at is None]
                if not watching:
                    break
                try:
                    sent = self._read(client, watching)
                except redis.RedisError:  # a restart or a stall: read again later
                    self.stopping.wait(ERROR_PAUSE)
                    continue
                if self.first_read_at is None:
                    self.first_read_at = sent
                self.first_read.set()
                self.stopping.wait(WATCH_POLL)
        finally:
            self.first_read.set()
            client.close()

    @staticmethod
    def _read(client: Any, watching: list[KeyWatch]) -> float:
        pipe = client.pipeline(transaction=True)
        for watch in watching:
            pipe.get(watch.key)
            pipe.pttl(watch.key)
        sent = time.monotonic()
        replies = pipe.execute()
        for index, watch in enumerate(watching):
            owner, pttl = replies[2 * index], int(replies[2 * index + 1])
            if not watch.read:
                watch.read, watch.owner = True, owner
            if watch.owner is None or owner != watch.owner or pttl < 0:
                watch.gone_at = sent
            else:  # each reading bounds the expiry from below: keep the tightest
                watch.held_at = sent
                expiry = sent + pttl / 1000
                watch.expiry = expiry if watch.expiry is None else max(watch.expiry, expiry)
        return sent

    def unresolved(
        self, lost: dict[str, dict[str, Any] | None], forgot_at: float | None
    ) -> list[str]:
        """Flavours whose lease went away (or was forgotten) but whose loss is not logged."""
        return [
            flavour
            for flavour, watch in self.keys.items()
            if watch.owner is not None
            and (
                watch.gone_at is not None
                or (forgot_at is not None and not watch.survived(forgot_at))
            )
            and lost.get(flavour) is None
        ]


def measure(
    detects: Detects,
    flavour: str,
    watch: KeyWatch,
    lost: dict[str, Any] | None,
    *,
    forgot_at: float | None,
    serving_again_at: float,
    known_lost: bool = False,
) -> dict[str, Any]:
    """One probe's record for one injection: when it could be taken, when it was told.

    ``known_lost``: the probe's holder had been told its lease was lost (a renewal late on a
    busy machine) and had not taken a new one yet when the fault began; the key the watch
    saw was that lease's remains, which the holder has nothing more to learn about.
    """
    record: dict[str, Any] = {"flavour": flavour}
    if watch.owner is None:
        return {**record, "skipped": "the probe held no lease when the fault began", "met": True}
    if known_lost:
        skipped = "the probe's holder knew its lease lost before the fault began"
        return {**record, "skipped": skipped, "met": True}
    if forgot_at is not None and watch.survived(forgot_at):
        base = None
    else:
        base = forgot_at if forgot_at is not None else watch.expiry if watch.gone_at else None
    if lost is not None:
        record["lost_reason"] = lost.get("reason")
    if base is None:
        return {**record, "held": True, "told": lost is not None, "ms": None, "met": True}
    available = max(base, serving_again_at)
    if lost is None:
        return {**record, "held": False, "told": False, "ms": None, "met": False}
    told = float(lost["t"])
    deadline = float(lost.get("deadline") or told)
    met = told <= available if detects is Detects.DEADLINE else told <= deadline
    return {
        **record,
        "held": False,
        "told": True,
        "ms": round((told - available) * 1000, 1),
        "after_deadline_ms": round((told - deadline) * 1000, 1),
        "met": met,
    }


def summarize(detects: Detects, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The scenario's detection: worst latency per flavour, the bound, whether it held.

    ``not_told`` counts leases that went away without their holder being told at all
    within the harness's wait: worse than any latency in ``worst_ms``.
    ``after_deadline_worst_ms``: how late, at worst, ``on_lost`` came after the lease's own
    local deadline (the margin to the server's expiry is the library's drift allowance).
    """
    worst: dict[str, float] = {}
    late: dict[str, float] = {}
    for record in records:
        flavour, value = record["flavour"], record.get("ms")
        if value is not None:
            worst[flavour] = max(value, worst.get(flavour, value))
            lag = record["after_deadline_ms"]
            late[flavour] = max(lag, late.get(flavour, lag))
    return {
        "kind": detects.value,
        "bound": BOUNDS[detects],
        "worst_ms": worst,
        "after_deadline_worst_ms": late,
        "not_told": sum(1 for r in records if r.get("told") is False and not r.get("held")),
        "met": all(record["met"] for record in records),
        "each": records,
    }
