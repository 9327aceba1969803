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
from collections.abc import Callable
from dataclasses import dataclass

import redis

from redlease.core.lease import Lease
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
    """The keys of one run, unique to it so that concurrent runs on one server never mix.

    The shop's keys share one hash tag, so the fenced write stays a single-slot script on a
    Redis Cluster too; the lock's keys live under ``lock_prefix`` and are tagged by redlease.

    With ``segments`` > 1 the stock is split: segment ``i`` has its own stock key
    ``stock:i``, sold counter ``sold:i`` and lock ``flash-sale:stock:i``, so purchases from
    different segments never wait for each other. One segment keeps the unsplit names.
    """

    run_id: str
    segments: int = 1

    @property
    def base(self) -> str:
        return f"redlease-demo:{{flash-sale:{self.run_id}}}"

    @property
    def stock(self) -> str:
        return f"{self.base}:stock"

    @property
    def sold(self) -> str:
        return f"{self.base}:sold"

    @property
    def orders(self) -> str:
        return f"{self.base}:orders"

    @property
    def fence(self) -> str:
        """Where :class:`~redlease.RedisGuard` records the newest fence it accepted."""
        return f"{self.stock}:fence"

    def segment_stock(self, segment: int) -> str:
        return self.stock if self.segments == 1 else f"{self.stock}:{segment}"

    def segment_sold(self, segment: int) -> str:
        return self.sold if self.segments == 1 else f"{self.sold}:{segment}"

    def segment_fence(self, segment: int) -> str:
        return f"{self.segment_stock(segment)}:fence"

    def lock_name(self, segment: int) -> str:
        """The lock of one segment: ``flash-sale:stock``, or ``flash-sale:stock:i`` if split."""
        return LOCK_NAME if self.segments == 1 else f"{LOCK_NAME}:{segment}"

    @property
    def lock_prefix(self) -> str:
        return f"redlease-demo:flash-sale:{self.run_id}"

    @property
    def pattern(self) -> str:
        """Matches every key of the run: the shop's and the lock's."""
        return f"redlease-demo:*{self.run_id}*"


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
            pipe.delete(self.keys.sold, self.keys.orders)
            for segment, size in enumerate(split_stock(stock, self.keys.segments)):
                pipe.delete(self.keys.segment_sold(segment), self.keys.segment_fence(segment))
                pipe.set(self.keys.segment_stock(segment), size)
            pipe.execute()

    def buy(self, order_id: str, lease: Lease | None = None, segment: int = 0) -> Outcome:
        """Read, check, work, write: atomic only if the caller holds the lock around it.

        Under a lease the shop first records the lease's fence (``claim``), so a holder
        whose lease ended cannot slip a stale write in between this read and this write.
        """
        stock_key = self.keys.segment_stock(segment)
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
            pipe.incr(self.keys.sold)
            if self.keys.segments > 1:
                pipe.incr(self.keys.segment_sold(segment))
            pipe.rpush(self.keys.orders, order_id)
            pipe.execute()
        return Outcome.SOLD

    def sold(self) -> int:
        return int(self.client.get(self.keys.sold) or 0)

    def stock_left(self) -> int:
        return sum(self.stock_left_by_segment())

    def stock_left_by_segment(self) -> list[int]:
        return self._counts(self.keys.segment_stock)

    def sold_by_segment(self) -> list[int]:
        return self._counts(self.keys.segment_sold)

    def _counts(self, key_of: Callable[[int], str]) -> list[int]:
        keys = [key_of(segment) for segment in range(self.keys.segments)]
        return [int(value or 0) for value in self.client.mget(keys)]

    def orders(self) -> int:
        return int(self.client.llen(self.keys.orders))

    def remove(self) -> None:
        """Delete every key of the run, the lock's included, so a run leaves nothing behind."""
        batch: list[str | bytes] = []
        for key in self.client.scan_iter(match=self.keys.pattern, count=1000):
            batch.append(key)
            if len(batch) >= 500:
                self.client.unlink(*batch)
                batch.clear()
        if batch:
            self.client.unlink(*batch)


def split_stock(stock: int, segments: int) -> list[int]:
    """``stock`` items over ``segments`` segments, as even as it goes (the first get more)."""
    share, extra = divmod(stock, segments)
    return [share + (segment < extra) for segment in range(segments)]
