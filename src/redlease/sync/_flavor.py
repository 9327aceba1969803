"""What only the sync flavour does differently: owners are threads, workers are threads."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol, TypeVar

from redlease.compat import ClusterClients, asking_last
from redlease.core.lease import Lease, LostCallback, run_callbacks
from redlease.core.owner import Owner
from redlease.errors import InvalidArgument

logger = logging.getLogger("redlease")
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
ASYNCIO = False
"""This flavour's clients are sync ``redis`` (or ``valkey``) clients."""
INTERRUPTIONS = (KeyboardInterrupt,)
"""What can cut an acquire short after the server may already have granted it."""
STOP_TIMEOUT_S = 10.0


def current_owner() -> Owner:
    """The calling thread; refused inside a running event loop, where the thread is not
    the owner a reader expects (every task of the loop would share one hold).

    The thread object, not its id: Python gives a finished thread's id to the next thread
    at once, which would then own what the finished one left held.
    """
    if asyncio._get_running_loop() is not None:
        raise InvalidArgument(
            "a sync Locks lock was used from a task of a running event loop: its tasks "
            "share one thread, so they would all count as one owner and the lock would "
            "block the loop; use redlease.AsyncLocks there (or pass owner= explicitly)"
        )
    thread = threading.current_thread()
    return Owner("thread", thread, thread.name)


def check_cancelled() -> None:
    """Threads are not cancelled: nothing to check (see the asyncio flavour)."""


class Wakeup:
    """A settable flag a waiter can block on with a timeout; cleared after each wait."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        self._event.clear()

    def wait(self, timeout: float | None) -> bool:
        try:
            return self._event.wait(timeout)
        finally:
            self._event.clear()


class Flag:
    """A flag set once (a subscription confirmed, or refused) that a subscriber waits on."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._error: BaseException | None = None

    def set(self) -> None:
        self._event.set()

    def fail(self, error: BaseException) -> None:
        """Wake the subscriber with ``error`` (the server refused the subscription)."""
        self._error = error
        self._event.set()

    def pending(self) -> bool:
        return not self._event.is_set()

    def refused(self) -> bool:
        return self._error is not None

    def wait(self, timeout: float) -> bool:
        """True once set, False after ``timeout``; raises the error it failed with."""
        done = self._event.wait(timeout)
        if self._error is not None:
            raise self._error
        return done


ROUND_THREADS = 4
"""Renewal rounds of one client that may run at once: one on time, the rest late ones
still waiting on an unreachable server after their deadline (they end with its sockets)."""


class Bounded:
    """Runs a call that must end by a deadline (a renewal round) on a helper thread.

    Past the deadline the caller goes on without it, so no socket timeout can delay a
    lost-lease report; the late call finishes on its thread within the client's own
    socket timeouts, and its answer is dropped.
    """

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None

    def run(self, call: Callable[[], T], timeout: float) -> T:
        """``call()``'s result, or :class:`TimeoutError` once ``timeout`` seconds passed."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(ROUND_THREADS, thread_name_prefix="redlease-round")
        try:
            future = self._executor.submit(call)
        except RuntimeError:  # closed meanwhile: the client is shutting down
            raise TimeoutError("the client is closing") from None
        try:
            return future.result(max(timeout, 0.0))
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"no answer within {timeout:.3f} s") from None

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


_pool: ThreadPoolExecutor | None = None
_pool_guard = threading.Lock()


def _forget_pool_in_child() -> None:
    """A forked child has none of its parent's pool threads: start a new pool on demand."""
    global _pool, _pool_guard
    _pool = None
    _pool_guard = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def _io_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_guard:
        if _pool is None:
            _pool = ThreadPoolExecutor(32, thread_name_prefix="redlease-io")
        return _pool


def concurrently(calls: Sequence[Callable[[], T]]) -> list[T | BaseException]:
    """Run every call at once (a shared thread pool); each result, or what it raised."""
    futures = [_io_pool().submit(call) for call in calls]
    results: list[T | BaseException] = []
    for future in futures:
        try:
            results.append(future.result())
        except Exception as exc:
            results.append(exc)
    return results


def is_cluster(client: Any) -> bool:
    return isinstance(client, ClusterClients)


def node_of(client: Any, key: str) -> tuple[str, Callable[[], Any], Any]:
    """Where ``key`` lives: the node's name, a connection factory and a client for it.

    A plain client is one node. On a cluster the node is the primary owning the key's slot,
    as the client's slot map says (refresh it with :func:`refresh_topology`).
    """
    if not is_cluster(client):
        pool = client.connection_pool
        return "main", pool.make_connection, client
    node = client.get_node_from_key(key)
    node_client = node.redis_connection
    return node.name, node_client.connection_pool.make_connection, node_client


def master_moved(client: Any) -> bool:
    """For a Sentinel-managed client: ask the sentinels now; True if the master changed.

    redis-py asks only when it connects, and an old master keeps accepting writes until the
    sentinels demote it (seconds later); asking each renewal round closes that gap.
    """
    pool = getattr(client, "connection_pool", None)
    ask = getattr(pool, "get_master_address", None)
    if ask is None:
        return False
    before = getattr(pool, "master_address", None)
    return before is not None and ask() != before


def drop_old_master_connections(client: Any) -> None:
    """Nothing to do: redis-py's sync Sentinel pool already closes a connection to a master
    it no longer names as it takes the connection back (``owns_connection``)."""


