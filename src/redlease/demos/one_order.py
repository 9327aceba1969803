"""One order per user: a user hammers "buy" from several processes, one order comes out.

Each process stands for a browser tab or a retrying client and sends K attempts. An attempt
checks whether the user already has an order, works a little (the payment check), then
creates it. Without the lock the first attempts of all processes pass the check together
and the user is charged several times; under ``locks.lock("order:{user_id}")`` the check
and the creation are one step and every later attempt finds the order.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import Any

import redis

from redlease.demos import display
from redlease.demos.base import (
    MAX_WORKERS,
    Demo,
    finish,
    non_negative_float,
    positive_float,
    positive_int,
    reachable_server,
    worker_count,
)
from redlease.demos.crew import RunKeys, Worker, remove_keys, run_crew
from redlease.errors import LockTimeout
from redlease.sync.lock import Locks

__all__ = ["DEMO", "OrderResult", "OrderSettings", "run_one_order"]

NAME = "one-order"
STOP_GRACE = 10.0


@dataclass(frozen=True)
class OrderSettings:
    workers: int = 4
    attempts: int = 20
    hold_ms: float = 20.0
    locked: bool = True
    user_id: int = 42
    seconds: float = 60.0


@dataclass(frozen=True)
class OrderPlan:
    """What one process needs; it crosses the process boundary, so plain data only."""

    keys: RunKeys
    user_id: int
    attempts: int
    hold: float
    locked: bool
    seconds: float

    @property
    def lock_name(self) -> str:
        return f"order:{self.user_id}"

    @property
    def order(self) -> str:
        """The user's order, if any: what "order exists" checks."""
        return self.keys.key("order", self.user_id)

    @property
    def orders(self) -> str:
        """Every order created for the user, in creation order: the charges."""
        return self.keys.key("orders", self.user_id)

    @property
    def attempts_made(self) -> str:
        return self.keys.key("attempts")


@dataclass(frozen=True)
class OrderResult:
    """``orders`` is how many orders the user ended up with; ``refused`` found one already."""

    attempts: int
    orders: int
    workers: int
    attempts_per_worker: int
    refused: int
    duplicates: int
    seconds: float
    locked: bool
    user_id: int
    order_ids: list[str]
    out_of_time: bool


def hammer(plan: OrderPlan, worker: Worker) -> dict[str, Any]:
    """One process clicking "buy" ``plan.attempts`` times, as fast as it can."""
    client = worker.client
    locks = Locks(client, prefix=plan.keys.lock_prefix) if plan.locked else None
    deadline = time.monotonic() + plan.seconds
    attempts = created = 0
    out_of_time = False
    try:
        while attempts < plan.attempts:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                out_of_time = True
                break
            attempts += 1
            order_id = f"worker{worker.index}-attempt{attempts}"
            try:
                created += _buy_once(plan, client, locks, order_id, remaining)
            except LockTimeout:
                out_of_time = True
                break
            client.incr(plan.attempts_made)
    finally:
        if locks is not None:
            locks.close()
    return {"attempts": attempts, "created": created, "out_of_time": out_of_time}


def _buy_once(
    plan: OrderPlan, client: redis.Redis, locks: Locks | None, order_id: str, timeout: float
) -> bool:
    if locks is None:
        return _place(plan, client, order_id)
    with locks.lock(plan.lock_name, timeout=timeout):
        return _place(plan, client, order_id)


def _place(plan: OrderPlan, client: redis.Redis, order_id: str) -> bool:
    """Check "order exists", then create it: atomic only under the lock."""
    if client.exists(plan.order):
        return False
    if plan.hold > 0:
        time.sleep(plan.hold)
    with client.pipeline(transaction=False) as pipe:
        pipe.set(plan.order, order_id)
        pipe.rpush(plan.orders, order_id)
        pipe.execute()
    return True


