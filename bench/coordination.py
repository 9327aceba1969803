"""The coordination claims: ZooKeeper and etcd against redlease and its Redlock.

    python bench/coordination.py [--quick] [--json]

The seeds claim ZooKeeper is both more reliable and faster than Redlock. This measures
the "faster" half on one machine, every system on private loopback servers that the
benchmark starts and stops itself:

* ``redlease``: one Valkey (``EmbeddedServer``), ``Locks(url).lock(name)``;
* ``redlock3`` / ``redlock5``: ``redlease.Redlock`` over 3 / 5 Valkey masters;
* ``zookeeper``: a 3-node ensemble, kazoo's ``client.Lock(path)`` recipe;
* ``etcd``: a 3-member cluster, its lock service on a session lease (JSON gateway);
* ``zookeeper1`` / ``etcd1``: the same on a single node, for reference.

Two figures per system. ``cycle_us``: one process, no contention, the mean of acquire +
release over N cycles per rep, the median (and min, max) over reps. ``handoff``: W worker
processes contend for one lock; the time from one holder's release call to the next
holder's acquire returning, lined up on the system-wide monotonic clock, p50 and p99 over
every handoff of every rep; ``acquisitions_per_s`` is the median over reps; ``overlaps``
counts sections that began before the previous one's release call, or a lost increment of
the shared counter (the larger of the two), summed over reps: it must be 0.

The uncontended client talks to the leader of ZooKeeper and etcd (no forwarding hop,
their best case); the workers are spread round-robin over all nodes, as clients are.
ZooKeeper and etcd fsync before they acknowledge a write (their default durability);
the Valkey servers persist nothing. Progress goes to stderr; the table to stdout and,
with ``--json``, one JSON object on the last stdout line.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import queue
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

import redis

from coord_clients import ClientSpec, CoordClient, open_client
from coord_servers import (
    EtcdCluster,
    ZooKeeperEnsemble,
    etcd_missing,
    etcd_version,
    zookeeper_missing,
    zookeeper_version,
)
from coord_worker import WorkerSpec, coordination_worker
from counting import start_together
from stats import median, percentile, rotated
from uncontended import time_loop

SYSTEMS = ("redlease", "redlock3", "redlock5", "zookeeper", "etcd", "zookeeper1", "etcd1")
VALKEY_MASTERS = 5
JOIN_S = 10.0


@dataclass(frozen=True)
class Plan:
    cycles: int
    reps: int
    cycle_budget_s: float  # time cap of one rep's timed cycles
    workers: int
    handoff_s: float
    handoff_reps: int


FULL = Plan(cycles=1000, reps=5, cycle_budget_s=12.0, workers=4, handoff_s=6.0, handoff_reps=3)
QUICK = Plan(cycles=200, reps=2, cycle_budget_s=5.0, workers=4, handoff_s=3.0, handoff_reps=1)


@dataclass
class Target:
    """One system under test: how its uncontended client and each worker connect."""

    system: str
    nodes: int
    cycle_client: ClientSpec
    worker_clients: list[ClientSpec]
    cycles_us: list[float] = field(default_factory=list)
    handoffs_us: list[float] = field(default_factory=list)
    rates: list[float] = field(default_factory=list)
    overlaps: int = 0


def measure(quick: bool, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Start every system, time cycles and handoffs, stop everything; figures per system."""
    plan = QUICK if quick else FULL
    say = progress or (lambda _text: None)
    skipped: dict[str, str] = {}
    with ExitStack() as stack:
        targets, counter_url, valkey = _start(stack, plan, say, skipped)
        _cycles(stack, targets, plan, say, skipped)
        _handoffs(targets, plan, counter_url, say, skipped)
    for name, target in targets.items():
        if name not in skipped and not (target.cycles_us and target.handoffs_us):
            skipped[name] = "no cycle timed, or no handoff between two workers seen"
    figures = {
        name: _figures(target, plan) for name, target in targets.items() if name not in skipped
    }
    return {
        "coordination": figures,
        "versions": _versions(valkey),
        "skipped": skipped,
    }


