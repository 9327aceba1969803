"""Faults on the holder's network: through the harness's proxy, or a real partition.

A proxied worker reaches the lock server through proxy links of its own (one for its lock
traffic, one for its probe leases); a fault changes every link of the holder at once.
``partition`` takes down the holder's virtual cable instead, in the kernel.
"""

from __future__ import annotations

from typing import ClassVar

from redlease.chaos.fault import Detects, Fault, Scene, namespaces, single
from redlease.chaos.proxy import Mode


class _HolderLink(Fault):
    """A fault on the proxy links between the holder and the lock server."""

    proxied = True
    detects = Detects.DEADLINE
    mode: ClassVar[Mode] = Mode.FORWARD

    def __init__(self) -> None:
        super().__init__()
        self.holder: str | None = None

    def delay(self, run: Scene) -> float:
        return 0.0

    def inject(self, run: Scene, holder: str) -> None:
        self.holder = holder
        for link in single(self, run.target).links[holder]:
            link.set(delay=self.delay(run), mode=self.mode)

    def heal(self, run: Scene) -> None:
        if self.holder is not None:
            for link in single(self, run.target).links[self.holder]:
                link.set()
            self.holder = None


class Latency(_HolderLink):
    name = "latency"
    summary = "delay every reply to the holder by 0.9 x TTL for 4 x TTL (a slow link)"
    lesson = (
        "A slow link makes the lease's usable time shorter: redlease counts the TTL from when "
        "the request left, so a holder whose reply arrives late knows how little lease it has "
        "left. Holders that act on an expired lease are stopped by the guard."
    )

    def delay(self, run: Scene) -> float:
        return 0.9 * run.settings.ttl

    def duration(self, run: Scene) -> float:
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

    def duration(self, run: Scene) -> float:
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

    def duration(self, run: Scene) -> float:
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
    detects = Detects.DEADLINE

    def __init__(self) -> None:
        super().__init__()
        self.holder: str | None = None

    def duration(self, run: Scene) -> float:
        return 2 * run.settings.ttl

    def inject(self, run: Scene, holder: str) -> None:
        self.holder = holder
        namespaces(self, run.target).cut(holder, down=True)

    def heal(self, run: Scene) -> None:
        if self.holder is not None:
            namespaces(self, run.target).cut(self.holder, down=False)
            self.holder = None
