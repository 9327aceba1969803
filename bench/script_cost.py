"""What each lock script costs the server, next to redis-py's commands: the server's profile.

``python bench/script_cost.py`` starts a private server and runs, for each case, a few
thousand calls of the very script redlease sends (``redlease.scripts``) with a lock's keys
and arguments, then reads the server's own time per call (``INFO commandstats``,
``usec_per_call``: CPU inside the command, the scripts' inner commands included, no
socket I/O). The cases:

* ``acquire, free`` and ``release, no waiter``: the uncontended cycle's two scripts;
* ``acquire refused, N queued``: a waiter joining a queue of N (it reads the queue to
  bound its wait by the shortest lease ahead);
* ``release with hand-off``: the release that grants the first waiter (fence, publish);
* ``redis-py SET NX`` and ``redis-py release``: redis-py's ``Lock`` (its Lua release).

The per-call figures are the part of the server's time the lock's design decides; the
rest of a cycle's server time is reading and writing sockets, about the same per command
for every library.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import redis

from redlease.scripts import ScriptName
from redlease.server import EmbeddedServer

CALLS = 3000
LEASE, FENCE, QUEUE = "bench:{cost}", "bench:{cost}:fence", "bench:{cost}:queue"
WAKE = "bench:{cost}:wake:"
REDIS_PY_RELEASE = (
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) "
    "else return 0 end"
)


def usec_per_call(server: redis.Redis, command: str, call: Callable[[], object]) -> float:
    call()  # loads the script
    server.config_resetstat()
    for _ in range(CALLS):
        call()
    stats = server.info("commandstats")[f"cmdstat_{command}"]
    return float(stats["usec"]) / int(stats["calls"])


def main() -> None:
    with EmbeddedServer() as embedded:
        server = redis.Redis.from_url(embedded.url)
        acquire = server.register_script(ScriptName.ACQUIRE.source)
        release = server.register_script(ScriptName.RELEASE.source)

        def latch(token: str) -> str:
            return f"{LEASE}:latch:{token}"

        def take(token: str, mode: str, client: str) -> object:
            args = [token, 30000, "0", "publish", WAKE, mode, client]
            return acquire(keys=[LEASE, FENCE, QUEUE], args=args)

        def give(token: str) -> object:
            args = [token, 10000, "publish", WAKE, ""]
            return release(keys=[LEASE, QUEUE, FENCE, latch(token)], args=args)

        token = uuid.uuid4().hex

        def take_free() -> None:
            take(token, "0", "c")
            server.delete(LEASE)

        def free() -> None:
            server.set(LEASE, f"1:{token}", px=30000)
            give(token)

        rows = [
            ("acquire, free", usec_per_call(server, "evalsha", take_free)),
            ("release, no waiter", usec_per_call(server, "evalsha", free)),
        ]

        server.set(LEASE, "1:holder", px=10**7)
        for queued in (0, 7, 15):
            server.delete(QUEUE)
            for index in range(queued):
                server.rpush(QUEUE, f"30000:c{index}:t{index}")

            def refused() -> None:
                take("me", "1", "me")
                server.lrem(QUEUE, 1, "30000:me:me")

            label = f"acquire refused, {queued} queued"
            rows.append((label, usec_per_call(server, "evalsha", refused)))
        server.delete(LEASE, QUEUE)

        listener = server.pubsub()
        listener.subscribe(f"{WAKE}waiter")
        time.sleep(0.1)

        def hand_off() -> None:
            server.set(LEASE, f"1:{token}", px=30000)
            server.rpush(QUEUE, "30000:waiter:next")
            give(token)

        rows.append(("release with hand-off", usec_per_call(server, "evalsha", hand_off)))
        listener.close()

        def redis_py_set() -> None:
            server.set("bench:redis-py", token, nx=True, px=30000)
            server.delete("bench:redis-py")

        rows.append(("redis-py SET NX", usec_per_call(server, "set", redis_py_set)))

        def redis_py_release() -> None:
            server.set("bench:redis-py", token, px=30000)
            server.eval(REDIS_PY_RELEASE, 1, "bench:redis-py", token)

        rows.append(("redis-py release", usec_per_call(server, "eval", redis_py_release)))
        server.close()
    width = max(len(label) for label, _ in rows)
    print(f"{'server µs per call':>{width + 20}}")
    for label, usec in rows:
        print(f"{label:<{width}} {usec:19.2f}")


if __name__ == "__main__":
    main()
