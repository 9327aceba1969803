"""One buyer process of the flash sale.

Buyers run as separate processes (not threads) because that is what a sale looks like:
many application servers, each with its own client, meeting only in Redis. Each is a job
of the demo's crew (:mod:`redlease.demos.crew`), let loose together with the others; it
buys until it sees the stock at zero, its attempts run out, or the deadline passes.

When the stock is split into segments, a buyer goes round robin over the segments,
starting at its own index (so buyers spread out at once), and drops a segment from its
round when it finds it sold out; it stops when every segment is sold out.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from redlease.demos.crew import Worker
from redlease.demos.shop import Outcome, Shop, ShopKeys
from redlease.errors import LockTimeout
from redlease.sync.lock import Locks

__all__ = ["BuyerPlan", "buy_until_sold_out"]


@dataclass(frozen=True)
class BuyerPlan:
    """Everything a buyer needs; it crosses the process boundary, so plain data only."""

    keys: ShopKeys
    attempts: int
    locked: bool
    hold: float
    seconds: float


def buy_until_sold_out(plan: BuyerPlan, worker: Worker) -> dict[str, Any]:
    """The job of one buyer: its attempts, items sold and fenced-off writes."""
    shop = Shop(worker.client, plan.keys, hold=plan.hold)
    locks = Locks(worker.client, prefix=plan.keys.run.lock_prefix) if plan.locked else None
    deadline = time.monotonic() + plan.seconds
    attempts = sold = fenced_off = 0
    out_of_time = False
    open_segments = list(range(plan.keys.segments))
    turn = worker.index
    try:
        while attempts < plan.attempts and open_segments:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                out_of_time = True
                break
            attempts += 1
            segment = open_segments[turn % len(open_segments)]
            turn += 1
            order_id = f"buyer{worker.index}-{attempts}"
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
    return {
        "attempts": attempts,
        "sold": sold,
        "fenced_off": fenced_off,
        "out_of_time": out_of_time,
    }


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
