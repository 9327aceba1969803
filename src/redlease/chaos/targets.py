"""Where a scenario's lock lives: one server, Sentinel, Cluster or Redlock masters.

A target is a context manager that starts (and stops) what the scenario needs and tells
each worker how to reach the lock (:meth:`Target.lock_args`). The counters the lock
protects always live on a separate *data* server, which no fault touches, as a database
behind the lock would. A target that the harness started itself is ``private``: only
then may faults stop, pause or restart its servers.
"""

from __future__ import annotations

import random
import secrets
import shutil
import subprocess
from contextlib import ExitStack
from typing import Any, ClassVar, Generic, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.cluster import RedisCluster

from redlease.chaos.errors import ChaosError
from redlease.chaos.proxy import Link, ProxyHub
from redlease.server import EmbeddedServer
from redlease.topology import LocalCluster, LocalSentinel

ADMIN_TIMEOUT = 2.0
TopologyT = TypeVar("TopologyT", LocalSentinel, LocalCluster)
NAMESPACE_PREFIX = "rlchaos"


class Target:
    """One scenario's servers; subclasses say how workers and the harness reach the lock."""

    kind: ClassVar[str] = "single"

    def __init__(self, data_url: str, *, private: bool) -> None:
        self.data_url = data_url
        self.private = private
        self.stack = ExitStack()

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()

    def lock_args(self, worker: str) -> list[str]:
        raise NotImplementedError

    def wrap(self, worker: str) -> list[str]:
        """A command prefix for the worker's process (none but in namespaces)."""
        return []

    def worker_data_url(self, worker: str) -> str:
        return self.data_url

    def probe_url(self, worker: str) -> str | None:
        """Where ``worker``'s probe leases live (None: this target measures no detection)."""
        return None

    def admin(self, timeout: float = ADMIN_TIMEOUT) -> Any:
        """A client on the server that holds the lock's keys (for PEXPIRE and clean-up)."""
        raise NotImplementedError


class SingleTarget(Target):
    """One lock server, reached directly or through proxy links of each worker's own.

    A proxied worker gets two links: one for its lock traffic and one for its probe leases
    (so that a dropped reply hits each once); a network fault changes both.
    """

    def __init__(
        self,
        lock_url: str,
        data_url: str,
        *,
        lock_server: EmbeddedServer | None = None,
        hub: ProxyHub | None = None,
    ) -> None:
        super().__init__(data_url, private=lock_server is not None)
        self.lock_url = lock_url
        self.lock_server = lock_server
        self.hub = hub
        self.links: dict[str, list[Link]] = {}

    def lock_args(self, worker: str) -> list[str]:
        return ["--lock-url", self._linked(worker)]

    def probe_url(self, worker: str) -> str | None:
        return self._linked(worker)

    def _linked(self, worker: str) -> str:
        """The lock server's URL through a new proxy link of ``worker`` (if proxied)."""
        if self.hub is None:
            return self.lock_url
        parts = urlsplit(self.lock_url)
        link = self.hub.link(parts.hostname or "127.0.0.1", parts.port or 6379)
        self.links.setdefault(worker, []).append(link)
        return _with_port(self.lock_url, link.port)

    def admin(self, timeout: float = ADMIN_TIMEOUT) -> redis.Redis:
        return redis.Redis.from_url(
            self.lock_url, socket_timeout=timeout, socket_connect_timeout=timeout
        )


class _TopologyTarget(Target, Generic[TopologyT]):
    """A topology the harness started (so private), with the data server beside it."""

    def __init__(self, topology: TopologyT, data_url: str) -> None:
        super().__init__(data_url, private=True)
        self.topology: TopologyT = topology


