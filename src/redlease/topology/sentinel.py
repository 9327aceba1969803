"""A real Sentinel topology on loopback ports: a master, its replicas, its sentinels.

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
from collections.abc import Iterable
from contextlib import suppress
from pathlib import Path
from typing import Any

import redis

from redlease.errors import InvalidArgument
from redlease.processes import free_port
from redlease.server import EmbeddedServer, ServerStartError, find_server_binary
from redlease.topology._admin import (
    DATA_ARGS,
    HOST,
    NODE_ATTEMPTS,
    command,
    link_is_up,
    role,
    wait_for,
)
from redlease.topology.errors import TopologyError, TopologyUnsupported

__all__ = ["LocalSentinel"]


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
            wait_for(
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
                host, port = command(
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
                command(sentinel.port, "SENTINEL", "FAILOVER", self.service_name)
            except redis.ResponseError as error:
                # NOGOODSLAVE: the sentinel has not yet refreshed a replica's state.
                if "INPROG" not in str(error):
                    raise
            return True

        wait_for("the sentinel to accept SENTINEL FAILOVER", asked, timeout)
        wait_for(
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

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = ",".join(str(port) for _, port in self.sentinel_addresses) or "not started"
        return f"<LocalSentinel {self.service_name!r} sentinels={ports}>"

    def _start_servers(self, binary: str) -> None:
        master = EmbeddedServer(binary=binary, args=DATA_ARGS)
        master.start()
        self._servers.append(master)
        replica_args = (*DATA_ARGS, "--replicaof", HOST, str(master.port))
        for _ in range(self._replica_count):
            replica = EmbeddedServer(binary=binary, args=replica_args)
            replica.start()
            self._servers.append(replica)
        wait_for(
            "the replicas to sync with the master",
            lambda: all(link_is_up(replica.port) for replica in self._servers[1:]),
            self._timeout,
        )

    def _start_sentinels(self, binary: str, directory: Path) -> None:
        """Start the sentinels already knowing each other, saving ~2 s of hello messages.

        That needs their ports up front; if another process takes one first, start the
        whole set again on new ports.
        """
        for attempt in range(NODE_ATTEMPTS):
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
                if attempt == NODE_ATTEMPTS - 1:
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
            replicas = command(sentinel.port, "SENTINEL", "REPLICAS", self.service_name)
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
            host, port = command(
                sentinel.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name
            )
            state = _sentinel_state(sentinel.port, "MASTER", self.service_name)
            if "failover_in_progress" in state["flags"]:
                return False
            addresses.add((str(host), int(port)))
        if len(addresses) != 1 or old in addresses:
            return False
        (_, port) = addresses.pop()
        return bool(role(port)[0] == "master")

    @staticmethod
    def _running(processes: Iterable[EmbeddedServer]) -> list[EmbeddedServer]:
        return [process for process in processes if process.pid is not None]


def _sentinel_state(port: int, *args: str) -> dict[str, str]:
    return _pairs(command(port, "SENTINEL", *args))


def _pairs(reply: Any) -> dict[str, str]:
    """A flat ``[name, value, ...]`` reply (or one redis-py already parsed) as a dict."""
    if isinstance(reply, dict):
        return {str(key): str(value) for key, value in reply.items()}
    items = [str(item) for item in reply]
    return dict(zip(items[::2], items[1::2], strict=True))
