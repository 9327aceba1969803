"""A real Redis Cluster on loopback ports, built in Python (no ``redis-cli``)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from redlease.errors import InvalidArgument
from redlease.processes import free_port
from redlease.server import EmbeddedServer, ServerStartError, find_server_binary
from redlease.topology._admin import (
    DATA_ARGS,
    HOST,
    NODE_ATTEMPTS,
    command,
    info,
    link_is_up,
    role,
    wait_for,
)
from redlease.topology.errors import TopologyError, TopologyUnsupported

__all__ = ["LocalCluster"]

SLOT_COUNT = 16384


@dataclass(frozen=True)
class _ClusterNode:
    """One line of ``CLUSTER NODES``."""

    node_id: str
    port: int
    bus_port: int
    flags: frozenset[str]
    master_id: str | None
    slots: tuple[str, ...]

    @property
    def is_master(self) -> bool:
        return "master" in self.flags

    @property
    def slot_count(self) -> int:
        """Slots this node owns; ``[slot->-node]`` migration entries are not counted."""
        count = 0
        for slots in self.slots:
            if not slots.startswith("["):
                first, _, last = slots.partition("-")
                count += int(last or first) - int(first) + 1
        return count

    @property
    def is_healthy(self) -> bool:
        return not self.flags & {"fail", "fail?", "handshake", "noaddr"}


class LocalCluster:
    """A Redis Cluster of ``masters`` masters with ``replicas_per_master`` replicas each.

    ``url`` names one master; ``redis.cluster.RedisCluster.from_url(url)`` discovers the
    rest. Roles change with :meth:`failover` and :meth:`kill`, so :meth:`masters`,
    :meth:`replicas` and :meth:`master_for_key` ask the running nodes every time.
    """

    def __init__(
        self,
        masters: int = 3,
        replicas_per_master: int = 1,
        *,
        binary: str | None = None,
        node_timeout_ms: int = 1000,
        args: Sequence[str] = (),
        timeout: float = 30.0,
    ) -> None:
        if masters < 1 or replicas_per_master < 0:
            raise InvalidArgument("a cluster needs at least one master and no negative replicas")
        self._master_count = masters
        self._replicas_per_master = replicas_per_master
        self._binary = binary
        self._node_timeout_ms = node_timeout_ms
        self._args = tuple(args)
        self._timeout = timeout
        self._nodes: list[EmbeddedServer] = []
        self._directory: Path | None = None

    @property
    def nodes(self) -> list[EmbeddedServer]:
        """Every node this cluster started, in start order (the first ones began as masters)."""
        return list(self._nodes)

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>`` of a running master (the first one found)."""
        masters = self.masters()
        if not masters:
            raise TopologyError(f"no node of {self!r} answers as master")
        return f"redis://{HOST}:{masters[0].port}"

    def start(self) -> LocalCluster:
        """Start the nodes, build the cluster and wait until it is ok; idempotent."""
        if self._nodes:
            return self
        binary = find_server_binary(self._binary)
        self._directory = Path(tempfile.mkdtemp(prefix="redlease-cluster-"))
        try:
            self._start_nodes(binary, self._directory)
            self._build()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node and remove the cluster's files; idempotent."""
        for node in self._nodes:
            node.stop(timeout=2.0)
        self._nodes = []
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def masters(self) -> list[EmbeddedServer]:
        """The running nodes that answer ``ROLE`` with master, in start order."""
        return [node for node, role in self._roles() if role[0] == "master"]

    def replicas(self) -> list[EmbeddedServer]:
        """The running nodes that answer ``ROLE`` with slave, in start order."""
        return [node for node, role in self._roles() if role[0] == "slave"]

    def replicas_of(self, master: EmbeddedServer) -> list[EmbeddedServer]:
        """The running nodes that replicate ``master``, in start order."""
        return [node for node, role in self._roles() if _replicates(role, master.port)]

    def master_for_key(self, key: str | bytes) -> EmbeddedServer:
        """The node serving ``key``'s slot, according to the running masters."""
        slot = key_slot(key.encode() if isinstance(key, str) else key)
        for node in self.masters():
            with suppress(redis.RedisError):
                for start, end, owner, *_ in command(node.port, "CLUSTER", "SLOTS"):
                    if int(start) <= slot <= int(end):
                        return self._node_on_port(int(owner[1]))
        raise TopologyError(f"no running master could say which node serves slot {slot}")

    def failover(self, master: EmbeddedServer, timeout: float | None = None) -> EmbeddedServer:
        """Promote a replica of ``master`` and wait until the cluster is ok; return it.

        The replica is asked for ``CLUSTER FAILOVER`` (no write is lost when the master
        answers); if it is not master within half the time, ``CLUSTER FAILOVER TAKEOVER``
        (which needs neither the master nor a vote).
        """
        timeout = self._timeout if timeout is None else timeout
        replicas = self.replicas_of(master)
        if not replicas:
            raise TopologyError(f"{master!r} has no running replica to promote")
        replica = replicas[0]
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        for option in ((), ("TAKEOVER",)):
            remaining = deadline - time.monotonic()
            try:
                command(replica.port, "CLUSTER", "FAILOVER", *option)
                wait_for(
                    f"{replica!r} to become master",
                    lambda: role(replica.port)[0] == "master",
                    remaining if option else remaining / 2,
                )
            except (redis.RedisError, TopologyError) as error:
                last_error = error
                continue
            break
        else:
            raise TopologyError(
                f"{replica!r} did not become master within {timeout:g} s: {last_error}"
            )
        self.wait_until_ok(max(deadline - time.monotonic(), 1.0))
        return replica

    def kill(self, node: EmbeddedServer) -> None:
        """SIGKILL ``node``, as a crash would; its replica takes over after the node timeout.

        ``node.restart()`` brings it back with the same identity (its cluster state lives
        outside the node's own directory) and no data; once a replica has taken its
        slots, it rejoins as a replica of that node.
        """
        node.kill()

    def wait_until_ok(self, timeout: float | None = None) -> None:
        """Wait until every running node says ``cluster_state:ok`` and agrees on the masters."""
        wait_for(
            "the cluster to be ok",
            self._agreed,
            self._timeout if timeout is None else timeout,
        )

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = ",".join(str(node.port) for node in self._nodes) or "not started"
        return f"<LocalCluster {ports}>"

    def _start_nodes(self, binary: str, directory: Path) -> None:
        total = self._master_count * (1 + self._replicas_per_master)
        for index in range(total):
            self._nodes.append(self._start_node(binary, directory / f"nodes-{index}.conf"))
        enabled = info(self._nodes[0].port, "cluster").get("cluster_enabled")
        if str(enabled) != "1":
            raise TopologyUnsupported(f"{binary} did not enable cluster mode")

    def _start_node(self, binary: str, config_file: Path) -> EmbeddedServer:
        """One node; a new bus port if another process took the one we picked."""
        for attempt in range(NODE_ATTEMPTS):
            node = EmbeddedServer(
                binary=binary,
                args=(
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(config_file),
                    "--cluster-port", str(free_port(HOST)),
                    "--cluster-node-timeout", str(self._node_timeout_ms),
                    "--cluster-allow-replica-migration", "no",
                    "--cluster-replica-validity-factor", "0",
                    *DATA_ARGS,
                    *self._args,
                ),
            )  # fmt: skip
            try:
                node.start()
            except ServerStartError as error:
                if "FATAL CONFIG" in str(error):  # an option this server does not know
                    raise TopologyUnsupported(f"{binary} cannot run a cluster: {error}") from None
                if attempt == NODE_ATTEMPTS - 1:
                    raise
                continue
            return node
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _build(self) -> None:
        deadline = time.monotonic() + self._timeout
        masters = self._nodes[: self._master_count]
        replicas = self._nodes[self._master_count :]
        ids = {node.port: command(node.port, "CLUSTER", "MYID") for node in self._nodes}
        bounds = [SLOT_COUNT * i // len(masters) for i in range(len(masters) + 1)]
        for index, master in enumerate(masters):
            # Distinct epochs up front, as redis-cli does: no collision round to resolve.
            command(master.port, "CLUSTER", "SET-CONFIG-EPOCH", index + 1)
            _add_slots(master.port, bounds[index], bounds[index + 1] - 1)
        # Every pair meets directly: waiting for gossip to spread the news takes ~1 s more.
        bus_ports = {
            entry.port: entry.bus_port
            for node in self._nodes
            for entry in _cluster_nodes(node.port)
            if "myself" in entry.flags
        }
        for index, node in enumerate(self._nodes):
            for other in self._nodes[index + 1 :]:
                command(node.port, "CLUSTER", "MEET", HOST, other.port, bus_ports[other.port])
        wait_for(
            "every node to know every other node",
            lambda: all(self._knows_everyone(node, set(ids.values())) for node in self._nodes),
            deadline - time.monotonic(),
        )
        for index, replica in enumerate(replicas):
            master = masters[index % len(masters)]
            command(replica.port, "CLUSTER", "REPLICATE", ids[master.port])
        wait_for(
            "the replicas to sync with their masters",
            lambda: all(link_is_up(replica.port) for replica in replicas),
            deadline - time.monotonic(),
        )
        self.wait_until_ok(deadline - time.monotonic())

    def _knows_everyone(self, node: EmbeddedServer, ids: set[str]) -> bool:
        seen = _cluster_nodes(node.port)
        return {entry.node_id for entry in seen if entry.is_healthy} == ids

    def _agreed(self) -> bool:
        """The nodes that answer are ok and see the same masters, each a real master.

        A node that does not answer (a paused one) is left out: the others will judge
        it failed and stop counting on it.
        """
        views: set[frozenset[int]] = set()
        for node in self._running():
            try:
                state = _cluster_info(node.port).get("cluster_state")
                entries = _cluster_nodes(node.port)
            except (redis.ConnectionError, redis.TimeoutError):
                continue
            # A master only suspected (fail?) still counts as up for cluster_state; require
            # that healthy masters alone cover every slot.
            serving = [entry for entry in entries if entry.is_master and entry.is_healthy]
            if state != "ok" or sum(entry.slot_count for entry in serving) != SLOT_COUNT:
                return False
            views.add(frozenset(entry.port for entry in serving if entry.slot_count))
        if len(views) != 1:
            return False
        return all(role(port)[0] == "master" for port in views.pop())

    def _roles(self) -> list[tuple[EmbeddedServer, list[Any]]]:
        roles = []
        for node in self._running():
            with suppress(redis.RedisError):
                roles.append((node, role(node.port)))
        return roles

    def _running(self) -> list[EmbeddedServer]:
        return [node for node in self._nodes if node.pid is not None]

    def _node_on_port(self, port: int) -> EmbeddedServer:
        for node in self._nodes:
            if node.port == port:
                return node
        raise TopologyError(f"port {port} is not a node of {self!r}")


def _replicates(role: list[Any], master_port: int) -> bool:
    return role[0] == "slave" and int(role[2]) == master_port


def _add_slots(port: int, first: int, last: int) -> None:
    try:
        command(port, "CLUSTER", "ADDSLOTSRANGE", first, last)
    except redis.ResponseError:  # before Redis 7.0
        command(port, "CLUSTER", "ADDSLOTS", *range(first, last + 1))


def _cluster_info(port: int) -> dict[str, str]:
    text: str = command(port, "CLUSTER", "INFO")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _cluster_nodes(port: int) -> list[_ClusterNode]:
    nodes = []
    for line in str(command(port, "CLUSTER", "NODES")).splitlines():
        fields = line.split()
        node_id, address, flags, master_id = fields[:4]
        slots = fields[8:]
        host_port, bus_port = address.split("@")
        nodes.append(
            _ClusterNode(
                node_id=node_id,
                port=int(host_port.rsplit(":", 1)[1]),
                bus_port=int(bus_port.split(",")[0]),
                flags=frozenset(flags.split(",")),
                master_id=None if master_id == "-" else master_id,
                slots=tuple(slots),
            )
        )
    return nodes