class SentinelTarget(_TopologyTarget[LocalSentinel]):
    kind = "sentinel"

    def lock_args(self, worker: str) -> list[str]:
        args = ["--service", self.topology.service_name]
        for host, port in self.topology.sentinel_addresses:
            args += ["--sentinel", f"{host}:{port}"]
        return args

    def admin(self, timeout: float = ADMIN_TIMEOUT) -> redis.Redis:
        host, port = self.topology.master_address()
        return redis.Redis(host=host, port=port, socket_timeout=timeout)


class ClusterTarget(_TopologyTarget[LocalCluster]):
    kind = "cluster"

    def lock_args(self, worker: str) -> list[str]:
        return ["--lock-url", self.topology.url, "--cluster"]

    def admin(self, timeout: float = ADMIN_TIMEOUT) -> RedisCluster:
        return RedisCluster.from_url(self.topology.url, socket_timeout=timeout)


class RedlockTarget(Target):
    """Independent masters; every worker reaches each through its own proxy link."""

    kind = "redlock"

    def __init__(self, masters: list[EmbeddedServer], hub: ProxyHub, data_url: str) -> None:
        super().__init__(data_url, private=True)
        self.masters = masters
        self.hub = hub
        self.links: dict[str, list[Link]] = {}

    def lock_args(self, worker: str) -> list[str]:
        links = [self.hub.link("127.0.0.1", master.port) for master in self.masters]
        self.links[worker] = links
        args: list[str] = []
        for link in links:
            args += ["--lock-url", link.url]
        return args

    def admin(self, timeout: float = ADMIN_TIMEOUT) -> redis.Redis:
        return redis.Redis.from_url(self.masters[0].url, socket_timeout=timeout)


class NamespaceTarget(SingleTarget):
    """Each worker in a network namespace of its own, joined to the host by a veth pair.

    The servers listen on loopback and on the host end of every pair, so a worker reaches
    both through its own virtual cable, and :meth:`cut` takes that cable down: a real
    partition in the kernel (packets lost, TCP retransmitting), for that worker alone.
    """

    kind = "netns"

    def __init__(self, slots: int, tag: str) -> None:
        self.tag = tag
        self.namespaces = [f"{NAMESPACE_PREFIX}{tag}{n}" for n in range(slots)]
        self.free = list(range(slots))
        self.assigned: dict[str, int] = {}
        lock_server = EmbeddedServer(args=_listen_on(slots))
        data_server = EmbeddedServer(args=_listen_on(slots))
        super().__init__("", "", lock_server=lock_server)
        self.data_server = data_server

    def __enter__(self) -> NamespaceTarget:
        try:
            for index, name in enumerate(self.namespaces):
                self.stack.callback(_delete_namespace, name, self._host_end(index))
                _make_namespace(name, self._host_end(index), index)
            assert self.lock_server is not None
            self.stack.enter_context(self.lock_server)
            self.stack.enter_context(self.data_server)
        except BaseException:
            self.stack.close()
            raise
        self.lock_url = self.lock_server.url
        self.data_url = self.data_server.url
        return self

    def wrap(self, worker: str) -> list[str]:
        """The command prefix that runs ``worker`` inside its namespace."""
        return ["ip", "netns", "exec", self.namespaces[self._slot(worker)]]

    def lock_args(self, worker: str) -> list[str]:
        return ["--lock-url", self._linked(worker)]

    def _linked(self, worker: str) -> str:
        assert self.lock_server is not None
        return f"redis://{_host_ip(self._slot(worker))}:{self.lock_server.port}/0"

    def worker_data_url(self, worker: str) -> str:
        return f"redis://{_host_ip(self._slot(worker))}:{self.data_server.port}/0"

    def cut(self, worker: str, down: bool) -> None:
        state = "down" if down else "up"
        _ip("link", "set", self._host_end(self._slot(worker)), state)

    def _slot(self, worker: str) -> int:
        if worker not in self.assigned:
            if not self.free:
                raise ChaosError("no network namespace is left for another worker")
            self.assigned[worker] = self.free.pop(0)
        return self.assigned[worker]

    def _host_end(self, index: int) -> str:
        return f"rlc{self.tag}h{index}"


