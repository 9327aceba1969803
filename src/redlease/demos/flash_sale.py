"""The flash sale: N buyer processes race for M items, with and without the lock.

Without the lock the read-check-write of a purchase interleaves between processes and the
shop sells more than it has; with ``locks.lock("flash-sale:stock")`` around it the sale
ends at exactly M orders. The defaults (100 items, 8 buyers, 1 ms of work between the
read and the write) make the oversell show up on every run, even on two cores.

``--segments N`` splits the stock into N segments, each with its own stock key and its own
lock ``flash-sale:stock:i``: the fix for one hot lock. Buyers of different segments no
longer wait for each other, so the locked sale gets faster with N, and still never
oversells, because every segment is still sold under its lock.
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

import redis

from redlease.commands.common import UsageError
from redlease.demos import display
from redlease.demos.base import (
    MAX_WORKERS,
    Demo,
    DemoFailed,
    finish,
    non_negative_float,
    positive_float,
    positive_int,
    reachable_server,
    worker_count,
)
from redlease.demos.buyer import BuyerPlan, BuyerReport, buy_until_sold_out
from redlease.demos.shop import Shop, ShopKeys, split_stock

__all__ = ["DEMO", "SaleResult", "SaleSettings", "run_sale"]

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from typing import TypeAlias

    Outbox: TypeAlias = Queue[tuple[str, Any]]

MAX_SEGMENTS = 1024
POLL_INTERVAL = 0.05
START_TIMEOUT = 60.0
STOP_GRACE = 10.0


@dataclass(frozen=True)
class SaleSettings:
    stock: int = 100
    workers: int = 8
    attempts: int | None = None
    locked: bool = True
    hold_ms: float = 1.0
    seconds: float = 60.0
    segments: int = 1

    @property
    def attempts_per_worker(self) -> int:
        """By default a buyer may win every item, plus find each segment sold out once."""
        return self.attempts if self.attempts is not None else self.stock + self.segments


@dataclass(frozen=True)
class SaleResult:
    """The figures of one sale; ``oversold`` counts orders beyond the stock, never negative.

    With segments, ``oversold`` adds up each segment's orders beyond its own stock, and
    ``segment_stock`` / ``segment_sold`` give the stock put on sale and the orders per segment.
    """

    stock: int
    sold: int
    oversold: int
    workers: int
    seconds: float
    locked: bool
    buys_per_s: float
    stock_left: int
    attempts: int
    fenced_off: int
    out_of_time: bool
    segments: int
    segment_stock: list[int]
    segment_sold: list[int]


def run_sale(
    url: str, settings: SaleSettings, on_progress: Callable[[int], None] = lambda sold: None
) -> SaleResult:
    """Open a shop under a fresh key namespace, let the buyers loose, and count; always clean up."""
    _check_segments(settings)
    client = redis.Redis.from_url(url)
    shop = Shop(client, ShopKeys(uuid.uuid4().hex[:12], settings.segments))
    context = multiprocessing.get_context("spawn")
    outbox: Outbox = context.Queue()
    start = context.Event()
    buyers = [
        context.Process(
            target=buy_until_sold_out,
            args=(_plan(url, shop.keys.run_id, index, settings), outbox, start),
            name=f"redlease-flash-sale-buyer-{index}",
            daemon=True,
        )
        for index in range(settings.workers)
    ]
    try:
        shop.open(settings.stock)
        for buyer in buyers:
            buyer.start()
        _await_ready(buyers, outbox)
        started = time.monotonic()
        start.set()
        limit = settings.seconds + STOP_GRACE
        reports = _supervise(buyers, outbox, lambda: on_progress(shop.sold()), limit)
        return _result(settings, shop, reports, started)
    finally:
        for buyer in buyers:
            if buyer.is_alive():
                buyer.kill()
                buyer.join()
        outbox.close()
        shop.remove()
        client.close()


def _check_segments(settings: SaleSettings) -> None:
    if settings.segments > settings.stock:
        raise UsageError(
            f"--segments {settings.segments} is more than the {settings.stock} items on sale"
        )


def _plan(url: str, run_id: str, index: int, settings: SaleSettings) -> BuyerPlan:
    return BuyerPlan(
        url=url,
        run_id=run_id,
        index=index,
        attempts=settings.attempts_per_worker,
        locked=settings.locked,
        hold=settings.hold_ms / 1000,
        seconds=settings.seconds,
        start_timeout=START_TIMEOUT,
        segments=settings.segments,
    )


def _await_ready(buyers: Sequence[BaseProcess], outbox: Outbox) -> None:
    """Wait until every buyer is connected, so the race starts for all at once."""
    deadline = time.monotonic() + START_TIMEOUT
    ready = 0
    while ready < len(buyers):
        if time.monotonic() > deadline:
            raise DemoFailed(
                f"only {ready} of {len(buyers)} buyers started within {START_TIMEOUT:g} s"
            )
        try:
            kind, _ = outbox.get(timeout=POLL_INTERVAL)
        except queue.Empty:
            dead = [buyer.name for buyer in buyers if buyer.exitcode is not None]
            if dead:
                raise DemoFailed(
                    f"buyer processes exited before the start: {', '.join(dead)}"
                ) from None
            continue
        ready += kind == "ready"


def _supervise(
    buyers: Sequence[BaseProcess], outbox: Outbox, tick: Callable[[], None], limit: float
) -> list[BuyerReport]:
    """Collect the buyers' reports while they run, calling ``tick`` between polls.

    Reading while they run matters: a process that put something on a queue does not exit
    until the reader has taken it off the pipe.
    """
    deadline = time.monotonic() + limit
    reports: list[BuyerReport] = []
    while len(reports) < len(buyers):
        if time.monotonic() > deadline:
            raise DemoFailed(f"buyers still running {limit:g} s after the start")
        try:
            kind, payload = outbox.get(timeout=POLL_INTERVAL)
        except queue.Empty:
            if not any(buyer.is_alive() for buyer in buyers):
                break
        else:
            if kind == "done":
                reports.append(payload)
        tick()
    tick()
    return reports


def _result(
    settings: SaleSettings, shop: Shop, reports: list[BuyerReport], started: float
) -> SaleResult:
    failures = [f"buyer {report.index}: {report.error}" for report in reports if report.error]
    if len(reports) < settings.workers:
        failures.append(f"{settings.workers - len(reports)} buyer(s) exited without a report")
    if failures:
        raise DemoFailed("the sale did not finish: " + "; ".join(failures))
    sold = shop.orders()
    segment_stock = split_stock(settings.stock, settings.segments)
    segment_sold = shop.sold_by_segment()
    oversold = sum(
        max(done - size, 0) for done, size in zip(segment_sold, segment_stock, strict=True)
    )
    finished = max((report.finished_at for report in reports), default=time.monotonic())
    seconds = max(finished - started, 1e-9)
    return SaleResult(
        stock=settings.stock,
        sold=sold,
        oversold=max(oversold, sold - settings.stock, 0),
        workers=settings.workers,
        seconds=round(seconds, 4),
        locked=settings.locked,
        buys_per_s=round(sold / seconds, 1),
        stock_left=shop.stock_left(),
        attempts=sum(report.attempts for report in reports),
        fenced_off=sum(report.fenced_off for report in reports),
        out_of_time=any(report.out_of_time for report in reports),
        segments=settings.segments,
        segment_stock=segment_stock,
        segment_sold=segment_sold,
    )


def _configure(parser: argparse.ArgumentParser) -> None:
    defaults = SaleSettings()
    parser.add_argument(
        "--stock",
        type=positive_int,
        default=defaults.stock,
        metavar="M",
        help="items on sale (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=worker_count,
        default=defaults.workers,
        metavar="N",
        help=f"buyer processes, at most {MAX_WORKERS} (default: %(default)s)",
    )
    parser.add_argument(
        "--attempts",
        "--buyers-per-worker",
        dest="attempts",
        type=positive_int,
        metavar="K",
        help="purchase attempts per buyer process (default: stock + 1)",
    )
    parser.add_argument(
        "--segments",
        type=_segment_count,
        default=defaults.segments,
        metavar="N",
        help="split the stock into N segments, each under its own lock "
        "flash-sale:stock:i (default: %(default)s, one lock for the whole stock)",
    )
    parser.add_argument(
        "--no-lock",
        dest="locked",
        action="store_false",
        help="buy without the lock, to see the oversell",
    )
    parser.add_argument(
        "--hold-ms",
        type=non_negative_float,
        default=defaults.hold_ms,
        metavar="X",
        help="work between reading and writing the stock, in "
        "milliseconds; it widens the race window (default: %(default)s)",
    )
    parser.add_argument(
        "--seconds",
        type=positive_float,
        default=defaults.seconds,
        metavar="S",
        help="stop buying after this long (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the figures instead of the table",
    )


def _segment_count(text: str) -> int:
    count = positive_int(text)
    if count > MAX_SEGMENTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SEGMENTS} segments, got {count}")
    return count


def _run(args: argparse.Namespace) -> int:
    settings = SaleSettings(
        stock=args.stock,
        workers=args.workers,
        attempts=args.attempts,
        locked=args.locked,
        hold_ms=args.hold_ms,
        seconds=args.seconds,
        segments=args.segments,
    )
    _check_segments(settings)
    with (
        reachable_server(args.url) as url,
        display.progress("sold", settings.stock, enabled=not args.json) as update,
    ):
        result = run_sale(url, settings, update)
    violation = (
        f"oversold {result.oversold} items with the lock on"
        if (result.locked and result.oversold)
        else None
    )
    return finish(result, args.json, _show, violation)


def _show(result: SaleResult) -> None:
    rows = [
        ("lock", "on" if result.locked else "off"),
        ("stock", str(result.stock)),
        ("sold", str(result.sold)),
        ("oversold", str(result.oversold)),
        ("stock left", str(result.stock_left)),
        ("segments", str(result.segments)),
        ("workers", str(result.workers)),
        ("attempts", str(result.attempts)),
        ("fenced off", str(result.fenced_off)),
        ("seconds", f"{result.seconds:.3f}"),
        ("throughput", f"{result.buys_per_s:,.0f} buys/s"),
    ]
    if result.segments > 1:
        rows.insert(6, ("sold per segment", _per_segment(result)))
    display.summary_table("flash sale", rows)
    print(_verdict(result))


def _per_segment(result: SaleResult) -> str:
    """``25/25 25/25 ...``: orders over stock per segment, cut short for many segments."""
    pairs = [
        f"{done}/{size}"
        for done, size in zip(result.segment_sold, result.segment_stock, strict=True)
    ]
    return " ".join(pairs) if len(pairs) <= 8 else " ".join(pairs[:8]) + " ..."


def _verdict(result: SaleResult) -> str:
    if result.oversold:
        return (
            f"Oversold: {result.sold} orders for {result.stock} items; "
            f"{result.oversold} orders are for items that never existed."
        )
    if result.sold < result.stock:
        return (
            f"Stopped early: {result.sold} of {result.stock} items sold (attempts or time ran out)."
        )
    if result.segments > 1:
        return (
            f"Sold exactly {result.stock} of {result.stock}: each of the {result.segments} "
            "segment locks serialized the purchases of its segment."
        )
    return f"Sold exactly {result.stock} of {result.stock}: the lock serialized every purchase."


DEMO = Demo(
    name="flash-sale",
    summary="buyer processes race for a limited stock; the lock stops the oversell",
    description=(
        "N buyer processes race for M items. Each purchase reads the stock, checks it,\n"
        "works for --hold-ms, then writes stock - 1 and records the order. Without the\n"
        "lock the purchases interleave and the shop sells more than it has; with\n"
        'locks.lock("flash-sale:stock") around each purchase it sells exactly M, and the\n'
        "stock write is checked against the lease's fencing token. --segments N splits the\n"
        "stock into N segments, each under its own lock flash-sale:stock:i: purchases from\n"
        "different segments run in parallel, so throughput grows with N."
    ),
    configure=_configure,
    run=_run,
)
