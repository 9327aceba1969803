"""Faults: small classes with ``inject`` and ``heal``, each of bounded duration.

Per injection the harness calls ``prepare`` (most faults need nothing), waits until a
worker is inside its critical section (between its reads and its writes; with
``fresh_holder``, one whose lock was granted after ``prepare``), calls ``inject``, waits
``duration(run)`` seconds, then ``heal``; the fault's end is when ``heal`` returns.

``topology`` names the target the fault needs (see :mod:`redlease.chaos.targets`);
``proxied`` puts a proxy link between every worker and the lock server;
``needs_server`` means the fault stops, stalls or restarts a server, so it runs only on
servers the harness started itself. ``expect_unfenced_violations`` marks the faults that
really break mutual exclusion without fencing; the results page says what each did.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from contextlib import suppress
from typing import TYPE_CHECKING, Any, ClassVar

import redis

from redlease.chaos.errors import ChaosError
from redlease.chaos.proxy import Mode
from redlease.chaos.targets import (
    ClusterTarget,
    NamespaceTarget,
    RedlockTarget,
    SentinelTarget,
    SingleTarget,
)
from redlease.server import EmbeddedServer

if TYPE_CHECKING:
    from redlease.chaos.harness import Run, Settings

FAILOVER_TIMEOUT = 30.0
FAILOVER_HOLD = 5.0  # longer than a failover takes, so the holder is still at work after it
FAILOVER_INJECTIONS = 2  # one per replica the topology starts with


class Fault:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    lesson: ClassVar[str] = ""  # what a user should conclude; the results page prints it
    topology: ClassVar[str] = "single"
    proxied: ClassVar[bool] = False
    needs_server: ClassVar[bool] = False
    fresh_holder: ClassVar[bool] = False
    expect_unfenced_violations: ClassVar[bool] = False

    def adjust(self, settings: Settings) -> Settings:
        """The settings this fault runs with (most run with the caller's)."""
        return settings

    def duration(self, run: Run) -> float:
        return 0.0

    def prepare(self, run: Run) -> None:
        """Before waiting for the holder of this injection (nothing by default)."""

    def inject(self, run: Run, holder: str) -> None:
        raise NotImplementedError

    def heal(self, run: Run) -> None:
        """Undo the fault (nothing to undo by default); must be safe to call twice."""

    def ended_at(self, healed: float) -> float:
        """Where recovery time starts: when ``heal`` returned, unless the fault says."""
        return healed


def _window(settings: Settings) -> Settings:
    """A section long enough (0.6 x TTL, still inside the lease) for another worker to be
    let in while the holder works, even on a loaded machine whose workers wake late."""
    return dataclasses.replace(settings, hold=max(settings.hold, 0.6 * settings.ttl))


class Kill(Fault):
    name = "kill"
    summary = "kill -9 the holder inside its critical section; a fresh worker replaces it"
    lesson = (
        "A crashed holder costs one TTL of unavailability and nothing else: its lease expires, "
        "the next worker takes over, and a section cut short wrote nothing."
    )

    def inject(self, run: Run, holder: str) -> None:
        run.kill_worker(holder)
        run.spawn()


class Pause(Fault):
    name = "sigstop"
    summary = "SIGSTOP the holder between its read and its write for 2 x TTL, then SIGCONT"
    lesson = (
        "A paused holder wakes up believing it still holds the lock and writes: mutual "
        "exclusion by lease alone is broken by any pause longer than the TTL. Only the fencing "
        "token, checked by the resource, turns its late write into a refusal."
    )
    expect_unfenced_violations = True

    def __init__(self) -> None:
        self.paused: int | None = None

    def duration(self, run: Run) -> float:
        return 2 * run.settings.ttl + run.settings.hold

    def inject(self, run: Run, holder: str) -> None:
        self.paused = run.pid_of(holder)
        os.kill(self.paused, signal.SIGSTOP)

    def heal(self, run: Run) -> None:
        if self.paused is not None:
            with suppress(ProcessLookupError):
                os.kill(self.paused, signal.SIGCONT)
            self.paused = None


class Expire(Fault):
    name = "pexpire"
    summary = "PEXPIRE the held lease to 1 ms behind the holder's back (a server clock jump)"
    lesson = (
        "A lease that ends early on the server (a clock jump, an operator, eviction) lets a "
        "second holder in while the first is still at work. Fencing refuses the first holder's "
        "write."
    )
    expect_unfenced_violations = True

    def adjust(self, settings: Settings) -> Settings:
        return _window(settings)

    def inject(self, run: Run, holder: str) -> None:
        with run.lock_client() as client:
            client.pexpire(run.lease_key, 1)


class _ServerCommand(Fault):
    """Run one blocking command on the lock server from a thread, for 2 x TTL."""

    needs_server = True

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None

    def command(self, seconds: float) -> tuple[str, ...]:
        raise NotImplementedError

    def duration(self, run: Run) -> float:
        return 2 * run.settings.ttl

    def inject(self, run: Run, holder: str) -> None:
        seconds = self.duration(run)
        command = self.command(seconds)

        def send() -> None:
            with run.lock_client(timeout=seconds + 5) as client, suppress(redis.RedisError):
                untyped: Any = client  # redis-py leaves execute_command untyped
                untyped.execute_command(*command)

        self.thread = threading.Thread(target=send, name=f"chaos-{self.name}", daemon=True)
        self.thread.start()

    def heal(self, run: Run) -> None:
        if self.thread is not None:
            self.thread.join(self.duration(run) + 10)
            self.thread = None


class Stall(_ServerCommand):
    name = "stall"
    summary = "DEBUG SLEEP the lock server for 2 x TTL (every lock command hangs, then resumes)"
    lesson = (
        "A server that stops answering for a while (a long command, a fork, swap) delays "
        "everyone, holder included; leases expire on the server's clock, which also stopped, so "
        "nobody is let in early."
    )

    def command(self, seconds: float) -> tuple[str, ...]:
        return ("DEBUG", "SLEEP", f"{seconds:.3f}")


class ClientPause(_ServerCommand):
    name = "client-pause"
    summary = "CLIENT PAUSE ALL on the lock server for 2 x TTL (commands queue, expiry stops)"
    lesson = (
        "CLIENT PAUSE queues every command and stops expiry; when it ends, the queued commands "
        "run in order. No one is let in early."
    )

    def command(self, seconds: float) -> tuple[str, ...]:
        # CLIENT PAUSE returns at once; the thread's join in heal() is then immediate.
        return ("CLIENT", "PAUSE", str(int(seconds * 1000)), "ALL")


class Restart(Fault):
    name = "restart"
    summary = "kill -9 the lock server and restart it at once with no persistence (empty)"
    lesson = (
        "A lock server that restarts empty forgets the lock and its fencing counter: a second "
        "holder is let in at once, and its tokens start again from 1. The guard refuses those "
        "low tokens until the counter passes the highest one it has seen (the refused writes "
        "are the price); re-seed or persist the counter when you restore a server."
    )
    needs_server = True
    expect_unfenced_violations = True

    def adjust(self, settings: Settings) -> Settings:
        return _window(settings)

    def inject(self, run: Run, holder: str) -> None:
        server = _lock_server(run)
        server.kill()
        server.start()


class DelayedRestart(Fault):
    name = "restart-delayed"
    summary = "kill -9 the lock server, keep it down for 2 x TTL, then restart it empty"
    lesson = (
        "Keeping a crashed server down for longer than the TTL (Redlock's 'delayed restart' "
        "rule) means every lease it granted has expired before it answers again: no overlap, at "
        "the cost of downtime. The counter still restarts from 1, so the guard refuses writes "
        "until the counter passes the highest token it saw."
    )
    needs_server = True

    def __init__(self) -> None:
        self.server: EmbeddedServer | None = None

    def duration(self, run: Run) -> float:
        return 2 * run.settings.ttl

    def inject(self, run: Run, holder: str) -> None:
        self.server = _lock_server(run)
        self.server.kill()

    def heal(self, run: Run) -> None:
        if self.server is not None:
            self.server.start()
            self.server = None


class _HolderLink(Fault):
    """A fault on the proxy link between the holder and the lock server."""

    proxied = True
    mode: ClassVar[Mode] = Mode.FORWARD

    def __init__(self) -> None:
        self.holder: str | None = None

    def delay(self, run: Run) -> float:
        return 0.0

    def inject(self, run: Run, holder: str) -> None:
        self.holder = holder
        _single(run).links[holder].set(delay=self.delay(run), mode=self.mode)

    def heal(self, run: Run) -> None:
        if self.holder is not None:
            _single(run).links[self.holder].set()
            self.holder = None


class Latency(_HolderLink):
    name = "latency"
    summary = "delay every reply to the holder by 0.9 x TTL for 4 x TTL (a slow link)"
    lesson = (
        "A slow link makes the lease's usable time shorter: redlease counts the TTL from when "
        "the request left, so a holder whose reply arrives late knows how little lease it has "
        "left. Holders that act on an expired lease are stopped by the guard."
    )

    def delay(self, run: Run) -> float:
        return 0.9 * run.settings.ttl

    def duration(self, run: Run) -> float:
        return 4 * run.settings.ttl


class DropReply(_HolderLink):
    name = "drop"
    summary = "drop the next reply to the holder and reset its connection (ambiguous outcome)"
    lesson = (
        "A lost reply leaves the client not knowing whether its command ran. redlease's release "
        "is idempotent (a retried release of an already released lease reports it released), "
        "and an unacknowledged grant simply expires after one TTL."
    )
    mode = Mode.DROP

    def duration(self, run: Run) -> float:
        return 2 * run.settings.hold + run.settings.ttl


class BlackHole(_HolderLink):
    name = "blackhole"
    summary = "black-hole the holder's link to the lock server for 2 x TTL, then heal it"
    lesson = (
        "A link that silently stops delivering for a while: the holder's release arrives after "
        "its lease expired and must not (and does not) delete the next holder's lock; the "
        "others take over after one TTL."
    )
    mode = Mode.BLACKHOLE

    def duration(self, run: Run) -> float:
        return 2 * run.settings.ttl


class Partition(Fault):
    name = "partition"
    summary = (
        "take the holder's network down (its own namespace and veth) for 2 x TTL: "
        "its lock and data traffic wait in TCP retransmission"
    )
    lesson = (
        "A real network partition delays the holder's writes to the resource as well as its "
        "lock traffic: TCP delivers them after the partition heals, long after the lease "
        "expired and another holder wrote. Without fencing that late write silently overwrites "
        "newer data; with fencing it is refused."
    )
    topology = "netns"
    needs_server = True
    expect_unfenced_violations = True

    def __init__(self) -> None:
        self.holder: str | None = None

    def duration(self, run: Run) -> float:
        return 2 * run.settings.ttl

    def inject(self, run: Run, holder: str) -> None:
        self.holder = holder
        _namespaces(run).cut(holder, down=True)

    def heal(self, run: Run) -> None:
        if self.holder is not None:
            _namespaces(run).cut(self.holder, down=False)
            self.holder = None


class _Failover(Fault):
    """Replication falls behind, then the master dies with a holder at work.

    ``prepare`` freezes the replicas of the lock's master, so the next grant (and its
    fencing increment) reaches the master only; once that holder is inside its critical
    section, the master is killed and the replicas thawed. A replica that never saw the
    grant is promoted, and the lock is free again while its holder still works: what an
    asynchronous failover really does. Holders renew (``renew=True``), so nothing but the
    failover ends their lease.
    """

    needs_server = True
    fresh_holder = True
    expect_unfenced_violations = True

    def __init__(self) -> None:
        self.frozen: list[EmbeddedServer] = []
        self.old_master: EmbeddedServer | None = None
        self.killed_at = 0.0

    def adjust(self, settings: Settings) -> Settings:
        return dataclasses.replace(
            settings,
            hold=FAILOVER_HOLD,
            renew=True,
            settle=FAILOVER_HOLD + settings.settle,
            injections=min(settings.injections, FAILOVER_INJECTIONS),
        )

    def master_and_replicas(self, run: Run) -> tuple[EmbeddedServer, list[EmbeddedServer]]:
        raise NotImplementedError

    def promoted(self, run: Run, old: EmbeddedServer) -> bool:
        raise NotImplementedError

    def prepare(self, run: Run) -> None:
        master, replicas = self.master_and_replicas(run)
        if not replicas:
            raise ChaosError(f"scenario {self.name}: the lock's master has no replica left")
        self.old_master = master
        self.frozen = replicas
        for replica in replicas:
            replica.pause()

    def inject(self, run: Run, holder: str) -> None:
        assert self.old_master is not None
        self.old_master.kill()
        self.killed_at = time.monotonic()
        self._thaw()

    def ended_at(self, healed: float) -> float:
        """Recovery counts from the master's death: the failover is part of the outage."""
        return self.killed_at

    def heal(self, run: Run) -> None:
        self._thaw()
        old, self.old_master = self.old_master, None
        if old is None:
            return
        deadline = time.monotonic() + FAILOVER_TIMEOUT
        while time.monotonic() < deadline:
            with suppress(redis.RedisError, ChaosError):
                if self.promoted(run, old):
                    return
            time.sleep(0.05)
        raise ChaosError(f"scenario {self.name}: no replica took over within 30 s")

    def _thaw(self) -> None:
        for replica in self.frozen:
            replica.resume()
        self.frozen = []


class SentinelFailover(_Failover):
    name = "sentinel-failover"
    summary = "Sentinel: freeze the replicas, kill -9 the master under a holder; a replica wins"
    lesson = (
        "Sentinel replication is asynchronous: a grant that had not reached the replica is lost "
        "in the failover, and a second holder is let in while the first is still working (its "
        "renewal then reports the lease lost, too late for writes in flight). The fencing "
        "counter can repeat a token after the failover; the guard refuses an equal token from a "
        "different owner."
    )
    topology = "sentinel"

    def master_and_replicas(self, run: Run) -> tuple[EmbeddedServer, list[EmbeddedServer]]:
        topology = _target(run, SentinelTarget).topology
        master = topology.master()
        return master, [s for s in topology.servers if s is not master and s.pid is not None]

    def promoted(self, run: Run, old: EmbeddedServer) -> bool:
        topology = _target(run, SentinelTarget).topology
        return bool(topology.master_address()[1] != old.port)


class ClusterFailover(_Failover):
    name = "cluster-failover"
    summary = "Cluster: freeze the slot's replicas, kill -9 its master under a holder"
    lesson = (
        "Cluster failover has the same asynchronous-replication hole as Sentinel: a promoted "
        "replica that never saw the grant lets a second holder in. Fencing keeps the data "
        "exact; WAIT (`replicas=N`) narrows the window but is not consensus."
    )
    topology = "cluster"

    def master_and_replicas(self, run: Run) -> tuple[EmbeddedServer, list[EmbeddedServer]]:
        topology = _target(run, ClusterTarget).topology
        master = topology.master_for_key(run.lease_key)
        return master, topology.replicas_of(master)

    def promoted(self, run: Run, old: EmbeddedServer) -> bool:
        topology = _target(run, ClusterTarget).topology
        if topology.master_for_key(run.lease_key) is old:
            return False
        topology.wait_until_ok(FAILOVER_TIMEOUT)
        return True


class RedlockPartition(Fault):
    """Redlock over five masters, with two of them cut off from each side of the workers.

    Odd workers reach masters 1-3 only, even workers masters 3-5, so every quorum needs
    the shared master 3. With a holder at work, master 3 restarts without persistence:
    the other side wins 3, 4 and 5 while the holder still holds 1, 2 and (it thinks) 3.
    This is the restart that Redlock's "delayed restart" rule forbids.
    """

    name = "redlock-partition"
    summary = "Redlock on 5 masters, two cut off from each side; the shared one restarts empty"
    lesson = (
        "Redlock's majority holds only while masters keep what they granted. With two masters "
        "cut off from each side, the shared master restarting without persistence gives the "
        "other side a majority while the holder still works. Fencing (redlease's token is "
        "lifted on every master of the quorum) refuses the stale holder's write."
    )
    topology = "redlock"
    needs_server = True
    fresh_holder = True
    expect_unfenced_violations = True
    SHARED = 2

    def adjust(self, settings: Settings) -> Settings:
        """Hold for 2 x TTL with renewal, so only the restart can end the holder's lease."""
        hold = max(settings.hold, 2 * settings.ttl)
        return dataclasses.replace(settings, hold=hold, renew=True, settle=settings.settle + hold)

    def prepare(self, run: Run) -> None:
        target = _target(run, RedlockTarget)
        for worker, links in target.links.items():
            cut = (3, 4) if int(worker.lstrip("w")) % 2 else (0, 1)
            for index in cut:
                links[index].set(mode=Mode.REFUSE)

    def inject(self, run: Run, holder: str) -> None:
        server = _target(run, RedlockTarget).masters[self.SHARED]
        server.kill()
        server.start()


def _target(run: Run, kind: type[Any]) -> Any:
    if not isinstance(run.target, kind):
        raise ChaosError(f"scenario {run.fault.name} needs a {kind.kind} target")
    return run.target


def _single(run: Run) -> SingleTarget:
    target: SingleTarget = _target(run, SingleTarget)
    return target


def _namespaces(run: Run) -> NamespaceTarget:
    target: NamespaceTarget = _target(run, NamespaceTarget)
    return target


def _lock_server(run: Run) -> EmbeddedServer:
    server = _single(run).lock_server
    if server is None:
        raise ChaosError(f"scenario {run.fault.name} needs a private lock server")
    return server


FAULTS: dict[str, type[Fault]] = {
    fault.name: fault
    for fault in (
        Pause,
        Expire,
        Kill,
        Stall,
        ClientPause,
        Restart,
        DelayedRestart,
        Latency,
        DropReply,
        BlackHole,
        Partition,
        SentinelFailover,
        ClusterFailover,
        RedlockPartition,
    )
}
