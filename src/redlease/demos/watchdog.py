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

import time
from dataclasses import dataclass
from typing import Any

import redis

from redlease.commands.common import lease_ttl, positive_float
from redlease.core.claims import split_lease_value
from redlease.core.lease import Lease
from redlease.demos.base import at_least, at_most, option, switch
from redlease.demos.crew import Event, Worker
from redlease.demos.display import SILENT, Progress, Stage, rows_of, summary_table
from redlease.demos.namespace import Plan, as_text
from redlease.demos.scaffold import demo, session
from redlease.errors import LeaseLost
from redlease.sync.lock import Locks

__all__ = ["DEMO", "WatchdogResult", "WatchdogSettings", "run_watchdog"]

NAME = "watchdog"
LOCK_NAME = "watchdog:job"
HOLDER, CONTENDER = 0, 1
BUSY = "holder-busy"
"""The key set while the holder is inside its job: a contender that gets in then overlaps."""
DONE = "holder-done"
"""The key set once the holder is through (released or lost): the contender stops."""
POLL = 0.01
READOUT_INTERVAL = 0.25
START_WAIT = 30.0
STOP_GRACE = 15.0
PROGRESS_STEPS = 100
MAX_JOB_SECONDS = 600.0
MIN_TTL_S = 0.1
"""Shorter leases lose their renewals to scheduling on a busy machine: the demo would show
the machine, not the lock."""


@dataclass(frozen=True)
class WatchdogSettings:
    """The options of ``redlease demo watchdog``, one field each."""

    ttl: float = option(
        1.0,
        at_least(lease_ttl, MIN_TTL_S, "s"),
        "S",
        "the lease's TTL in seconds, at least 0.1 (default: %(default)s)",
    )
    job_seconds: float = option(
        3.5,
        at_most(positive_float, MAX_JOB_SECONDS, "s"),
        "S",
        "how long the holder works, longer than the TTL (default: %(default)s)",
    )
    renew: bool = switch(
        "--no-renew", "hold the lease without renewal, to see it expire under the job"
    )
    retry_ms: float = option(
        50.0,
        positive_float,
        "X",
        "how often the other process tries the lock, in milliseconds (default: %(default)s)",
    )


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


WatchdogPlan = Plan[WatchdogSettings]


def hold(plan: WatchdogPlan, worker: Worker) -> dict[str, Any]:
    """The holder: take the lock, work for ``job_seconds`` reporting renewals, release."""
    client = worker.client
    locks = Locks(client, prefix=plan.keys.lock_prefix)
    settings = plan.settings
    lock = locks.lock(LOCK_NAME, ttl=settings.ttl, renew=settings.renew, timeout=START_WAIT)
    lease: Lease | None = None
    try:
        with lock as lease:
            lease.on_lost(lambda lost: worker.emit({"kind": "lost", "reason": lost.lost_reason}))
            client.set(plan.key(BUSY), worker.index)
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
                client.delete(plan.key(BUSY))
            worker.emit({"kind": "job_done", "renewals": lease.renewals})
        worker.emit({"kind": "released"})
    except LeaseLost as error:
        worker.emit({"kind": "release_lost", "reason": error.reason})
    finally:
        client.set(plan.key(DONE), 1)
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
    end = time.monotonic() + plan.settings.job_seconds
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
        elif not plan.settings.renew and not gone and now >= next_readout:
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
    if token is None or split_lease_value(as_text(token))[1] != lease.token:
        return None
    return int(ttl_ms)


def contend(plan: WatchdogPlan, worker: Worker) -> dict[str, Any]:
    """The other process: try the lock every ``retry`` s while the holder is at work."""
    client = worker.client
    deadline = time.monotonic() + START_WAIT
    while not client.exists(plan.key(BUSY), plan.key(DONE)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the holder did not start within {START_WAIT:g} s")
        time.sleep(POLL)
    tries = acquired = overlaps = 0
    settings = plan.settings
    deadline = time.monotonic() + settings.job_seconds + settings.ttl + STOP_GRACE
    with Locks(client, prefix=plan.keys.lock_prefix) as locks:
        lock = locks.lock(LOCK_NAME, timeout=0)
        while not client.exists(plan.key(DONE)) and time.monotonic() < deadline:
            tries += 1
            lease = lock.try_acquire()
            if lease is not None:
                acquired += 1
                if client.exists(plan.key(BUSY)):
                    overlaps += 1
                    if overlaps == 1:
                        worker.emit({"kind": "overlap", "fence": lease.fence})
                lock.release()
            time.sleep(settings.retry_ms / 1000)
    return {"tries": tries, "acquired": acquired, "overlaps": overlaps}


def run_watchdog(
    url: str, settings: WatchdogSettings, progress: Progress = SILENT
) -> WatchdogResult:
    """Run the holder and the contender, tell the timeline through ``progress``, clean up."""
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
        progress.note(_narrate(event))

    with session(url, NAME, progress) as run:
        plan = WatchdogPlan(run.keys, settings)
        crew = run.crew(
            [(hold, plan), (contend, plan)],
            who="the holder and the contender",
            stage=Stage("running the job", PROGRESS_STEPS, "% done"),
            count=lambda elapsed: min(
                round(elapsed / settings.job_seconds * PROGRESS_STEPS), PROGRESS_STEPS
            ),
            limit=START_WAIT + settings.job_seconds + settings.ttl + STOP_GRACE,
            on_event=on_event,
        )
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


def _show(result: WatchdogResult) -> None:
    rows = [
        ("renewal", "on" if result.renew else "off"),
        ("ttl", f"{result.ttl:g} s"),
        ("job", f"{result.job_seconds:g} s"),
        *rows_of(result, "renewals", "contender_tries"),
        ("contender got in", str(result.contender_acquired)),
        *rows_of(result, "overlaps"),
        ("holder lost lease", "yes" if result.holder_lost else "no"),
        ("seconds", f"{result.seconds:.3f}"),
    ]
    summary_table("watchdog", rows)
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


def _violation(result: WatchdogResult) -> str | None:
    if not result.renew or not (result.overlaps or result.holder_lost):
        return None
    return (
        f"{result.overlaps} overlaps with renewal on (holder lost its lease: {result.holder_lost})"
    )


DEMO = demo(
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
    settings=WatchdogSettings,
    play=run_watchdog,
    show=_show,
    violation=_violation,
    shown="the timeline and table",
)
