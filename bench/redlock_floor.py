"""What five masters cost on this machine before any client library: the Redlock floor.

``python bench/redlock_floor.py`` starts five private masters and times, in one run and
alternating per rep:

* ``raw1`` and ``raw5``: the very scripts, keys and arguments of one redlease Redlock
  cycle (captured from a real one), replayed over bare sockets: the acquire sent to every
  master, then the replies read as they come (``poll``), then the release the same way.
  No parsing beyond the reply's end, no bookkeeping: the server work and the system calls
  of a cycle, and nothing else.
* ``single`` and ``redlock5``: ``redlease.Locks`` on the first master and
  ``redlease.Redlock`` over all five, as ``bench/run.py redlock`` times them.

``raw5 / raw1`` is the floor for Redlock's ratio on this machine: what the five servers'
scripts and the client's per-master sends cost when the client costs nothing.
``redlock5 / single`` is redlease's ratio; the difference is the client's own work.
Client CPU (this thread) and server CPU (``INFO cpu`` of the masters used) are per cycle.
"""

from __future__ import annotations

import resource
import select
import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import hiredis
import redis

import redlease
from redlease.core.ops import RunScript
from redlease.server import EmbeddedServer

MASTERS = 5
REPS = 5
CYCLES = 2000
ROUND_LIMIT_MS = 1000


def _captured_ops(redlock: redlease.Redlock) -> list[RunScript]:
    """The acquire and release scripts of one real cycle, as the fan-out sent them."""
    seen: list[RunScript] = []
    fanout: Any = redlock._fanout
    run = fanout.run

    def capture(op: RunScript, *args: Any, **kwargs: Any) -> Any:
        seen.append(op)
        return run(op, *args, **kwargs)

    fanout.run = capture
    try:
        with redlock.lock("floor:raw"):  # a name of its own: only the replays touch it
            pass
    finally:
        fanout.run = run
    return seen


def _packed(op: RunScript) -> bytes:
    parts: list[bytes] = [b"EVALSHA", op.script.sha.encode(), str(len(op.keys)).encode()]
    parts += [str(part).encode() for part in (*op.keys, *op.args)]
    head = b"*%d\r\n" % len(parts)
    return head + b"".join(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)


def _round(sockets: list[socket.socket], command: bytes) -> list[object]:
    """The command to every socket, then each whole reply as it comes (one hiredis reader
    per round: replies are parsed only as far as needed to know they are whole)."""
    for sock in sockets:
        sock.sendall(command)
    poller = select.poll()
    by_fd = {sock.fileno(): sock for sock in sockets}
    readers = {fd: hiredis.Reader() for fd in by_fd}
    replies: list[object] = []
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    while readers:
        events = poller.poll(ROUND_LIMIT_MS)
        if not events:
            raise TimeoutError("a master did not answer within 1 s")
        for fd, _ in events:
            reader = readers[fd]
            reader.feed(by_fd[fd].recv(4096))
            reply = reader.gets()
            if reply is not False:
                replies.append(reply)
                poller.unregister(fd)
                del readers[fd]
    return replies


def _timed(cycle: Callable[[], None], admins: list[redis.Redis]) -> tuple[float, float, float]:
    """Wall, client CPU and server CPU, in µs per cycle."""
    servers_before = _server_cpu(admins)
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    started = time.perf_counter()
    for _ in range(CYCLES):
        cycle()
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_THREAD)
    client = after.ru_utime - usage.ru_utime + after.ru_stime - usage.ru_stime
    servers = _server_cpu(admins) - servers_before
    return wall / CYCLES * 1e6, client / CYCLES * 1e6, servers / CYCLES * 1e6


def _server_cpu(admins: list[redis.Redis]) -> float:
    total = 0.0
    for admin in admins:
        info = admin.info("cpu")
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def main() -> None:
    servers = [EmbeddedServer() for _ in range(MASTERS)]
    try:
        for server in servers:
            server.start()
        urls = [server.url for server in servers]
        admins = [redis.Redis.from_url(url) for url in urls]
        redlock = redlease.Redlock(urls)
        single = redlease.Locks(urls[0])
        acquire, release = (_packed(op) for op in _captured_ops(redlock))
        sockets = [socket.create_connection(("127.0.0.1", server.port)) for server in servers]
        for sock in sockets:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        granted = _round(sockets, acquire)
        released = _round(sockets, release)
        if not all(isinstance(reply, list) and reply[0] == 1 for reply in granted) or any(
            reply != 1 for reply in released
        ):
            raise SystemExit(
                f"the replayed cycle is not a grant and a release: {granted} {released}"
            )

        def raw(count: int) -> Callable[[], None]:
            def cycle() -> None:
                _round(sockets[:count], acquire)
                _round(sockets[:count], release)

            return cycle

        def locked(locks: Any, name: str) -> Callable[[], None]:
            def cycle() -> None:
                with locks.lock(name):
                    pass

            return cycle

        runs = {
            "raw1": (raw(1), admins[:1]),
            "raw5": (raw(MASTERS), admins),
            "single": (locked(single, "floor:single"), admins[:1]),
            "redlock5": (locked(redlock, "floor"), admins),
        }
        samples: dict[str, list[tuple[float, float, float]]] = {name: [] for name in runs}
        for cycle, _ in runs.values():
            for _ in range(200):
                cycle()
        for _ in range(REPS):
            for name, (cycle, used) in runs.items():
                samples[name].append(_timed(cycle, used))
        medians = {
            name: tuple(statistics.median(sample[i] for sample in taken) for i in range(3))
            for name, taken in samples.items()
        }
        for name, (wall, client, server) in medians.items():
            print(f"{name:9} {wall:6.0f} µs/cycle  client CPU {client:5.0f}  servers {server:5.0f}")
        print(f"floor ratio   raw5 / raw1        {medians['raw5'][0] / medians['raw1'][0]:.2f}")
        print(
            f"redlease      redlock5 / single  {medians['redlock5'][0] / medians['single'][0]:.2f}"
        )
        for sock in sockets:
            sock.close()
        redlock.close()
        single.close()
    finally:
        for server in servers:
            server.stop()


if __name__ == "__main__":
    main()
