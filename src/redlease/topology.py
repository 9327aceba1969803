"""Real Redis Cluster and Sentinel topologies on loopback ports, for failover tests.

:class:`LocalCluster` starts N masters with R replicas each and builds the cluster in
Python (no ``redis-cli``): config epochs, slot ranges, ``CLUSTER MEET``, ``CLUSTER
REPLICATE``. :class:`LocalSentinel` starts a master, its replicas and three sentinels.
Every process is an :class:`~redlease.server.EmbeddedServer`, so each one keeps nothing on
disk but its cluster or sentinel state, listens on 127.0.0.1 only, and dies with the
Python process that started it.

Every wait is bounded: when a topology does not settle in time, :class:`TopologyError`
says what was last seen. A failed ``start`` stops whatever it had started.

Sentinel mode needs its config file as the *first* argument, before any ``--option``,
and ``EmbeddedServer`` puts its own options first; so a sentinel is started through a
two-line ``/bin/sh`` wrapper that ``exec``\\s the server binary with the config file first.
The process id, the death signal and the shutdown path stay those of ``EmbeddedServer``.
"""

from __future__ import annotations

import secrets
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from redlease.errors import InvalidArgument, ServerUnavailable
from redlease.server import EmbeddedServer, ServerStartError, find_server_binary, free_port

__all__ = [
    "LocalCluster",
    "LocalSentinel",
    "TopologyError",
    "TopologyUnsupported",
]

HOST = "127.0.0.1"
SLOT_COUNT = 16384

_PROBE_TIMEOUT = 1.0
_NODE_ATTEMPTS = 3
# Shared by both topologies: an empty data set syncs at once instead of after the
# default five-second wait for more replicas to join a diskless transfer.
_DATA_ARGS = ("--repl-diskless-sync-delay", "0")


class TopologyError(ServerUnavailable):
    """A cluster or sentinel topology did not reach the expected state in time."""


