"""Faults on a replicated or quorum topology: failovers that lose a grant, and Redlock
with the shared master restarting empty.

These hold the lock with renewal for longer than the fault takes, so nothing but the
fault ends the holder's lease.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import suppress

import redis

from redlease.chaos.errors import ChaosError
from redlease.chaos.fault import Fault, Scene, target_of
from redlease.chaos.proxy import Mode
from redlease.chaos.settings import Settings
from redlease.chaos.targets import ClusterTarget, RedlockTarget, SentinelTarget
from redlease.server import EmbeddedServer

FAILOVER_TIMEOUT = 30.0
FAILOVER_HOLD = 5.0  # longer than a failover takes, so the holder is still at work after it
FAILOVER_INJECTIONS = 2  # one per replica the topology starts with


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
        super().__init__()
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

    def master_and_replicas(self, run: Scene) -> tuple[EmbeddedServer, list[EmbeddedServer]]:
        raise NotImplementedError

    def promoted(self, run: Scene, old: EmbeddedServer) -> bool:
        raise NotImplementedError

    def prepare(self, run: Scene) -> None:
        master, replicas = self.master_and_replicas(run)
        if not replicas:
            raise ChaosError(f"scenario {self.name}: the lock's master has no replica left")
        self.old_master = master
        self.frozen = replicas
        for replica in replicas:
            replica.pause()

    def inject(self, run: Scene, holder: str) -> None:
        assert self.old_master is not None
        self.old_master.kill()
        self.killed_at = time.monotonic()
        self._thaw()

    def ended_at(self, healed: float) -> float:
        """Recovery counts from the master's death: the failover is part of the outage."""
        return self.killed_at

    def heal(self, run: Scene) -> None:
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

    def master_and_replicas(self, run: Scene) -> tuple[EmbeddedServer, list[EmbeddedServer]]:
        topology = target_of(self, run.target, SentinelTarget).topology
        master = topology.master()
        return master, [s for s in topology.servers if s is not master and s.pid is not None]

    def promoted(self, run: Scene, old: EmbeddedServer) -> bool:
        topology = target_of(self, run.target, SentinelTarget).topology
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

    def master_and_replicas(self, run: Scene) -> tuple[EmbeddedServer, list[EmbeddedServer]]:
        topology = target_of(self, run.target, ClusterTarget).topology
        master = topology.master_for_key(run.lease_key)
        return master, topology.replicas_of(master)

    def promoted(self, run: Scene, old: EmbeddedServer) -> bool:
        topology = target_of(self, run.target, ClusterTarget).topology
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

    def prepare(self, run: Scene) -> None:
        target = target_of(self, run.target, RedlockTarget)
        for worker, links in target.links.items():
            cut = (3, 4) if int(worker.lstrip("w")) % 2 else (0, 1)
            for index in cut:
                links[index].set(mode=Mode.REFUSE)

    def inject(self, run: Scene, holder: str) -> None:
        server = target_of(self, run.target, RedlockTarget).masters[self.SHARED]
        server.kill()
        server.start()