def _start(
    stack: ExitStack, plan: Plan, say: Callable[[str], None], skipped: dict[str, str]
) -> tuple[dict[str, Target], str, str]:
    """Start the Valkey masters, the counter, and each ZooKeeper and etcd cluster."""
    from redlease.server import EmbeddedServer  # noqa: PLC0415

    say(f"coordination: starting {VALKEY_MASTERS + 1} private Valkey servers")
    servers = []
    for _ in range(VALKEY_MASTERS + 1):
        server = EmbeddedServer()
        stack.callback(server.stop)  # registered first: stopped even if start fails
        server.start()
        servers.append(server)
    counter, masters = servers[0].url, [server.url for server in servers[1:]]
    targets = {
        "redlease": _redis_target("redlease", masters[:1], plan),
        "redlock3": _redis_target("redlock3", masters[:3], plan),
        "redlock5": _redis_target("redlock5", masters[:5], plan),
    }
    for name, nodes in (("zookeeper", 3), ("etcd", 3), ("zookeeper1", 1), ("etcd1", 1)):
        missing = _zookeeper_missing() if name.startswith("zookeeper") else etcd_missing()
        if missing:
            skipped[name] = missing
            continue
        say(f"coordination: starting {name} ({nodes} node{'s' if nodes > 1 else ''})")
        try:
            targets[name] = _cluster_target(stack, name, nodes, plan)
        except Exception as exc:  # one system failing to start must not stop the others
            skipped[name] = f"did not start: {type(exc).__name__}: {exc}"
    return targets, counter, servers[0].info.version or "unknown"


def _zookeeper_missing() -> str | None:
    if importlib.util.find_spec("kazoo") is None:
        return "kazoo not installed; install it with: pip install kazoo (in the bench extra)"
    return zookeeper_missing()


def _redis_target(system: str, urls: list[str], plan: Plan) -> Target:
    spec = ClientSpec(system, tuple(urls))
    return Target(system, len(urls), spec, [spec] * plan.workers)


def _cluster_target(stack: ExitStack, system: str, nodes: int, plan: Plan) -> Target:
    cluster: ZooKeeperEnsemble | EtcdCluster
    if system.startswith("zookeeper"):
        cluster = ZooKeeperEnsemble(nodes)
        stack.enter_context(cluster)
        addresses = cluster.hosts
    else:
        cluster = EtcdCluster(nodes)
        stack.enter_context(cluster)
        addresses = cluster.endpoints

    def starting_at(first: int) -> ClientSpec:
        """All nodes, ``first`` first: kazoo connects to it (the others are fallbacks)."""
        return ClientSpec(system, tuple(addresses[first:] + addresses[:first]))

    return Target(
        system,
        nodes,
        starting_at(cluster.leader()),
        [starting_at(index % nodes) for index in range(plan.workers)],
    )


def _cycles(
    stack: ExitStack,
    targets: dict[str, Target],
    plan: Plan,
    say: Callable[[str], None],
    skipped: dict[str, str],
) -> None:
    """Uncontended cycles; the order of the systems rotates from rep to rep."""
    clients: dict[str, CoordClient] = {}
    for name, target in targets.items():
        try:
            clients[name] = open_client(target.cycle_client)
            stack.callback(clients[name].close)
        except Exception as exc:
            skipped[name] = f"client did not connect: {type(exc).__name__}: {exc}"
    for rep in range(plan.reps):
        for name in _running(clients, rep, skipped):
            say(f"coordination: cycles rep {rep + 1}/{plan.reps}: {name}")
            client = clients[name]

            def one(client: CoordClient = client) -> None:
                client.release(client.acquire("cycle"))

            try:
                targets[name].cycles_us.append(time_loop(one, plan.cycles, plan.cycle_budget_s).us)
            except Exception as exc:
                skipped[name] = f"cycle failed: {type(exc).__name__}: {exc}"


def _running(systems: dict[str, Any], rep: int, skipped: dict[str, str]) -> Iterator[str]:
    """The systems in this rep's order, leaving out any skipped meanwhile."""
    for name in rotated(list(systems), rep):
        if name not in skipped:
            yield name


def _handoffs(
    targets: dict[str, Target],
    plan: Plan,
    counter_url: str,
    say: Callable[[str], None],
    skipped: dict[str, str],
) -> None:
    for rep in range(plan.handoff_reps):
        for name in _running(targets, rep, skipped):
            say(f"coordination: handoff rep {rep + 1}/{plan.handoff_reps}: {name}")
            run = _contend(targets[name], plan, counter_url, f"handoff-{rep}")
            if run.get("error"):
                skipped[name] = f"handoff failed: {run['error']}"
                continue
            target = targets[name]
            target.handoffs_us += run["handoffs_us"]
            target.rates.append(run["in_window"] / plan.handoff_s)
            target.overlaps += max(run["overlaps"], run["lost_updates"])