class TopologyUnsupported(TopologyError):
    """The server binary cannot run this topology (no cluster support, for example)."""


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
                for start, end, owner, *_ in _command(node.port, "CLUSTER", "SLOTS"):
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
                _command(replica.port, "CLUSTER", "FAILOVER", *option)
                _wait_for(
                    f"{replica!r} to become master",
                    lambda: _role(replica.port)[0] == "master",
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
        _wait_for(
            "the cluster to be ok",
            self._agreed,
            self._timeout if timeout is None else timeout,
        )

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = ",".join(str(node.port) for node in self._nodes) or "not started"
        return f"<LocalCluster {ports}>"

    def _start_nodes(self, binary: str, directory: Path) -> None:
        total = self._master_count * (1 + self._replicas_per_master)
        for index in range(total):
            self._nodes.append(self._start_node(binary, directory / f"nodes-{index}.conf"))
        enabled = _info(self._nodes[0].port, "cluster").get("cluster_enabled")
        if str(enabled) != "1":
            raise TopologyUnsupported(f"{binary} did not enable cluster mode")

    def _start_node(self, binary: str, config_file: Path) -> EmbeddedServer:
        """One node; a new bus port if another process took the one we picked."""
        for attempt in range(_NODE_ATTEMPTS):
            node = EmbeddedServer(
                binary=binary,
                args=(
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(config_file),
                    "--cluster-port", str(free_port(HOST)),
                    "--cluster-node-timeout", str(self._node_timeout_ms),
                    "--cluster-allow-replica-migration", "no",
                    "--cluster-replica-validity-factor", "0",
                    *_DATA_ARGS,
                    *self._args,
                ),
            )  # fmt: skip
            try:
                node.start()
            except ServerStartError as error:
                if "FATAL CONFIG" in str(error):  # an option this server does not know
                    raise TopologyUnsupported(f"{binary} cannot run a cluster: {error}") from None
                if attempt == _NODE_ATTEMPTS - 1:
                    raise
                continue
            return node
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _build(self) -> None:
        deadline = time.monotonic() + self._timeout
        masters = self._nodes[: self._master_count]
        replicas = self._nodes[self._master_count :]
        ids = {node.port: _command(node.port, "CLUSTER", "MYID") for node in self._nodes}
        bounds = [SLOT_COUNT * i // len(masters) for i in range(len(masters) + 1)]
        for index, master in enumerate(masters):
            # Distinct epochs up front, as redis-cli does: no collision round to resolve.
            _command(master.port, "CLUSTER", "SET-CONFIG-EPOCH", index + 1)
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
                _command(node.port, "CLUSTER", "MEET", HOST, other.port, bus_ports[other.port])
        _wait_for(
            "every node to know every other node",
            lambda: all(self._knows_everyone(node, set(ids.values())) for node in self._nodes),
            deadline - time.monotonic(),
        )
        for index, replica in enumerate(replicas):
            master = masters[index % len(masters)]
            _command(replica.port, "CLUSTER", "REPLICATE", ids[master.port])
        _wait_for(
            "the replicas to sync with their masters",
            lambda: all(_link_is_up(replica.port) for replica in replicas),
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
        return all(_role(port)[0] == "master" for port in views.pop())

    def _roles(self) -> list[tuple[EmbeddedServer, list[Any]]]:
        roles = []
        for node in self._running():
            with suppress(redis.RedisError):
                roles.append((node, _role(node.port)))
        return roles

    def _running(self) -> list[EmbeddedServer]:
        return [node for node in self._nodes if node.pid is not None]

    def _node_on_port(self, port: int) -> EmbeddedServer:
        for node in self._nodes:
            if node.port == port:
                return node
        raise TopologyError(f"port {port} is not a node of {self!r}")


class LocalSentinel:
    """A master, ``replicas`` replicas and ``sentinels`` sentinels watching them.

    Clients find the master through ``redis.sentinel.Sentinel(sentinel_addresses)``
    and ``master_for(service_name)``. Sentinels judge the master down after
    ``down_after_ms``; the quorum is a majority of the sentinels.
    """

    def __init__(
        self,
        *,
        service_name: str = "redlease",
        replicas: int = 2,
        sentinels: int = 3,
        binary: str | None = None,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
        timeout: float = 30.0,
    ) -> None:
        if replicas < 1 or sentinels < 1:
            raise InvalidArgument("a sentinel topology needs at least one replica and one sentinel")
        self.service_name = service_name
        self._replica_count = replicas
        self._sentinel_count = sentinels
        self._binary = binary
        self._down_after_ms = down_after_ms
        self._failover_timeout_ms = failover_timeout_ms
        self._timeout = timeout
        self._servers: list[EmbeddedServer] = []
        self._sentinels: list[EmbeddedServer] = []
        self._directory: Path | None = None

    @property
    def servers(self) -> list[EmbeddedServer]:
        """The data servers, in start order (the first one began as master)."""
        return list(self._servers)

    @property
    def sentinels(self) -> list[EmbeddedServer]:
        """The sentinel processes, in start order."""
        return list(self._sentinels)

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """``(host, port)`` of each sentinel, as ``redis.sentinel.Sentinel`` takes them."""
        return [(HOST, sentinel.port) for sentinel in self._sentinels]

    def start(self) -> LocalSentinel:
        """Start the servers and sentinels and wait until every sentinel sees them all."""
        if self._servers:
            return self
        binary = find_server_binary(self._binary)
        self._directory = Path(tempfile.mkdtemp(prefix="redlease-sentinel-"))
        try:
            self._start_servers(binary)
            self._start_sentinels(binary, self._directory)
            _wait_for(
                "every sentinel to see the master, its replicas and the other sentinels",
                self._settled,
                self._timeout,
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the sentinels first (so they start no failover), then the servers."""
        for process in (*self._sentinels, *self._servers):
            process.stop(timeout=2.0)
        self._sentinels = []
        self._servers = []
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None

    def master_address(self) -> tuple[str, int]:
        """The master's ``(host, port)`` according to the first sentinel that answers."""
        for sentinel in self._running(self._sentinels):
            with suppress(redis.RedisError):
                host, port = _command(
                    sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name
                )
                return str(host), int(port)
        raise TopologyError(f"no sentinel could name the master of {self.service_name!r}")

    def master(self) -> EmbeddedServer:
        """The data server the sentinels currently name as master."""
        _, port = self.master_address()
        for server in self._servers:
            if server.port == port:
                return server
        raise TopologyError(f"the sentinels name port {port}, which is not one of ours")

    def failover(self, timeout: float | None = None) -> tuple[str, int]:
        """Force a failover (``SENTINEL FAILOVER``); return the new master's address.

        Returns once every running sentinel names the new master, it answers ``ROLE``
        as master and no sentinel still has a failover in progress. The old master, if
        it runs, is turned into a replica by the sentinels a little later.
        """
        timeout = self._timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        old = self.master_address()
        sentinel = self._running(self._sentinels)[0]  # master_address() found one

        def asked() -> bool:
            try:
                _command(sentinel.port, "SENTINEL", "FAILOVER", self.service_name)
            except redis.ResponseError as error:
                # NOGOODSLAVE: the sentinel has not yet refreshed a replica's state.
                if "INPROG" not in str(error):
                    raise
            return True

        _wait_for("the sentinel to accept SENTINEL FAILOVER", asked, timeout)
        _wait_for(
            f"the sentinels to name a master other than {old}",
            lambda: self._switched_from(old),
            deadline - time.monotonic(),
        )
        return self.master_address()

    def kill_master(self) -> EmbeddedServer:
        """SIGKILL the current master; the sentinels fail over after ``down_after_ms``."""
        master = self.master()
        master.kill()
        return master

    def __enter__(self) -> LocalSentinel:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = ",".join(str(port) for _, port in self.sentinel_addresses) or "not started"
        return f"<LocalSentinel {self.service_name!r} sentinels={ports}>"

    def _start_servers(self, binary: str) -> None:
        master = EmbeddedServer(binary=binary, args=_DATA_ARGS)
        master.start()
        self._servers.append(master)
        replica_args = (*_DATA_ARGS, "--replicaof", HOST, str(master.port))
        for _ in range(self._replica_count):
            replica = EmbeddedServer(binary=binary, args=replica_args)
            replica.start()
            self._servers.append(replica)
        _wait_for(
            "the replicas to sync with the master",
            lambda: all(_link_is_up(replica.port) for replica in self._servers[1:]),
            self._timeout,
        )

    def _start_sentinels(self, binary: str, directory: Path) -> None:
        """Start the sentinels already knowing each other, saving ~2 s of hello messages.

        That needs their ports up front; if another process takes one first, start the
        whole set again on new ports.
        """
        for attempt in range(_NODE_ATTEMPTS):
            ports: set[int] = set()
            while len(ports) < self._sentinel_count:
                ports.add(free_port(HOST))
            peers = {port: secrets.token_hex(20) for port in ports}
            try:
                for port in peers:
                    wrapper = self._write_sentinel_files(binary, directory, port, peers)
                    sentinel = EmbeddedServer(binary=str(wrapper), port=port)
                    self._sentinels.append(sentinel)
                    sentinel.start()
            except ServerStartError as error:
                if "FATAL CONFIG" in str(error):
                    raise TopologyUnsupported(f"{binary} cannot run a sentinel: {error}") from None
                for sentinel in self._sentinels:
                    sentinel.stop(timeout=2.0)
                self._sentinels = []
                if attempt == _NODE_ATTEMPTS - 1:
                    raise
            else:
                return

    def _write_sentinel_files(
        self, binary: str, directory: Path, port: int, peers: dict[int, str]
    ) -> Path:
        """The config (rewritten by the sentinel, so in a writable place) and its wrapper."""
        name = self.service_name
        quorum = self._sentinel_count // 2 + 1
        lines = [
            f"sentinel myid {peers[port]}",
            f"sentinel monitor {name} {HOST} {self._servers[0].port} {quorum}",
            f"sentinel down-after-milliseconds {name} {self._down_after_ms}",
            f"sentinel failover-timeout {name} {self._failover_timeout_ms}",
            *(
                f"sentinel known-sentinel {name} {HOST} {peer_port} {peer_id}"
                for peer_port, peer_id in peers.items()
                if peer_port != port
            ),
        ]
        config = directory / f"sentinel-{port}.conf"
        config.write_text("\n".join(lines) + "\n")
        wrapper = directory / f"sentinel-{port}.sh"
        command = f'exec {shlex.quote(binary)} {shlex.quote(str(config))} "$@" --sentinel'
        wrapper.write_text(f"#!/bin/sh\n{command}\n")
        wrapper.chmod(0o700)
        return wrapper

    def _settled(self) -> bool:
        for sentinel in self._sentinels:
            master = _sentinel_state(sentinel.port, "MASTER", self.service_name)
            replicas = _command(sentinel.port, "SENTINEL", "REPLICAS", self.service_name)
            good_replicas = [
                replica
                for replica in map(_pairs, replicas)
                if replica["flags"] == "slave" and replica.get("master-link-status") == "ok"
            ]
            if (
                master["flags"] != "master"
                or int(master["num-other-sentinels"]) != self._sentinel_count - 1
                or len(good_replicas) != self._replica_count
            ):
                return False
        return True

    def _switched_from(self, old: tuple[str, int]) -> bool:
        addresses = set()
        for sentinel in self._running(self._sentinels):
            host, port = _command(
                sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name
            )
            state = _sentinel_state(sentinel.port, "MASTER", self.service_name)
            if "failover_in_progress" in state["flags"]:
                return False
            addresses.add((str(host), int(port)))
        if len(addresses) != 1 or old in addresses:
            return False
        (_, port) = addresses.pop()
        return bool(_role(port)[0] == "master")

    @staticmethod
    def _running(processes: Iterable[EmbeddedServer]) -> list[EmbeddedServer]:
        return [process for process in processes if process.pid is not None]


def _wait_for(what: str, condition: Callable[[], bool], timeout: float) -> None:
    """Poll ``condition`` until it holds; Redis errors count as "not yet"."""
    deadline = time.monotonic() + timeout
    pause = 0.01
    last_error: Exception | None = None
    while True:
        try:
            if condition():
                return
        except (redis.RedisError, KeyError, ValueError, TypeError) as error:
            last_error = error
        if time.monotonic() >= deadline:
            detail = f"; last error: {last_error!r}" if last_error is not None else ""
            raise TopologyError(f"gave up waiting for {what} after {timeout:.1f} s{detail}")
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def _command(port: int, *args: Any) -> Any:
    """One command on a fresh connection that gives up quickly; replies are decoded."""
    client: Any = redis.Redis(  # Any: redis-py leaves execute_command untyped
        host=HOST,
        port=port,
        decode_responses=True,
        socket_timeout=_PROBE_TIMEOUT,
        socket_connect_timeout=_PROBE_TIMEOUT,
        retry=Retry(NoBackoff(), 0),
    )
    with client:
        return client.execute_command(*args)


def _role(port: int) -> list[Any]:
    role: list[Any] = _command(port, "ROLE")
    return role


def _replicates(role: list[Any], master_port: int) -> bool:
    return role[0] == "slave" and int(role[2]) == master_port


def _info(port: int, section: str) -> dict[str, Any]:
    info: dict[str, Any] = _command(port, "INFO", section)
    return info


def _link_is_up(port: int) -> bool:
    return _info(port, "replication").get("master_link_status") == "up"


def _add_slots(port: int, first: int, last: int) -> None:
    try:
        _command(port, "CLUSTER", "ADDSLOTSRANGE", first, last)
    except redis.ResponseError:  # before Redis 7.0
        _command(port, "CLUSTER", "ADDSLOTS", *range(first, last + 1))


def _cluster_info(port: int) -> dict[str, str]:
    text: str = _command(port, "CLUSTER", "INFO")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _cluster_nodes(port: int) -> list[_ClusterNode]:
    nodes = []
    for line in str(_command(port, "CLUSTER", "NODES")).splitlines():
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


def _sentinel_state(port: int, *args: str) -> dict[str, str]:
    return _pairs(_command(port, "SENTINEL", *args))


def _pairs(reply: Any) -> dict[str, str]:
    """A flat ``[name, value, ...]`` reply (or one redis-py already parsed) as a dict."""
    if isinstance(reply, dict):
        return {str(key): str(value) for key, value in reply.items()}
    items = [str(item) for item in reply]
    return dict(zip(items[::2], items[1::2], strict=True))
