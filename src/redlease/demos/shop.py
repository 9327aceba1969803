"""The flash sale's shop: a stock in Redis and the read-check-write purchase of one buyer.

A purchase reads the stock, checks that some is left, works a little, writes stock - 1
and records the order. Between the read and the write another buyer can do the same, so
two buyers sell the last item twice: the race the demo makes visible. Under the lock the
stock write is also *fenced*: the shop keeps the highest fence it has accepted and refuses
an older one, so a buyer whose lease ended while it worked (paused, slow) cannot write a
stale stock over a newer one. The lock makes the race impossible; the fence makes a lease
that ran out harmless.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

import redis

from redlease.core.lease import Lease
from redlease.demos.namespace import RunKeys
from redlease.errors import FenceRejected
from redlease.fencing import RedisGuard

__all__ = ["LOCK_NAME", "Outcome", "Shop", "ShopKeys", "split_stock"]

LOCK_NAME = "flash-sale:stock"


class Outcome(enum.Enum):
    """What one purchase attempt came to."""

    SOLD = "sold"
    SOLD_OUT = "sold_out"
    FENCED_OFF = "fenced_off"


@dataclass(frozen=True)
class ShopKeys:
    """The shop's keys, under the run's own namespace (see :class:`RunKeys`).

    With ``segments`` > 1 the stock is split: segment ``i`` has its own stock key
    ``stock:i``, sold counter ``sold:i`` and lock ``flash-sale:stock:i``, so purchases from
    different segments never wait for each other. One segment keeps the unsplit names.
    """

    run: RunKeys
    segments: int = 1

    def key(self, name: str, segment: int | None = None) -> str:
        """``stock``, ``sold`` or ``orders`` of the shop, or ``stock``/``sold`` of a segment."""
        if segment is None or self.segments == 1:
            return self.run.key(name)
        return self.run.key(name, segment)

    def fence(self, segment: int) -> str:
        """Where :class:`~redlease.RedisGuard` records the newest fence the segment accepted."""
        return f"{self.key('stock', segment)}:fence"

    def lock_name(self, segment: int) -> str:
        """The lock of one segment: ``flash-sale:stock``, or ``flash-sale:stock:i`` if split."""
        return LOCK_NAME if self.segments == 1 else f"{LOCK_NAME}:{segment}"


class Shop:
    """The stock and the order book of one run, as each process sees them through ``client``."""

    def __init__(self, client: redis.Redis, keys: ShopKeys, hold: float = 0.0) -> None:
        self.client = client
        self.keys = keys
        self.hold = hold
        self._guard = RedisGuard(client)

    def open(self, stock: int) -> None:
        """Put ``stock`` items on sale (split over the segments), no orders, no fence seen."""
        with self.client.pipeline() as pipe:
            pipe.delete(self.keys.key("sold"), self.keys.key("orders"))
            for segment, size in enumerate(split_stock(stock, self.keys.segments)):
                pipe.delete(self.keys.key("sold", segment), self.keys.fence(segment))
                pipe.set(self.keys.key("stock", segment), size)
            pipe.execute()

    def buy(self, order_id: str, lease: Lease | None = None, segment: int = 0) -> Outcome:
        """Read, check, work, write: atomic only if the caller holds the lock around it.

        Under a lease the shop first records the lease's fence (``claim``), so a holder
        whose lease ended cannot slip a stale write in between this read and this write.
        """
        stock_key = self.keys.key("stock", segment)
        if lease is not None:
            try:
                self._guard.claim(lease, stock_key)
            except FenceRejected:
                return Outcome.FENCED_OFF
        stock = int(self.client.get(stock_key) or 0)
        if stock <= 0:
            return Outcome.SOLD_OUT
        if self.hold > 0:
            time.sleep(self.hold)
        if lease is None:
            self.client.set(stock_key, stock - 1)
        else:
            try:
                self._guard.set(lease, stock_key, stock - 1)
            except FenceRejected:
                return Outcome.FENCED_OFF
        with self.client.pipeline(transaction=False) as pipe:
            pipe.incr(self.keys.key("sold"))
            if self.keys.segments > 1:
                pipe.incr(self.keys.key("sold", segment))
            pipe.rpush(self.keys.key("orders"), order_id)
            pipe.execute()
        return Outcome.SOLD

    def sold(self) -> int:
        return int(self.client.get(self.keys.key("sold")) or 0)

    def by_segment(self, name: str) -> list[int]:
        """The ``stock`` left or the items ``sold`` in each segment."""
        keys = [self.keys.key(name, segment) for segment in range(self.keys.segments)]
        return [int(value or 0) for value in self.client.mget(keys)]

    def orders(self) -> int:
        return int(self.client.llen(self.keys.key("orders")))


def split_stock(stock: int, segments: int) -> list[int]:
    """``stock`` items over ``segments`` segments, as even as it goes (the first get more)."""
    share, extra = divmod(stock, segments)
    return [share + (segment < extra) for segment in range(segments)]
