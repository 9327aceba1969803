"""Contended runs: N worker processes on one key, and what their merged logs show.

The parent starts the workers, waits until each has warmed up, takes an EVALSHA
reference and an ``INFO commandstats`` snapshot, then gives one shared start time. While
the workers run, a sampler thread in the parent times one EVALSHA every
``SAMPLE_EVERY_S`` (the round trip *under* this load); its calls are subtracted from the
server's command counts.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections import Counter
from typing import Any

import redis

from counting import delta, get_while_alive, server_commands, server_cpu_s
from stats import percentile
from uncontended import RTT_KEY, RTT_SCRIPT, evalsha_rtt
from workers import WorkerSpec, contended_worker

READY_TIMEOUT_S = 90.0
RESULT_GRACE_S = 60.0
SAMPLE_EVERY_S = 0.02
START_DELAY_S = 0.1


class _LoadedRtt(threading.Thread):
    """Time one EVALSHA every ``SAMPLE_EVERY_S`` until stopped (bounded by a deadline)."""

    def __init__(self, client: redis.Redis, deadline: float) -> None:
        super().__init__(name="rlbench-rtt-sampler", daemon=True)
        self.client = client
        self.deadline = deadline
        self.samples: list[float] = []
        self.stopping = threading.Event()
        self.sha = client.script_load(RTT_SCRIPT)

    def run(self) -> None:
        while not self.stopping.wait(SAMPLE_EVERY_S) and time.monotonic() < self.deadline:
            sent = time.monotonic()
            self.client.evalsha(self.sha, 1, RTT_KEY)
            self.samples.append((time.monotonic() - sent) * 1e6)


def run_contended(
    url: str, library: str, workers: int, duration_s: float, tag: str
) -> dict[str, Any]:
    """One run of ``workers`` processes on one fresh key; raw figures of that run."""
    admin = redis.Redis.from_url(url)
    key = f"rlbench:contended:{library}:{tag}"
    counter_key = f"rlbench:counter:{library}:{tag}"
    admin.set(counter_key, 0)
    context = multiprocessing.get_context("spawn")
    ready, results = context.Queue(), context.Queue()
    go, leave = context.Event(), context.Event()
    start_at = context.Value("d", 0.0)
    spec = WorkerSpec(library, url, key, counter_key, duration_s)
    processes = [
        context.Process(
            target=contended_worker,
            args=(spec, ready, go, start_at, results, leave),
            name=f"rlbench-{library}-{index}",
            daemon=True,
        )
        for index in range(workers)
    ]
    for process in processes:
        process.start()
    reports: list[dict[str, Any]] = []
    sampler: _LoadedRtt | None = None
    try:
        for _ in processes:
            get_while_alive(ready, processes, READY_TIMEOUT_S)
        idle_rtt = evalsha_rtt(admin, 300, 2.0).us
        sampler = _LoadedRtt(
            redis.Redis.from_url(url), time.monotonic() + duration_s + RESULT_GRACE_S
        )
        before, cpu_before = server_commands(admin), server_cpu_s(admin)
        start_at.value = time.monotonic() + START_DELAY_S
        go.set()
        sampler.start()
        deadline = time.monotonic() + START_DELAY_S + duration_s + RESULT_GRACE_S
        for _ in processes:
            reports.append(get_while_alive(results, processes, deadline - time.monotonic()))
        sampler.stopping.set()
        sampler.join(5.0)
        ran = delta(before, server_commands(admin))
        server_cpu = server_cpu_s(admin) - cpu_before
    except queue.Empty:
        return {"error": f"{library}: a worker died or did not report in time", "workers": workers}
    finally:
        if sampler is not None:
            sampler.stopping.set()
        leave.set()
        for process in processes:
            process.join(10.0)
            if process.is_alive():
                process.terminate()
                process.join(5.0)
    ran["evalsha"] -= len(sampler.samples)
    counter = int(admin.get(counter_key) or 0)
    admin.close()
    return analyse(reports, ran, counter, start_at.value, duration_s, server_cpu) | {
        "workers": workers,
        "idle_rtt_us": idle_rtt,
        "loaded_rtt_us": percentile(sampler.samples, 0.5),
    }


def analyse(
    reports: list[dict[str, Any]],
    ran: Counter[str],
    counter: int,
    begin: float,
    duration_s: float,
    server_cpu_s: float,
) -> dict[str, Any]:
    """Merge the workers' logs on the shared clock into handoff, wait and overlap figures."""
    entries = sorted(
        (acquired, releasing, requested, report["pid"])
        for report in reports
        for requested, acquired, releasing in report["log"]
    )
    handoffs = []
    overlaps = 0
    latest_release = float("-inf")
    for index, (acquired, releasing, _requested, pid) in enumerate(entries):
        if acquired < latest_release:
            overlaps += 1
        latest_release = max(latest_release, releasing)
        if index:
            _, previous_release, _, previous_pid = entries[index - 1]
            if previous_pid != pid:
                handoffs.append((acquired - previous_release) * 1e6)
    total = len(entries)
    in_window = sum(1 for entry in entries if begin <= entry[0] <= begin + duration_s)
    waits = [(acquired - requested) for acquired, _, requested, _ in entries]
    sent: Counter[str] = Counter()
    for report in reports:
        sent.update(report["sent"])
    ran["get"] -= total
    ran["set"] -= total
    ran = +ran
    per_worker = [len(report["log"]) for report in reports]
    return {
        "acquisitions": total,
        "acquires_per_s": in_window / duration_s,
        "handoff_p50_us": percentile(handoffs, 0.5),
        "handoff_p99_us": percentile(handoffs, 0.99),
        "handoff_share": len(handoffs) / (total - 1) if total > 1 else None,
        "longest_wait_ms": max(waits) * 1e3 if waits else None,
        "wait_p50_ms": percentile(waits, 0.5) * 1e3 if waits else None,
        "commands_per_acquire": sum(ran.values()) / total if total else None,
        "client_commands_per_acquire": sum(sent.values()) / total if total else None,
        "server_cpu_us_per_acquire": server_cpu_s * 1e6 / total if total else None,
        "server_commands": dict(sorted(ran.items())),
        "client_commands": dict(sorted(sent.items())),
        "overlaps": overlaps,
        "counter_mismatch": counter - total,
        "per_worker_min": min(per_worker),
        "per_worker_max": max(per_worker),
        "errors": [report["error"] for report in reports if report["error"]],
    }
