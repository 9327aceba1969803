"""One buyer process of the flash sale.

Buyers run as separate processes (not threads) because that is what a sale looks like:
many application servers, each with its own client, meeting only in Redis. Every buyer
connects, reports ready, waits for the common start signal (so slow interpreter start-up
does not decide the race), then buys until it sees the stock at zero, its attempts run
out, or the deadline passes.

When the stock is split into segments, a buyer goes round robin over the segments,
starting at its own index (so buyers spread out at once), and drops a segment from its
round when it finds it sold out; it stops when every segment is sold out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import redis

from redlease.demos.shop import Outcome, Shop, ShopKeys
from redlease.errors import LockTimeout
from redlease.sync.lock import Locks

__all__ = ["BuyerPlan", "BuyerReport", "buy_until_sold_out"]


class Outbox(Protocol):
    """The part of a ``multiprocessing`` queue a buyer uses."""

    def put(self, obj: Any, block: bool = ..., timeout: float | None = ...) -> None: ...


class StartSignal(Protocol):
    """The part of a ``multiprocessing`` event a buyer uses."""

    def wait(self, timeout: float | None = ...) -> bool: ...


@dataclass(frozen=True)
class BuyerPlan:
    """Everything a buyer process needs; it crosses the process boundary, so plain data only."""

    url: str
    run_id: str
    index: int
    attempts: int
    locked: bool
    hold: float
    seconds: float
    start_timeout: float = 60.0
    segments: int = 1


@dataclass(frozen=True)
class BuyerReport:
    """What one buyer did; ``finished_at`` is on the system-wide monotonic clock."""

    index: int
    attempts: int
    sold: int
    fenced_off: int
    out_of_time: bool
    finished_at: float
    error: str | None = None


def buy_until_sold_out(plan: BuyerPlan, outbox: Outbox, start: StartSignal) -> None:
    """Process entry: put ``("ready", index)``, then ``("done", BuyerReport)`` on ``outbox``."""
    client = redis.Redis.from_url(plan.url)
    try:
        client.ping()
        outbox.put(("ready", plan.index))
        if not start.wait(plan.start_timeout):
            return
        report = _shop_until_done(plan, client)
    except KeyboardInterrupt:
        return
    except Exception as error:
        report = BuyerReport(plan.index, 0, 0, 0, False, time.monotonic(), repr(error))
    finally:
        client.close()
    outbox.put(("done", report))


def _shop_until_done(plan: BuyerPlan, client: redis.Redis) -> BuyerReport:
    shop = Shop(client, ShopKeys(plan.run_id, plan.segments), hold=plan.hold)
    locks = Locks(client, prefix=shop.keys.lock_prefix) if plan.locked else None
    deadline = time.monotonic() + plan.seconds
    attempts = sold = fenced_off = 0
    out_of_time = False
    open_segments = list(range(plan.segments))
    turn = plan.index
    try:
        while attempts < plan.attempts and open_segments:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                out_of_time = True
                break
            attempts += 1
            segment = open_segments[turn % len(open_segments)]
            turn += 1
            order_id = f"buyer{plan.index}-{attempts}"
            try:
                outcome = _buy_once(shop, locks, order_id, remaining, segment)
            except LockTimeout:
                out_of_time = True
                break
            if outcome is Outcome.SOLD_OUT:
                open_segments.remove(segment)
                continue
            sold += outcome is Outcome.SOLD
            fenced_off += outcome is Outcome.FENCED_OFF
    finally:
        if locks is not None:
            locks.close()
    return BuyerReport(plan.index, attempts, sold, fenced_off, out_of_time, time.monotonic())


def _buy_once(
    shop: Shop, locks: Locks | None, order_id: str, timeout: float, segment: int
) -> Outcome:
    """One purchase from ``segment``, under that segment's lock if ``locks`` is given.

    Under the lock, the order and the stock write carry the lease's fence.
    """
    if locks is None:
        return shop.buy(order_id, segment=segment)
    with locks.lock(shop.keys.lock_name(segment), timeout=timeout) as lease:
        return shop.buy(f"{order_id}@{lease.fence}", lease=lease, segment=segment)