def refresh_topology(client: Any, avoid: str | None = None) -> None:
    """Read a cluster client's slot map again; ``avoid``: a node that may be silent."""
    if is_cluster(client):
        manager = client.nodes_manager
        manager.initialize(**asking_last(manager, avoid))


NO_LOOP: Any = None


def current_loop() -> Any:
    """Threads have no event loop: a sync client is never bound to one."""
    return NO_LOOP


def loop_is_over(loop: object) -> bool:
    return True


def forget_connections(client: Any) -> None:
    """Nothing to forget: the sync flavour's connections belong to no loop."""


def send_now(connection: Any, command: list[bytes], check_health: bool = True) -> None:
    """Send a packed command (the asyncio flavour's twin skips a task per send)."""
    connection.send_packed_command(command, check_health=check_health)


Guard = threading.RLock
sleep = time.sleep


def prepare_pubsub(connection: Any, opened: bool = False) -> None:
    """RESP2 frames; once ``opened`` (within a bound: ``links.open_pubsub``), the socket
    timeout stays, since the reader polls it briefly."""
    connection.protocol = 2
    if opened and connection._sock is not None:
        connection._sock.settimeout(connection.socket_timeout)


class Worker:
    """A daemon thread running one loop; its owner asks the loop to end, then joins it."""

    def __init__(self, loop: Callable[[], None], name: str) -> None:
        self._thread = threading.Thread(target=_logged, args=(loop, name), name=name, daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, within: float | None = None) -> None:
        """Wait for the loop's end (a thread cannot be cancelled: its owner told the loop
        to end), ``within`` seconds at most (:data:`STOP_TIMEOUT_S` by default)."""
        if self._thread is not threading.current_thread():
            self._thread.join(STOP_TIMEOUT_S if within is None else within)

    def wait(self, within: float) -> None:
        """Let the loop end by itself, for ``within`` seconds at most."""
        if within > 0 and self._thread is not threading.current_thread():
            self._thread.join(within)


def _logged(loop: Callable[[], None], name: str) -> None:
    try:
        loop()
    except Exception:
        logger.exception("redlease worker %s stopped on an error", name)


def shielded(start: Callable[[], T], within: float | None = None) -> T:
    """Run ``start``: a thread is not cancelled mid-call, so there is nothing to shield.

    With ``within``, it runs on a thread of its own and the caller waits that long at most
    (``TimeoutError``): a blocking call cannot be cut short, and one sent to a stopped server
    waits out the client's socket timeout (for ever without one) while the user's Ctrl-C
    waits. The thread is a daemon, so a call that never returns does not hold up the exit.
    """
    if within is None:
        return start()
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(start())
        except BaseException as exc:
            failure.append(exc)

    worker = threading.Thread(target=run, name="redlease-withdrawal", daemon=True)
    worker.start()
    worker.join(within)
    if failure:
        raise failure[0]
    if not outcome:
        raise TimeoutError(f"still waiting for the server after {within:g} s")
    return outcome[0]


def fire(lease: Lease, callbacks: list[LostCallback]) -> None:
    """Run lost-lease callbacks. One that returns a coroutine (a plain function around an
    ``async def``, which ``on_lost`` cannot tell from any other) is not awaited here: it is
    closed and reported as an error, never dropped in silence."""
    for result in run_callbacks(callbacks, lease):
        if inspect.isawaitable(result) or inspect.isasyncgen(result):
            getattr(result, "close", lambda: None)()
            logger.error(
                "on_lost callback of lock %r returned %s, which the sync Locks cannot await: "
                "it did not run; give a plain function (or use AsyncLocks)",
                lease.name,
                type(result).__name__,
            )


def fire_aside(lease: Lease, callbacks: list[LostCallback]) -> threading.Thread | None:
    """Run lost-lease callbacks on a thread of their own: the renewal worker must not wait
    for a slow one while the client's other leases need renewing."""
    if not callbacks:
        return None
    thread = threading.Thread(
        target=fire, args=(lease, callbacks), name="redlease-on-lost", daemon=True
    )
    thread.start()
    return thread


def finish_aside(threads: list[threading.Thread]) -> None:
    """Let the callbacks :func:`fire_aside` started end (an alert half sent at exit is
    lost), for :data:`STOP_TIMEOUT_S` at most in all."""
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for thread in threads:
        if thread is not threading.current_thread():  # close() called from a callback
            thread.join(max(deadline - time.monotonic(), 0.0))


class _LockFactory(Protocol):
    def __call__(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], owner: Hashable | None = None
    ) -> Any: ...


def wrap_locked(function: F, lock_for: _LockFactory) -> F:
    """Run ``function`` under the lock; an ``async def`` acquires in a worker thread.

    The coroutine's lock gets an owner of its own, since the acquire and release run in
    different threads of the default executor.
    """
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        async def locked_coroutine(*args: Any, **kwargs: Any) -> Any:
            lock = lock_for(args, kwargs, owner=object())
            await asyncio.to_thread(lock.__enter__)
            try:
                result = await function(*args, **kwargs)
            except BaseException:
                await asyncio.to_thread(lock.__exit__, *sys.exc_info())
                raise
            await asyncio.to_thread(lock.__exit__, None, None, None)
            return result

        return locked_coroutine  # type: ignore[return-value]

    @functools.wraps(function)
    def locked_call(*args: Any, **kwargs: Any) -> Any:
        with lock_for(args, kwargs):
            return function(*args, **kwargs)

    return locked_call  # type: ignore[return-value]
