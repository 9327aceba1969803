"""The watchdog: a job longer than its lease keeps the lock, because the lease is renewed.

One process takes ``locks.lock("watchdog:job", ttl=1)`` and works for 3.5 s, much longer
than the TTL. The client's renewal worker extends the lease every third of the TTL while
the holder lives, so the lease never runs out; the holder watches ``lease.renewals`` and
reports each renewal with the lease's remaining time as the server sees it. Meanwhile a
second process tries to take the lock every 50 ms and never gets it.

With ``--no-renew`` the same lease simply expires after 1 s: the other process gets in
while the job still runs (an *overlap*: two holders at once), and the holder learns at
its release that its lease was lost.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from redlease.core.lease import Lease
from redlease.demos import display
from redlease.demos.base import (
    Demo,
    finish,
    positive_float,
    reachable_server,
)
from redlease.demos.crew import Event, RunKeys, Worker, remove_keys, run_crew
from redlease.errors import LeaseLost
from redlease.sync.lock import Locks

__all__ = ["DEMO", "WatchdogResult", "WatchdogSettings", "run_watchdog"]

NAME = "watchdog"
LOCK_NAME = "watchdog:job"
HOLDER, CONTENDER = 0, 1
POLL = 0.01
READOUT_INTERVAL = 0.25
START_WAIT = 30.0
STOP_GRACE = 15.0
PROGRESS_STEPS = 100
MAX_JOB_SECONDS = 600.0


@dataclass(frozen=True)
class WatchdogSettings:
    ttl: float = 1.0
    job_seconds: float = 3.5
    renew: bool = True
    retry_ms: float = 50.0


@dataclass(frozen=True)
class WatchdogPlan:
    """What both processes need; it crosses the process boundary, so plain data only."""

    keys: RunKeys
    ttl: float
    job_seconds: float
    renew: bool
    retry: float

    @property
    def busy(self) -> str:
        """Set while the holder is inside its job: a contender that gets in then overlaps."""
        return self.keys.key("holder-busy")

    @property
    def done(self) -> str:
        """Set once the holder is through (released or lost): the contender stops."""
        return self.keys.key("holder-done")


@dataclass(frozen=True)
class WatchdogResult:
    """``overlaps`` counts the contender's grants while the holder was still in its job."""

    renewals: int
    overlaps: int
    ttl: float
    job_seconds: float
    renew: bool
    holder_lost: bool
    lost_reason: str | None
    fence: int
    contender_tries: int
    contender_acquired: int
    first_overlap_s: float | None
    seconds: float
    renewal_log: list[dict[str, Any]]


def hold(plan: WatchdogPlan, worker: Worker) -> dict[str, Any]:
    """The holder: take the lock, work for ``job_seconds`` reporting renewals, release."""
    client = worker.client
    locks = Locks(client, prefix=plan.keys.lock_prefix)
    lock = locks.lock(LOCK_NAME, ttl=plan.ttl, renew=plan.renew, timeout=START_WAIT)
    lease: Lease | None = None
    try:
        with lock as lease:
            lease.on_lost(lambda lost: worker.emit({"kind": "lost", "reason": lost.lost_reason}))
            client.set(plan.busy, worker.index)
            try:
                worker.emit(
                    {
                        "kind": "acquired",
                        "fence": lease.fence,
                        "server_ttl_ms": _server_ttl(client, lock.keys.lease, lease),
                    }
                )
                _work(plan, worker, lease, lock.keys.lease)
            finally:
                client.delete(plan.busy)
            worker.emit({"kind": "job_done", "renewals": lease.renewals})
        worker.emit({"kind": "released"})
    except LeaseLost as error:
        worker.emit({"kind": "release_lost", "reason": error.reason})
    finally:
        client.set(plan.done, 1)
        locks.close()
    assert lease is not None
    return {
        "renewals": lease.renewals,
        "lost": lease.lost,
        "lost_reason": lease.lost_reason,
        "fence": lease.fence,
    }


def _work(plan: WatchdogPlan, worker: Worker, lease: Lease, key: str) -> None:
    """The long job; on the side, report each renewal (and, unrenewed, the draining TTL)."""
    seen = 0
    gone = False
    end = time.monotonic() + plan.job_seconds
    next_readout = time.monotonic() + READOUT_INTERVAL
    while (now := time.monotonic()) < end:
        if lease.renewals != seen:
            seen = lease.renewals
            worker.emit(
                {
                    "kind": "renewal",
                    "renewals": seen,
                    "server_ttl_ms": _server_ttl(worker.client, key, lease),
                }
            )
        elif not plan.renew and not gone and now >= next_readout:
            next_readout += READOUT_INTERVAL
            ttl_ms = _server_ttl(worker.client, key, lease)
            gone = ttl_ms is None
            worker.emit({"kind": "ttl", "server_ttl_ms": ttl_ms})
        time.sleep(min(POLL, end - now))


