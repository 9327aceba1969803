"""Every figure where a peer beats redlease by more than the spread, from a result object.

The rule, per figure and peer:

* the peer's median must be better (lower, or higher where more is better);
* when both have a range over reps (``[min, max]``), the ranges must not overlap;
* a figure measured once, or kept as a median only, counts when the peer is better by
  more than ``SINGLE_MARGIN`` (10 %); an exact count (commands per cycle, threads, lost
  leases, oversold units) counts at any difference.

Each finding carries the known mechanism for that kind of figure (``REASONS``), or says
that none is on file, so a person can explain it in the issue note.
"""

# ruff: noqa: RUF001 - the page shows multiplication signs
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from peers import LIBRARIES

SINGLE_MARGIN = 1.10
PEERS = tuple(library for library in LIBRARIES if library != "redlease")


@dataclass(frozen=True)
class Value:
    median: float | None
    spread: list[float] | None = None
    exact: bool = False


@dataclass(frozen=True)
class Finding:
    section: str
    figure: str
    kind: str  # the REASONS key
    peer: str
    ours: Value
    theirs: Value
    lower_is_better: bool

    @property
    def margin(self) -> float | None:
        """How many times better the peer is (>= 1), or None when a side is 0."""
        a, b = self.ours.median or 0.0, self.theirs.median or 0.0
        worse, better = (a, b) if self.lower_is_better else (b, a)
        return worse / better if better else None


def beaten(ours: Value, theirs: Value, lower_is_better: bool) -> bool:
    """True when ``theirs`` beats ``ours`` by more than the spread (module doc)."""
    if ours.median is None or theirs.median is None:
        return False
    a, b = ours.median, theirs.median
    if not (b < a if lower_is_better else b > a):
        return False
    if ours.spread and theirs.spread:
        if lower_is_better:
            return theirs.spread[1] < ours.spread[0]
        return theirs.spread[0] > ours.spread[1]
    if ours.exact or theirs.exact:
        return True
    if lower_is_better:
        return ours.median > theirs.median * SINGLE_MARGIN
    return theirs.median > ours.median * SINGLE_MARGIN


def _value(figures: dict[str, Any] | None, key: str, spread: str | None, exact: bool) -> Value:
    if not figures:
        return Value(None)
    found = figures.get(spread) if spread else None
    if spread and spread.endswith("_per_rep") and found:
        found = [min(found), max(found)]
    if spread == "min_max":
        low, high = figures.get(f"{key}_min"), figures.get(f"{key}_max")
        found = [low, high] if low is not None and high is not None else None
    return Value(figures.get(key), found, exact)


