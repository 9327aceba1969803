"""One order per user: a user hammers "buy" from several processes, one order comes out.

Each process stands for a browser tab or a retrying client and sends K attempts. An attempt
checks whether the user already has an order, works a little (the payment check), then
creates it. Without the lock the first attempts of all processes pass the check together
and the user is charged several times; under ``locks.lock("order:{user_id}")`` the check
and the creation are one step and every later attempt finds the order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from redlease.commands.common import non_negative_float, positive_float, positive_int
from redlease.demos.base import option, switch, workers_option
from redlease.demos.crew import Worker
from redlease.demos.display import SILENT, Progress, Stage, counted, rows_of, summary_table
from redlease.demos.namespace import Plan, as_text
from redlease.demos.scaffold import demo, session
from redlease.errors import LockTimeout
from redlease.sync.lock import Locks

__all__ = ["DEMO", "OrderResult", "OrderSettings", "run_one_order"]

NAME = "one-order"
STOP_GRACE = 10.0


@dataclass(frozen=True)
class OrderSettings:
    """The options of ``redlease demo one-order``, one field each."""

    workers: int = workers_option(4, "processes clicking buy")
    attempts: int = option(20, positive_int, "K", "buy attempts per process (default: %(default)s)")
    user_id: int = option(
        42, positive_int, "ID", "the user placing the order (default: %(default)s)"
    )
    hold_ms: float = option(
        20.0,
        non_negative_float,
        "X",
        "work between the check and the creation (the payment check), in "
        "milliseconds; it widens the race window (default: %(default)s)",
    )
    locked: bool = switch("--no-lock", "place orders without the lock, to see the duplicates")
    seconds: float = option(
        60.0, positive_float, "S", "stop clicking after this long (default: %(default)s)"
    )


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


class OrderPlan(Plan[OrderSettings]):
    """The user's lock and keys."""

    @property
    def lock_name(self) -> str:
        return f"order:{self.settings.user_id}"

    @property
    def order(self) -> str:
        """The user's order, if any: what "order exists" checks."""
        return self.keys.key("order", self.settings.user_id)

    @property
    def orders(self) -> str:
        """Every order created for the user, in creation order: the charges."""
        return self.keys.key("orders", self.settings.user_id)

    @property
    def attempts_made(self) -> str:
        return self.keys.key("attempts")


def hammer(plan: OrderPlan, worker: Worker) -> dict[str, Any]:
    """One process clicking "buy" ``--attempts`` times, as fast as it can."""
    client = worker.client
    settings = plan.settings
    locks = Locks(client, prefix=plan.keys.lock_prefix) if settings.locked else None
    deadline = time.monotonic() + settings.seconds
    attempts = created = 0
    out_of_time = False
    try:
        while attempts < settings.attempts:
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
    if plan.settings.hold_ms > 0:
        time.sleep(plan.settings.hold_ms / 1000)
    with client.pipeline(transaction=False) as pipe:
        pipe.set(plan.order, order_id)
        pipe.rpush(plan.orders, order_id)
        pipe.execute()
    return True


def run_one_order(url: str, settings: OrderSettings, progress: Progress = SILENT) -> OrderResult:
    """Let the processes hammer "buy" for one user, count the orders, clean up."""
    with session(url, NAME, progress) as run:
        plan = OrderPlan(run.keys, settings)
        crew = run.crew(
            [(hammer, plan)] * settings.workers,
            who=counted(settings.workers, "process"),
            stage=Stage("clicking buy", settings.workers * settings.attempts, "attempts"),
            count=lambda elapsed: int(run.client.get(plan.attempts_made) or 0),
            limit=settings.seconds + STOP_GRACE,
        )
        order_ids = [as_text(order) for order in run.client.lrange(plan.orders, 0, -1)]
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


def _show(result: OrderResult) -> None:
    rows = [
        ("lock", "on" if result.locked else "off"),
        ("user", str(result.user_id)),
        *rows_of(result, "workers", "attempts", "orders", "refused", "duplicates"),
        ("seconds", f"{result.seconds:.3f}"),
    ]
    summary_table("one order per user", rows)
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


def _violation(result: OrderResult) -> str | None:
    if result.locked and result.orders > 1:
        return f"{result.orders} orders for one user with the lock on"
    return None


DEMO = demo(
    name=NAME,
    summary='a user hammers "buy" from several processes; the lock makes one order',
    description=(
        'N processes click "buy" K times each for the same user. An attempt checks\n'
        "whether the user has an order, works for --hold-ms (the payment check), then\n"
        "creates the order. Without the lock the first attempts pass the check together\n"
        'and the user gets several orders; with locks.lock("order:{user_id}") around the\n'
        "check and the creation there is exactly one."
    ),
    settings=OrderSettings,
    play=run_one_order,
    show=_show,
    violation=_violation,
)