def _server_ttl(client: redis.Redis, key: str, lease: Lease) -> int | None:
    """The lease's remaining milliseconds on the server; None once the key is not ours."""
    with client.pipeline(transaction=True) as pipe:
        pipe.get(key)
        pipe.pttl(key)
        token, ttl_ms = pipe.execute()
    if token is None or _text(token) != lease.token:
        return None
    return int(ttl_ms)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def contend(plan: WatchdogPlan, worker: Worker) -> dict[str, Any]:
    """The other process: try the lock every ``retry`` s while the holder is at work."""
    client = worker.client
    deadline = time.monotonic() + START_WAIT
    while not client.exists(plan.busy, plan.done):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the holder did not start within {START_WAIT:g} s")
        time.sleep(POLL)
    tries = acquired = overlaps = 0
    deadline = time.monotonic() + plan.job_seconds + plan.ttl + STOP_GRACE
    with Locks(client, prefix=plan.keys.lock_prefix) as locks:
        lock = locks.lock(LOCK_NAME, timeout=0)
        while not client.exists(plan.done) and time.monotonic() < deadline:
            tries += 1
            lease = lock.try_acquire()
            if lease is not None:
                acquired += 1
                if client.exists(plan.busy):
                    overlaps += 1
                    if overlaps == 1:
                        worker.emit({"kind": "overlap", "fence": lease.fence})
                lock.release()
            time.sleep(plan.retry)
    return {"tries": tries, "acquired": acquired, "overlaps": overlaps}


def run_watchdog(
    url: str,
    settings: WatchdogSettings,
    on_progress: display.ProgressUpdate = lambda done: None,
    on_line: Callable[[str], None] = lambda line: None,
) -> WatchdogResult:
    """Run the holder and the contender, narrate through ``on_line``, clean up."""
    keys = RunKeys.fresh(NAME)
    plan = WatchdogPlan(
        keys=keys,
        ttl=settings.ttl,
        job_seconds=settings.job_seconds,
        renew=settings.renew,
        retry=settings.retry_ms / 1000,
    )
    renewal_log: list[dict[str, Any]] = []
    first_overlap: list[float] = []

    def on_event(event: Event) -> None:
        payload = event.payload
        if payload["kind"] == "renewal":
            renewal_log.append(
                {
                    "t": round(event.at, 3),
                    "renewals": payload["renewals"],
                    "server_ttl_ms": payload["server_ttl_ms"],
                }
            )
        elif payload["kind"] == "overlap":
            first_overlap.append(event.at)
        on_line(_narrate(event))

    def tick(elapsed: float) -> None:
        on_progress(min(round(elapsed / settings.job_seconds * PROGRESS_STEPS), PROGRESS_STEPS))

    client = redis.Redis.from_url(url)
    try:
        crew = run_crew(
            url,
            NAME,
            [(hold, plan), (contend, plan)],
            limit=START_WAIT + settings.job_seconds + settings.ttl + STOP_GRACE,
            tick=tick,
            on_event=on_event,
        )
    finally:
        remove_keys(client, keys.pattern)
        client.close()
    holder, contender = crew.reports[HOLDER].figures, crew.reports[CONTENDER].figures
    return WatchdogResult(
        renewals=holder["renewals"],
        overlaps=contender["overlaps"],
        ttl=settings.ttl,
        job_seconds=settings.job_seconds,
        renew=settings.renew,
        holder_lost=holder["lost"],
        lost_reason=holder["lost_reason"],
        fence=holder["fence"],
        contender_tries=contender["tries"],
        contender_acquired=contender["acquired"],
        first_overlap_s=round(first_overlap[0], 3) if first_overlap else None,
        seconds=round(crew.seconds, 4),
        renewal_log=renewal_log,
    )