def _host_ip(index: int) -> str:
    return f"10.213.{index}.1"


def _worker_ip(index: int) -> str:
    return f"10.213.{index}.2"


def _listen_on(slots: int) -> list[str]:
    """Loopback plus the host end of every pair; protected mode would refuse the pairs."""
    addresses = " ".join(["127.0.0.1", *(_host_ip(index) for index in range(slots))])
    return ["--bind", addresses, "--protected-mode", "no"]


def namespaces_available() -> str | None:
    """None when this process may make namespaces, else the reason why not."""
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = f"{NAMESPACE_PREFIX}probe{random.randrange(10**6)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, check=False)
    if made.returncode != 0:
        return "cannot create a network namespace: " + made.stderr.decode(errors="replace").strip()
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True, check=False)
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, check=False, timeout=10)
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip()
        raise ChaosError(f"`ip {' '.join(args)}` failed: {message}")


def _make_namespace(name: str, host_end: str, index: int) -> None:
    worker_end = host_end.replace("h", "w", 1)
    _ip("netns", "add", name)
    _ip("link", "add", host_end, "type", "veth", "peer", "name", worker_end)
    _ip("link", "set", worker_end, "netns", name)
    _ip("addr", "add", f"{_host_ip(index)}/30", "dev", host_end)
    _ip("link", "set", host_end, "up")
    _ip("-n", name, "addr", "add", f"{_worker_ip(index)}/30", "dev", worker_end)
    _ip("-n", name, "link", "set", worker_end, "up")
    _ip("-n", name, "link", "set", "lo", "up")


def _delete_namespace(name: str, host_end: str) -> None:
    subprocess.run(["ip", "link", "delete", host_end], capture_output=True, check=False)
    subprocess.run(["ip", "netns", "delete", name], capture_output=True, check=False)


def _with_port(url: str, port: int) -> str:
    """``url`` with its host and port replaced by the proxy's (credentials and db kept)."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@127.0.0.1:{port}" if credentials else f"127.0.0.1:{port}"
    return urlunsplit(parts._replace(netloc=netloc))


REDLOCK_MASTERS = 5


def open_target(kind: str, *, url: str | None, proxied: bool, slots: int) -> Target:
    """Start the servers of a ``kind`` target; the caller enters it and it stops them.

    ``url`` (a shared server) is only for the ``single`` kind; ``slots`` bounds how many
    workers a namespace target can place.
    """
    if url is not None:
        if kind != "single":
            raise ChaosError(f"a {kind} scenario runs only on servers the harness starts")
        hub = ProxyHub().__enter__() if proxied else None
        target: Target = SingleTarget(url, url, hub=hub)
        if hub is not None:
            target.stack.callback(hub.stop)
        return target
    if kind == "netns":
        return NamespaceTarget(slots, secrets.token_hex(2))
    stack = ExitStack()
    try:
        data = stack.enter_context(EmbeddedServer())
        if kind == "single":
            hub = stack.enter_context(ProxyHub()) if proxied else None
            lock = stack.enter_context(EmbeddedServer())
            target = SingleTarget(lock.url, data.url, lock_server=lock, hub=hub)
        elif kind == "sentinel":
            target = SentinelTarget(stack.enter_context(LocalSentinel(replicas=2)), data.url)
        elif kind == "cluster":
            cluster = LocalCluster(masters=3, replicas_per_master=2)
            target = ClusterTarget(stack.enter_context(cluster), data.url)
        elif kind == "redlock":
            hub = stack.enter_context(ProxyHub())
            masters = [stack.enter_context(EmbeddedServer()) for _ in range(REDLOCK_MASTERS)]
            target = RedlockTarget(masters, hub, data.url)
        else:
            raise ChaosError(f"unknown target kind {kind!r}")
    except BaseException:
        stack.close()
        raise
    target.stack.push(stack)
    return target