def _contend(target: Target, plan: Plan, counter_url: str, name: str) -> dict[str, Any]:
    """One run of ``plan.workers`` processes on one lock; the lined-up figures of the run."""
    counter_key = f"rlbench:coord:counter:{target.system}:{name}"
    admin = redis.Redis.from_url(counter_url)
    admin.set(counter_key, 0)
    context = multiprocessing.get_context("spawn")
    ready, results = context.Queue(), context.Queue()
    go, leave = context.Event(), context.Event()
    start_at = context.Value("d", 0.0)
    processes = [
        context.Process(
            target=coordination_worker,
            args=(
                WorkerSpec(client, name, counter_url, counter_key, plan.handoff_s),
                ready,
                go,
                start_at,
                results,
                leave,
            ),
            name=f"rlbench-{target.system}-{index}",
            daemon=True,
        )
        for index, client in enumerate(target.worker_clients)
    ]
    reports: list[dict[str, Any]] = []
    try:
        reports = start_together(processes, ready, go, start_at, results, plan.handoff_s)
    except queue.Empty:
        return {"error": f"{target.system}: a worker died or did not report in time"}
    finally:
        leave.set()
        _join(processes)
    counter = int(admin.get(counter_key) or 0)
    admin.delete(counter_key)
    admin.close()
    errors = [report["error"] for report in reports if report["error"]]
    if errors:
        return {"error": "; ".join(errors)}
    return _line_up(reports, start_at.value, plan.handoff_s) | {
        "lost_updates": sum(len(report["log"]) for report in reports) - counter
    }


def _join(processes: list[Any]) -> None:
    for process in processes:
        process.join(JOIN_S)
        if process.is_alive():
            process.terminate()
            process.join(JOIN_S / 2)


def _line_up(reports: list[dict[str, Any]], begin: float, duration_s: float) -> dict[str, Any]:
    """Merge the workers' logs on the shared clock: handoffs, overlaps, acquisitions in window.

    A handoff is counted only between two different processes (a worker that takes the
    lock again right after releasing it hands nothing off).
    """
    entries = sorted(
        (acquired, releasing, report["pid"])
        for report in reports
        for _requested, acquired, releasing in report["log"]
    )
    handoffs: list[float] = []
    overlaps = 0
    latest_release = float("-inf")
    for index, (acquired, releasing, pid) in enumerate(entries):
        if acquired < latest_release:
            overlaps += 1
        latest_release = max(latest_release, releasing)
        if index and entries[index - 1][2] != pid:
            handoffs.append((acquired - entries[index - 1][1]) * 1e6)
    in_window = sum(1 for entry in entries if begin <= entry[0] <= begin + duration_s)
    return {"handoffs_us": handoffs, "overlaps": overlaps, "in_window": in_window}


def _figures(target: Target, plan: Plan) -> dict[str, Any]:
    return {
        "cycle_us": _number(median(target.cycles_us)),
        "cycle_us_min": _number(min(target.cycles_us)),
        "cycle_us_max": _number(max(target.cycles_us)),
        "handoff_p50_us": _number(percentile(target.handoffs_us, 0.5)),
        "handoff_p99_us": _number(percentile(target.handoffs_us, 0.99)),
        "acquisitions_per_s": _number(median(target.rates)),
        "nodes": target.nodes,
        "workers": plan.workers,
        "overlaps": target.overlaps,
    }


def _number(value: float | None) -> float:
    assert value is not None  # a system without cycles or handoffs is reported as skipped
    return round(float(value), 1)


def _versions(valkey: str) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        kazoo = version("kazoo")
    except PackageNotFoundError:
        kazoo = "not installed"
    return {
        "zookeeper": "not installed" if zookeeper_missing() else zookeeper_version(),
        "etcd": "not installed" if etcd_missing() else etcd_version(),
        "valkey": valkey,
        "kazoo": kazoo,
    }


def render(result: dict[str, Any]) -> str:
    """A small fixed-width table of :func:`measure`'s result."""
    head = (
        f"{'system':<11} {'nodes':>5} {'cycle us':>9} {'(min-max)':>15} "
        f"{'handoff p50':>11} {'p99':>9} {'acq/s':>8} {'workers':>7} {'overlaps':>8}"
    )
    lines = [head, "-" * len(head)]
    for name, row in result["coordination"].items():
        span = f"{row['cycle_us_min']:.0f}-{row['cycle_us_max']:.0f}"
        lines.append(
            f"{name:<11} {row['nodes']:>5} {row['cycle_us']:>9.0f} {span:>15} "
            f"{row['handoff_p50_us']:>11.0f} {row['handoff_p99_us']:>9.0f} "
            f"{row['acquisitions_per_s']:>8.0f} {row['workers']:>7} {row['overlaps']:>8}"
        )
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()))
    lines += [f"skipped {name}: {reason}" for name, reason in result["skipped"].items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run (under 2 min)")
    parser.add_argument("--json", action="store_true", help="print the JSON object last")
    args = parser.parse_args(argv)
    started = time.monotonic()
    result = measure(args.quick, lambda text: print(text, file=sys.stderr, flush=True))
    print(render(result))
    print(f"({time.monotonic() - started:.0f} s)", file=sys.stderr)
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
