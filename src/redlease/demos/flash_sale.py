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

from dataclasses import dataclass

from redlease.commands.common import UsageError, non_negative_float, positive_float, positive_int
from redlease.demos.base import at_most, option, switch, workers_option
from redlease.demos.buyer import BuyerPlan, buy_until_sold_out
from redlease.demos.crew import Crew
from redlease.demos.display import SILENT, Progress, Stage, counted, rows_of, summary_table
from redlease.demos.scaffold import demo, session
from redlease.demos.shop import Shop, ShopKeys, split_stock

__all__ = ["DEMO", "SaleResult", "SaleSettings", "run_sale"]

NAME = "flash-sale"
MAX_SEGMENTS = 1024
STOP_GRACE = 10.0


@dataclass(frozen=True)
class SaleSettings:
    """The options of ``redlease demo flash-sale``; more segments than items is a mistake."""

    stock: int = option(100, positive_int, "M", "items on sale (default: %(default)s)")
    workers: int = workers_option(8, "buyer processes")
    attempts: int | None = option(
        None,
        positive_int,
        "K",
        "purchase attempts per buyer process (default: stock + segments)",
        "--buyers-per-worker",
    )
    segments: int = option(
        1,
        at_most(positive_int, MAX_SEGMENTS, "segments"),
        "N",
        "split the stock into N segments, each under its own lock "
        "flash-sale:stock:i (default: %(default)s, one lock for the whole stock)",
    )
    locked: bool = switch("--no-lock", "buy without the lock, to see the oversell")
    hold_ms: float = option(
        1.0,
        non_negative_float,
        "X",
        "work between reading and writing the stock, in "
        "milliseconds; it widens the race window (default: %(default)s)",
    )
    seconds: float = option(
        60.0, positive_float, "S", "stop buying after this long (default: %(default)s)"
    )

    def __post_init__(self) -> None:
        if self.segments > self.stock:
            raise UsageError(
                f"--segments {self.segments} is more than the {self.stock} items on sale"
            )

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


def run_sale(url: str, settings: SaleSettings, progress: Progress = SILENT) -> SaleResult:
    """Open a shop under a fresh key namespace, let the buyers loose, and count; always clean up."""
    with session(url, NAME, progress) as run:
        shop = Shop(run.client, ShopKeys(run.keys, settings.segments))
        shop.open(settings.stock)
        plan = BuyerPlan(
            keys=shop.keys,
            attempts=settings.attempts_per_worker,
            locked=settings.locked,
            hold=settings.hold_ms / 1000,
            seconds=settings.seconds,
        )
        crew = run.crew(
            [(buy_until_sold_out, plan)] * settings.workers,
            who=counted(settings.workers, "buyer process"),
            stage=Stage("selling", settings.stock, "sold"),
            count=lambda elapsed: shop.sold(),
            limit=settings.seconds + STOP_GRACE,
        )
        return _result(settings, shop, crew)


def _result(settings: SaleSettings, shop: Shop, crew: Crew) -> SaleResult:
    sold = shop.orders()
    segment_stock = split_stock(settings.stock, settings.segments)
    segment_sold = shop.by_segment("sold")
    oversold = sum(
        max(done - size, 0) for done, size in zip(segment_sold, segment_stock, strict=True)
    )
    figures = [report.figures for report in crew.reports]
    return SaleResult(
        stock=settings.stock,
        sold=sold,
        oversold=max(oversold, sold - settings.stock, 0),
        workers=settings.workers,
        seconds=round(crew.seconds, 4),
        locked=settings.locked,
        buys_per_s=round(sold / crew.seconds, 1),
        stock_left=sum(shop.by_segment("stock")),
        attempts=sum(figure["attempts"] for figure in figures),
        fenced_off=sum(figure["fenced_off"] for figure in figures),
        out_of_time=any(figure["out_of_time"] for figure in figures),
        segments=settings.segments,
        segment_stock=segment_stock,
        segment_sold=segment_sold,
    )


def _show(result: SaleResult) -> None:
    rows = [
        ("lock", "on" if result.locked else "off"),
        *rows_of(result, "stock", "sold", "oversold", "stock_left", "segments"),
        *rows_of(result, "workers", "attempts", "fenced_off"),
        ("seconds", f"{result.seconds:.3f}"),
        ("throughput", f"{result.buys_per_s:,.0f} buys/s"),
    ]
    if result.segments > 1:
        rows.insert(6, ("sold per segment", _per_segment(result)))
    summary_table("flash sale", rows)
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


def _violation(result: SaleResult) -> str | None:
    if result.locked and result.oversold:
        return f"oversold {result.oversold} items with the lock on"
    return None


DEMO = demo(
    name=NAME,
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
    settings=SaleSettings,
    play=run_sale,
    show=_show,
    violation=_violation,
)