def run_one_order(
    url: str, settings: OrderSettings, on_progress: display.ProgressUpdate = lambda done: None
) -> OrderResult:
    """Let the processes hammer "buy" for one user, count the orders, clean up."""
    keys = RunKeys.fresh(NAME)
    plan = OrderPlan(
        keys=keys,
        user_id=settings.user_id,
        attempts=settings.attempts,
        hold=settings.hold_ms / 1000,
        locked=settings.locked,
        seconds=settings.seconds,
    )
    client = redis.Redis.from_url(url)
    try:
        crew = run_crew(
            url,
            NAME,
            [(hammer, plan)] * settings.workers,
            limit=settings.seconds + STOP_GRACE,
            tick=lambda elapsed: on_progress(int(client.get(plan.attempts_made) or 0)),
        )
        order_ids = [_text(order) for order in client.lrange(plan.orders, 0, -1)]
    finally:
        remove_keys(client, keys.pattern)
        client.close()
    figures = [report.figures for report in crew.reports]
    attempts = sum(figure["attempts"] for figure in figures)
    orders = len(order_ids)
    return OrderResult(
        attempts=attempts,
        orders=orders,
        workers=settings.workers,
        attempts_per_worker=settings.attempts,
        refused=attempts - orders,
        duplicates=max(orders - 1, 0),
        seconds=round(crew.seconds, 4),
        locked=settings.locked,
        user_id=settings.user_id,
        order_ids=order_ids,
        out_of_time=any(figure["out_of_time"] for figure in figures),
    )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _configure(parser: argparse.ArgumentParser) -> None:
    defaults = OrderSettings()
    parser.add_argument(
        "--workers",
        type=worker_count,
        default=defaults.workers,
        metavar="N",
        help=f"processes clicking buy, at most {MAX_WORKERS} (default: %(default)s)",
    )
    parser.add_argument(
        "--attempts",
        type=positive_int,
        default=defaults.attempts,
        metavar="K",
        help="buy attempts per process (default: %(default)s)",
    )
    parser.add_argument(
        "--user-id",
        type=positive_int,
        default=defaults.user_id,
        metavar="ID",
        help="the user placing the order (default: %(default)s)",
    )
    parser.add_argument(
        "--hold-ms",
        type=non_negative_float,
        default=defaults.hold_ms,
        metavar="X",
        help="work between the check and the creation (the payment check), in "
        "milliseconds; it widens the race window (default: %(default)s)",
    )
    parser.add_argument(
        "--no-lock",
        dest="locked",
        action="store_false",
        help="place orders without the lock, to see the duplicates",
    )
    parser.add_argument(
        "--seconds",
        type=positive_float,
        default=defaults.seconds,
        metavar="S",
        help="stop clicking after this long (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the figures instead of the table",
    )


def _run(args: argparse.Namespace) -> int:
    settings = OrderSettings(
        workers=args.workers,
        attempts=args.attempts,
        hold_ms=args.hold_ms,
        locked=args.locked,
        user_id=args.user_id,
        seconds=args.seconds,
    )
    total = settings.workers * settings.attempts
    with (
        reachable_server(args.url) as url,
        display.progress("attempts", total, enabled=not args.json) as update,
    ):
        result = run_one_order(url, settings, update)
    violation = (
        f"{result.orders} orders for one user with the lock on"
        if (result.locked and result.orders > 1)
        else None
    )
    return finish(result, args.json, _show, violation)


def _show(result: OrderResult) -> None:
    rows = [
        ("lock", "on" if result.locked else "off"),
        ("user", str(result.user_id)),
        ("workers", str(result.workers)),
        ("attempts", str(result.attempts)),
        ("orders", str(result.orders)),
        ("refused", str(result.refused)),
        ("duplicates", str(result.duplicates)),
        ("seconds", f"{result.seconds:.3f}"),
    ]
    display.summary_table("one order per user", rows)
    if result.orders == 1:
        print(
            f"Exactly one order from {result.attempts} attempts: "
            f"{result.refused} found the order already there."
        )
    elif result.orders == 0:
        print("No order was placed (attempts or time ran out).")
    else:
        print(
            f"Duplicates: user {result.user_id} was charged {result.orders} times "
            f"({', '.join(result.order_ids)})."
        )


DEMO = Demo(
    name=NAME,
    summary='a user hammers "buy" from several processes; the lock makes one order',
    description=(
        'N processes click "buy" K times each for the same user. An attempt checks\n'
        "whether the user has an order, works for --hold-ms (the payment check), then\n"
        "creates the order. Without the lock the first attempts pass the check together\n"
        'and the user gets several orders; with locks.lock("order:{user_id}") around the\n'
        "check and the creation there is exactly one."
    ),
    configure=_configure,
    run=_run,
)