def _narrate(event: Event) -> str:
    """One line of the timeline: when, who, what."""
    payload = event.payload
    who = "holder" if event.index == HOLDER else "contender"
    kind = payload["kind"]
    if kind == "acquired":
        what = f"took the lock (fence {payload['fence']}), {_ttl(payload['server_ttl_ms'])}"
    elif kind == "renewal":
        what = f"renewal #{payload['renewals']}, {_ttl(payload['server_ttl_ms'])}"
    elif kind == "ttl":
        what = f"still working, {_ttl(payload['server_ttl_ms'])}"
    elif kind == "overlap":
        what = f"got the lock (fence {payload['fence']}) while the job still runs: overlap"
    elif kind == "job_done":
        what = f"job done, {payload['renewals']} renewals"
    elif kind == "released":
        what = "released the lock"
    elif kind == "lost":
        what = f"on_lost callback: {payload['reason']}"
    elif kind == "release_lost":
        what = "release raised LeaseLost: the job ran partly unprotected"
    else:
        what = kind
    return f"{event.at:7.3f} s  {who:<9}  {what}"


def _ttl(ttl_ms: int | None) -> str:
    return "lease gone from the server" if ttl_ms is None else f"server TTL {ttl_ms} ms"


def _configure(parser: argparse.ArgumentParser) -> None:
    defaults = WatchdogSettings()
    parser.add_argument(
        "--ttl",
        type=positive_float,
        default=defaults.ttl,
        metavar="S",
        help="the lease's TTL in seconds (default: %(default)s)",
    )
    parser.add_argument(
        "--job-seconds",
        type=_job_seconds,
        default=defaults.job_seconds,
        metavar="S",
        help="how long the holder works, longer than the TTL (default: %(default)s)",
    )
    parser.add_argument(
        "--no-renew",
        dest="renew",
        action="store_false",
        help="hold the lease without renewal, to see it expire under the job",
    )
    parser.add_argument(
        "--retry-ms",
        type=positive_float,
        default=defaults.retry_ms,
        metavar="X",
        help="how often the other process tries the lock, in milliseconds (default: %(default)s)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object with the figures instead of the timeline and table",
    )


def _job_seconds(text: str) -> float:
    value = positive_float(text)
    if value > MAX_JOB_SECONDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_JOB_SECONDS:g} s, got {text}")
    return value


def _run(args: argparse.Namespace) -> int:
    settings = WatchdogSettings(
        ttl=args.ttl, job_seconds=args.job_seconds, renew=args.renew, retry_ms=args.retry_ms
    )
    with (
        reachable_server(args.url) as url,
        display.progress("job %", PROGRESS_STEPS, enabled=not args.json) as update,
    ):
        result = run_watchdog(
            url, settings, update, (lambda line: None) if args.json else _print_line
        )
    violation = (
        f"{result.overlaps} overlaps with renewal on (holder lost its lease: {result.holder_lost})"
        if result.renew and (result.overlaps or result.holder_lost)
        else None
    )
    return finish(result, args.json, _show, violation)


def _print_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _show(result: WatchdogResult) -> None:
    rows = [
        ("renewal", "on" if result.renew else "off"),
        ("ttl", f"{result.ttl:g} s"),
        ("job", f"{result.job_seconds:g} s"),
        ("renewals", str(result.renewals)),
        ("contender tries", str(result.contender_tries)),
        ("contender got in", str(result.contender_acquired)),
        ("overlaps", str(result.overlaps)),
        ("holder lost lease", "yes" if result.holder_lost else "no"),
        ("seconds", f"{result.seconds:.3f}"),
    ]
    display.summary_table("watchdog", rows)
    if result.overlaps:
        print(
            f"Overlap: the lease ran out after {result.ttl:g} s under a "
            f"{result.job_seconds:g} s job; the other process got in at "
            f"{result.first_overlap_s} s while the holder still worked, and the holder "
            "found its lease lost at release."
        )
    elif result.holder_lost:
        print(f"The holder lost its lease: {result.lost_reason}.")
    else:
        print(
            f"Held throughout: {result.renewals} renewals kept a {result.ttl:g} s lease alive "
            f"for a {result.job_seconds:g} s job; the other process tried "
            f"{result.contender_tries} times and never got in."
        )


DEMO = Demo(
    name=NAME,
    summary="a job longer than its TTL keeps the lock because the lease is renewed",
    description=(
        'One process takes locks.lock("watchdog:job", ttl=1, renew=True) and works for\n'
        "3.5 s. The client's renewal worker extends the lease every ttl/3 while the\n"
        "holder lives; each renewal is shown with the lease's remaining TTL read from the\n"
        "server. Another process tries the lock every 50 ms and never gets it. With\n"
        "--no-renew the lease expires under the job: the other process gets in while the\n"
        "holder still works (an overlap) and the holder's release reports the lease lost."
    ),
    configure=_configure,
    run=_run,
)
