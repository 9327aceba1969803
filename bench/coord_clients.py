"""One blocking lock client per coordination system, each used the way its users use it.

Every client offers ``acquire(name) -> handle`` (blocks until granted, bounded by
``HANG_GUARD_S``, which never fires in a healthy run), ``release(handle)`` and ``close()``.
A fresh lock object is made per acquisition where the library has lock objects (making
one costs no round trip in redlease; in kazoo the first acquire of a lock object checks
the parent node exists, where a reused object lists the children instead: one read
either way).

* ``redlease``: ``Locks(url).lock(name)`` and ``lock.acquire(timeout=...)``; the default
  30 s lease, renewed every 10 s while held; waiters sleep on pub/sub.
* ``redlock``: ``redlease.Redlock(urls).lock(name)`` and ``lock.acquire(timeout=...)``:
  a majority of independent masters, contacted concurrently; a refused round retries
  after a random 5-50 ms pause.
* ``zookeeper``: kazoo's ``client.Lock(path)`` recipe and ``acquire(timeout=...)``: an
  ephemeral sequential znode, a watch on the predecessor; the session (kazoo's default
  10 s timeout) keeps it alive.
* ``etcd``: etcd's v3 lock service through the JSON gRPC gateway over HTTP/1.1, see
  :class:`EtcdLockClient`.
"""

from __future__ import annotations

import base64
import http.client
import json
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

HANG_GUARD_S = 10.0
ETCD_LEASE_TTL_S = 30
ETCD_KEEPALIVE_EVERY_S = 10.0
ZOOKEEPER_SESSION_S = 10.0
CONNECT_TIMEOUT_S = 10.0


class AcquireFailed(RuntimeError):
    """A blocking acquire gave up (its hang guard fired) or the server refused it."""


@dataclass(frozen=True)
class ClientSpec:
    """What a process needs to open a client: the system and where its servers listen.

    ``endpoints`` are Redis URLs (redlease, redlock), ``host:port`` pairs (ZooKeeper) or
    ``http://host:port`` URLs (etcd); a ZooKeeper or etcd client talks to the first one.
    """

    system: str
    endpoints: tuple[str, ...]


class CoordClient:
    def acquire(self, name: str) -> Any:
        raise NotImplementedError

    def release(self, handle: Any) -> None:
        handle.release()

    def close(self) -> None:
        raise NotImplementedError


class RedleaseClient(CoordClient):
    """``Locks(url).lock(name)``; the Redlock client below differs only in what it opens."""

    def __init__(self, url: str) -> None:
        import redlease  # noqa: PLC0415 - a worker imports only its own system's client

        self.locks: Any = redlease.Locks(url)

    def acquire(self, name: str) -> Any:
        lock = self.locks.lock(f"rlbench:coord:{name}")
        lock.acquire(timeout=HANG_GUARD_S)
        return lock

    def close(self) -> None:
        self.locks.close()


class RedlockClient(RedleaseClient):
    def __init__(self, urls: tuple[str, ...]) -> None:
        import redlease  # noqa: PLC0415

        self.locks = redlease.Redlock(list(urls))


class ZooKeeperClient(CoordClient):
    def __init__(self, hosts: tuple[str, ...]) -> None:
        from kazoo.client import KazooClient  # noqa: PLC0415

        self.client = KazooClient(
            hosts=",".join(hosts), timeout=ZOOKEEPER_SESSION_S, randomize_hosts=False
        )
        self.client.start(timeout=CONNECT_TIMEOUT_S)

    def acquire(self, name: str) -> Any:
        lock = self.client.Lock(f"/rlbench/{name}")
        if not lock.acquire(timeout=HANG_GUARD_S):
            raise AcquireFailed(f"zookeeper lock {name} not acquired in {HANG_GUARD_S} s")
        return lock

    def close(self) -> None:
        self.client.stop()
        self.client.close()


class EtcdLockClient(CoordClient):
    """etcd's lock service (``/v3/lock/lock``, ``/v3/lock/unlock``) over its JSON gateway.

    Why this API: the python-etcd3 package is unmaintained and breaks with current
    protobuf, so a Python user without a gRPC client talks to the gRPC gateway that every
    etcd 3.4 member serves on its client port (JSON bodies, base64 keys). This is the same
    server-side lock ``etcdctl lock`` uses, on one lease per client session like etcd's
    ``concurrency.Session``: the client grants a 30 s lease once and a background thread
    keeps it alive every 10 s (redlease's default lease is 30 s, renewed every 10 s). A
    ``lock`` call blocks on the server until the lock is granted, and returns the key that
    ``unlock`` deletes. One persistent HTTP/1.1 connection carries the lock calls; the
    keep-alives use their own connection so they never queue behind a blocked ``lock``.
    """

    def __init__(self, endpoint: str) -> None:
        parts = urlsplit(endpoint)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 2379
        self.connection = http.client.HTTPConnection(self.host, self.port, timeout=HANG_GUARD_S + 5)
        self.lease = str(
            self._post(self.connection, "/v3/lease/grant", {"TTL": ETCD_LEASE_TTL_S})["ID"]
        )
        self.stopping = threading.Event()
        self.keeper = threading.Thread(
            target=self._keep_alive, name="rlbench-etcd-keepalive", daemon=True
        )
        self.keeper.start()

    def acquire(self, name: str) -> Any:
        reply = self._post(
            self.connection, "/v3/lock/lock", {"name": _b64(f"rlbench/{name}"), "lease": self.lease}
        )
        if "key" not in reply:
            raise AcquireFailed(f"etcd lock {name}: {reply}")
        return reply["key"]

    def release(self, handle: Any) -> None:
        self._post(self.connection, "/v3/lock/unlock", {"key": handle})

    def close(self) -> None:
        self.stopping.set()
        self.keeper.join(CONNECT_TIMEOUT_S)
        try:
            self._post(self.connection, "/v3/lease/revoke", {"ID": self.lease})
        except (OSError, http.client.HTTPException, AcquireFailed):
            pass  # the cluster is going away (or gone): the lease expires with it
        finally:
            self.connection.close()

    def _keep_alive(self) -> None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
        try:
            while not self.stopping.wait(ETCD_KEEPALIVE_EVERY_S):
                self._post(connection, "/v3/lease/keepalive", {"ID": self.lease})
        finally:
            connection.close()

    @staticmethod
    def _post(
        connection: http.client.HTTPConnection, path: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        payload = response.read()
        if response.status != 200:
            raise AcquireFailed(f"etcd {path}: HTTP {response.status} {payload[:300]!r}")
        reply = json.loads(payload)
        return reply if isinstance(reply, dict) else {}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def open_client(spec: ClientSpec) -> CoordClient:
    if spec.system == "redlease":
        return RedleaseClient(spec.endpoints[0])
    if spec.system.startswith("redlock"):
        return RedlockClient(spec.endpoints)
    if spec.system.startswith("zookeeper"):
        return ZooKeeperClient(spec.endpoints)
    if spec.system.startswith("etcd"):
        return EtcdLockClient(spec.endpoints[0])
    raise ValueError(f"unknown system {spec.system!r}")