# (key, label, REASONS kind, lower is better, spread key or None, exact count)
CYCLE = (
    ("cycle_us", "uncontended cycle, µs", "cycle", True, "cycle_us_spread", False),
    ("cycle_rtt", "uncontended cycle × RTT", "cycle", True, "cycle_rtt_spread", False),
    ("cycle_cpu_us", "client CPU per cycle, µs", "cycle", True, "cycle_cpu_us_spread", False),
    ("cycle_client_commands", "client commands per cycle", "commands", True, None, True),
    ("cycle_server_commands", "server commands per cycle", "commands", True, None, True),
    ("leftover_keys", "keys left after the cycle part", "leftover", True, None, True),
)
CONTENDED = (
    ("handoff_p50_us", "handoff p50, µs", "handoff", True, "handoff_p50_us_spread", False),
    ("handoff_p99_us", "handoff p99, µs", "handoff", True, "handoff_p99_us_spread", False),
    ("acquires_per_s", "acquisitions / s", "throughput", False, "acquires_per_s_spread", False),
    ("handoff_share", "share handed to another process", "fairness", False,
     "handoff_share_spread", False),
    ("commands_per_acquire", "server commands / acquisition", "commands", True,
     "commands_per_acquire_spread", False),
    ("client_commands_per_acquire", "client commands / acquisition", "commands", True,
     "client_commands_per_acquire_spread", False),
    ("longest_wait_ms", "longest wait, ms", "handoff", True, "longest_wait_ms_per_rep", False),
    ("overlaps", "overlapping critical sections", "safety", True, None, True),
)  # fmt: skip
RENEWAL = (
    ("renew_threads", "renewal threads", "renewal", True, None, True),
    ("renew_cpu_pct", "renewal CPU, % of one core", "renewal", True, None, False),
    ("renew_lost", "leases lost", "renewal", True, None, True),
)
ASYNC = (
    ("async_cycle_us", "asyncio cycle, µs", "async", True, "async_cycle_us_spread", False),
    ("async_ratio", "asyncio / sync cycle", "async_ratio", True, "async_ratio_spread", False),
)
FLASH = (
    ("buys_per_s", "buys / s", "flash", False, "min_max", False),
    ("latency_p50_us", "buy latency p50, µs", "flash", True, None, False),
    ("latency_p99_us", "buy latency p99, µs", "flash", True, None, False),
    ("oversold", "units oversold", "safety", True, None, True),
    ("errors", "errors", "errors", True, None, True),
)
COORDINATION = (
    ("cycle_us", "uncontended cycle, µs", "coordination", True, "min_max", False),
    ("handoff_p50_us", "handoff p50, µs", "coordination", True, None, False),
    ("handoff_p99_us", "handoff p99, µs", "coordination", True, None, False),
    ("acquisitions_per_s", "acquisitions / s", "coordination", False, None, False),
    ("overlaps", "overlaps", "safety", True, None, True),
)


def find(result: dict[str, Any]) -> list[Finding]:
    return list(_findings(result))


def _compare(
    section: str, specs: Any, ours: dict[str, Any] | None, peers: dict[str, Any]
) -> Iterator[Finding]:
    if not ours:
        return
    for key, label, kind, lower, spread, exact in specs:
        mine = _value(ours, key, spread, exact)
        for peer, figures in peers.items():
            theirs = _value(figures, key, spread, exact)
            if beaten(mine, theirs, lower):
                yield Finding(section, label, kind, peer, mine, theirs, lower)


def _findings(result: dict[str, Any]) -> Iterator[Finding]:
    ours = result.get("redlease", {})
    rows = {peer: result.get(peer, {}) for peer in PEERS}
    yield from _compare("uncontended", CYCLE, ours, rows)
    for workers, mine in sorted(ours.get("contended", {}).items(), key=lambda i: int(i[0])):
        peers = {p: row.get("contended", {}).get(workers) for p, row in rows.items()}
        yield from _compare(f"{workers} workers", CONTENDED, mine, peers)
    for count, mine in sorted(ours.get("renewal_by_leases", {}).items(), key=lambda i: int(i[0])):
        peers = {p: row.get("renewal_by_leases", {}).get(count) for p, row in rows.items()}
        big = rows["python-redis-lock"].get("renewal_big_pool_by_leases", {}).get(count)
        peers["python-redis-lock:big-pool"] = big
        yield from _compare(f"renewal, {int(count):,} leases", RENEWAL, mine, peers)
    peers = {p: (result.get(p) or {}).get("async") for p in (*PEERS, "aioredlock")}
    yield from _compare("asyncio", ASYNC, ours.get("async"), peers)
    claims = result.get("claims", {})
    for section, specs, name in (
        ("flash sale", FLASH, "flash_sale"),
        ("coordination", COORDINATION, "coordination"),
    ):
        rows_of = dict(claims.get(name) or {})
        mine = rows_of.pop("redlease", None)
        yield from _compare(section, specs, mine, rows_of)


REASONS = {
    "cycle": (
        "Same two round trips as the peers (acquire, release), so the gap is client CPU: "
        "redlease drives each call through its flow core and lease bookkeeping, and a "
        "renewing lease (the default) is registered with the client's renewal thread on "
        "every acquire; the `ttl=10` row (no renewal) isolates that part. On a short "
        "round trip, client CPU dominates the cycle."
    ),
    "commands": (
        "redlease's scripts do more per call: the acquire reads the clock and the fence "
        "counter, the release leaves a release latch and hands the lock to the first "
        "queued waiter (queue pop + publish), and a queued waiter dates its lease by the "
        "server's clock. Each is what a guarantee costs: fencing tokens, a retried "
        "release's true answer, FIFO hand-off, a paused waiter that never holds a dead "
        "lease. Server-side commands inside one script are cheap next to a round trip "
        "(the server's CPU per acquisition is measured beside the counts): "
        "`bench/script_cost.py` times each script on the server, about 20 µs for a free "
        "acquire or a release, 30-45 µs for a waiter joining a queue and 35-40 µs for a "
        "hand-off, against 3 µs for redis-py's SET NX and 11 µs for its release; the rest "
        "of the server's time is socket I/O, the same per command for every library."
    ),
    "leftover": (
        "Every release leaves a short-lived release latch (`…:latch:<token>`, 10 s) so "
        "that a release retried after a lost reply gets the same answer; the keys expire "
        "on their own."
    ),
    "handoff": (
        "Every contended redlease acquisition is a handoff to another process (strict "
        "FIFO), which needs the waiter's process to be woken and scheduled; on 2 vCPUs "
        "shared by the workers and the server that costs about one round trip under "
        "load. A lock that lets the releasing process re-take the lock, or whose waiter "
        "is already spinning, skips that wake-up on part of its acquisitions."
    ),
    "throughput": (
        "redlease hands every acquisition to another process (its handoff share is "
        "~1.0), and each handoff costs a wake-up and a context switch on a shared 2-vCPU "
        "box. A peer whose releasing process re-takes the lock (a low handoff share) "
        "avoids that, at the price of starving the other waiters (see longest wait). "
        "Letting the releaser re-take the lock for a couple of milliseconds before handing "
        "it on (bounded barging) was measured: no gain at 8 workers, 10-30 % at 16 with "
        "the longest wait near its bound, and a wake-up per turn still owed for a releaser "
        "that does not come back; the default lock keeps the arrival-order hand-off."
    ),
    "fairness": "Not expected: redlease queues waiters in arrival order.",
    "renewal": (
        "One renewal thread per client renews every held lease in pipelined batches, so "
        "CPU grows with the number of leases renewed per second; a peer without "
        "renewal of its own reports nothing here."
    ),
    "async": (
        "The asyncio path runs on `redis.asyncio`, whose own round trip is longer than "
        "the sync client's (see `async_rtt_us`); redlease adds its flow driver and "
        "renewal registration on top, as in the sync cycle."
    ),
    "async_ratio": (
        "The ratio compares each library with its own sync flavour: a peer whose sync "
        "cycle is the slow one (see the sync column) gets a low ratio without a fast "
        "asyncio cycle. Compare the asyncio cycles themselves."
    ),
    "flash": (
        "Every approach but `no_lock` (which oversells) runs one buy at a time, so the "
        "one-at-a-time section is the throughput. A row lock's waiter waits inside the "
        "database with its `SELECT … FOR UPDATE` already sent, and the commit hands the row "
        "over in-process and answers it. A lock outside the database adds to that section "
        "the hand-off (release script, publish, the next buyer's wake-up) and the next "
        "buyer's `BEGIN` and `SELECT` round trips, which the row lock's waiter paid before "
        "its wait. `redis_lua` does the check-and-decrement in one script on the server. "
        "Segments (one lock per stock row) are the answer to the one hot lock."
    ),
    "safety": "Not expected: redlease must never show an overlap or an oversold unit.",
    "errors": "Not expected; see the run's errors in the JSON.",
}
UNKNOWN = "No known reason on file: to be explained in the issue note."


def reason(finding: Finding) -> str:
    return REASONS.get(finding.kind, UNKNOWN)
