"""What only asyncio does differently: owners are tasks, waits are awaited, workers are tasks."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import sys
import threading
import weakref
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from redlease.compat import AsyncClusterClients, asking_last, library_of
from redlease.core.lease import Lease, LostCallback, run_callbacks
from redlease.core.owner import Owner
from redlease.errors import InvalidArgument, LockError

logger = logging.getLogger("redlease")
F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
_background: set[asyncio.Task[Any]] = set()
ASYNCIO = True
"""This flavour's clients are ``redis.asyncio`` (or ``valkey.asyncio``) clients."""
INTERRUPTIONS = (asyncio.CancelledError, KeyboardInterrupt)
"""What can cut an acquire short after the server may already have granted it."""


def current_owner() -> Owner:
    task = asyncio.current_task()
    if task is None:
        raise LockError("an asyncio lock must be used from inside a running task")
    return Owner("task", task, task.get_name())


async def _wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait for ``event`` up to ``timeout``; a cancellation always propagates.

    ``asyncio.wait_for`` can swallow a cancellation that lands in the same loop turn as
    the event (CPython gh-86296), which left a cancelled waiter waiting out a holder's TTL.
    """
    if sys.version_info >= (3, 11):
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        return True
    waiter = asyncio.ensure_future(event.wait())
    done, _ = await asyncio.wait([waiter], timeout=timeout)
    if not done:
        waiter.cancel()
        return False
    return True


def check_cancelled() -> None:
    """Raise if the current task was asked to stop, even if a library swallowed the signal."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    if cancelling is not None and cancelling():
        raise asyncio.CancelledError


class Wakeup:
    """A settable flag a waiter can block on with a timeout; cleared after each wait."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def clear(self) -> None:
        self._event.clear()

    async def wait(self, timeout: float | None) -> bool:
        try:
            return await _wait_event(self._event, timeout)
        finally:
            self._event.clear()


class Flag:
    """A flag set once (a subscription confirmed, or refused) that a subscriber waits on."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
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

    async def wait(self, timeout: float) -> bool:
        """True once set, False after ``timeout``; raises the error it failed with."""
        done = await _wait_event(self._event, timeout)
        if self._error is not None:
            raise self._error
        return done


class Bounded:
    """Runs a call that must end by a deadline (a renewal round): past it, the call is
    cancelled and the caller goes on, so no socket timeout can delay a lost-lease report."""

    async def run(self, call: Callable[[], Awaitable[T]], timeout: float) -> T:
        """``call()``'s result, or :class:`TimeoutError` once ``timeout`` seconds passed."""
        try:
            return await asyncio.wait_for(call(), max(timeout, 0.0))
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer within {timeout:.3f} s") from None

    def close(self) -> None:
        """Nothing lingers in the asyncio flavour: a late call was cancelled."""


async def concurrently(calls: Sequence[Callable[[], Awaitable[T]]]) -> list[T | BaseException]:
    """Run every call at once (tasks); each result, or the exception it raised."""
    return list(await asyncio.gather(*(call() for call in calls), return_exceptions=True))


def is_cluster(client: Any) -> bool:
    return isinstance(client, AsyncClusterClients)


async def node_of(client: Any, key: str) -> tuple[str, Callable[[], Any], Any]:
    """Where ``key`` lives: the node's name, a connection factory and a client for it.

    A plain client is one node. On a cluster the node is the primary owning the key's slot,
    as the client's slot map says (refresh it with :func:`refresh_topology`).
    """
    if not is_cluster(client):
        pool = client.connection_pool
        return "main", pool.make_connection, client
    await client.initialize()
    node = client.get_node_from_key(key)
    clients = _node_clients_of(client)
    if node.name not in clients:
        library = library_of(client).asyncio
        pool = library.ConnectionPool(
            connection_class=node.connection_class, **node.connection_kwargs
        )
        client_class = getattr(library, "Redis", None) or library.Valkey
        clients[node.name] = client_class(connection_pool=pool)
    return (
        node.name,
        lambda: node.connection_class(**node.connection_kwargs),
        clients[node.name],
    )


def _node_clients_of(client: Any) -> dict[str, Any]:
    """The per-node clients made for ``client`` on the running loop: their connections
    belong to that loop, and carry that client's settings (credentials, TLS)."""
    loop = asyncio.get_running_loop()
    made = _node_clients.get(client)
    if made is None or made[0] is not loop:
        made = (loop, {})
        _node_clients[client] = made
    return made[1]


async def refresh_topology(client: Any, avoid: str | None = None) -> None:
    """Read a cluster client's slot map again; ``avoid``: a node that may be silent."""
    if is_cluster(client):
        manager = client.nodes_manager
        await manager.initialize(**asking_last(manager, avoid))


async def master_moved(client: Any) -> bool:
    """For a Sentinel-managed client: ask the sentinels now; True if the master changed.

    redis-py asks only when it connects, and an old master keeps accepting writes until the
    sentinels demote it (seconds later); asking each renewal round closes that gap.
    """
    pool = getattr(client, "connection_pool", None)
    ask = getattr(pool, "get_master_address", None)
    if ask is None:
        return False
    before = getattr(pool, "master_address", None)
    return before is not None and await ask() != before


def drop_old_master_connections(client: Any) -> None:
    """Make a Sentinel-managed pool close a connection to a master it no longer names as it
    takes the connection back.

    redis-py's sync pool does so (``owns_connection``); its asyncio pool keeps the
    connection, so a command in flight when the master moved (another task's) leaves one to
    the old master in the pool, and later commands on it (a renewal) are acknowledged there
    until the sentinels demote it, seconds later, while the new master lets the lease expire.
    """
    pool: Any = getattr(client, "connection_pool", None)
    if not getattr(pool, "is_master", False) or getattr(pool, "_redlease_follows", False):
        return
    release = pool.release

    async def release_to_the_master(connection: Any) -> None:
        master = pool.master_address
        if master is not None and (connection.host, connection.port) != master:
            await connection.disconnect()
        await release(connection)

    pool.release = release_to_the_master
    pool._redlease_follows = True


_node_clients: weakref.WeakKeyDictionary[Any, tuple[Any, dict[str, Any]]] = (
    weakref.WeakKeyDictionary()
)
"""Per cluster client: the loop its per-node clients were made on, and those clients."""


def current_loop() -> Any:
    """The running event loop: an asyncio client works on one loop at a time."""
    return asyncio.get_running_loop()


def loop_is_over(loop: Any) -> bool:
    """Whether a loop a client worked on is gone (closed, or no longer running), so the
    client may move to the loop that runs now (``asyncio.run`` twice, a test client)."""
    return bool(loop.is_closed() or not loop.is_running())


def forget_connections(client: Any) -> None:
    """Drop, without closing, every pooled connection: they belong to a loop that is gone."""
    pools = [client.connection_pool] if not is_cluster(client) else []
    if is_cluster(client):  # an asyncio cluster node keeps its own connections
        manager = client.nodes_manager
        for node in [*manager.nodes_cache.values(), *manager.startup_nodes.values()]:
            node._connections.clear()
            node._free.clear()
    _, made = _node_clients.pop(client, (None, {}))
    pools += [node_client.connection_pool for node_client in made.values()]
    for pool in pools:
        pool.reset()


async def send_now(connection: Any, command: list[bytes], check_health: bool = True) -> None:
    """Send a packed command, without a task of its own when the socket takes it at once.

    redis-py bounds each send by its socket timeout (5 s by default) through
    ``asyncio.wait_for``, which starts a task per send: about as much CPU as the rest of a
    lock's command. A write the kernel takes whole leaves nothing to wait for, so here the
    bytes are written first and only a remainder is drained, under the same bound. A
    connection that is closed, closing or due a health check goes through redis-py's send.
    A write that fails closes the transport, and the read that follows raises.
    """
    writer = getattr(connection, "_writer", None)
    if (
        writer is None
        or not getattr(connection, "is_connected", False)
        or writer.transport.is_closing()
        or (check_health and connection.health_check_interval)
    ):
        await connection.send_packed_command(command, check_health=check_health)
        return
    writer.writelines(command)
    if writer.transport.get_write_buffer_size():
        await connection.send_packed_command([], check_health=False)


Guard = asyncio.Lock
sleep = asyncio.sleep


def prepare_pubsub(connection: Any, opened: bool = False) -> None:
    """RESP2 frames; once ``opened`` (within a bound: ``links.open_pubsub``), no socket
    timeout: the reader awaits pushes for as long as it takes."""
    connection.protocol = 2
    if opened:
        connection.socket_timeout = None


class Worker:
    """A background task running one loop; stopping cancels it and waits for the end.

    The task starts in an empty context, as a thread does: it serves every later caller,
    so it must not carry the context variables (a tracing span) of whichever started it.
    """

    def __init__(self, loop: Callable[[], Awaitable[None]], name: str) -> None:
        create_task = asyncio.get_running_loop().create_task
        self._task = contextvars.Context().run(create_task, _logged(loop, name), name=name)

    def alive(self) -> bool:
        return not self._task.done()

    async def stop(self, within: float | None = None) -> None:
        self._task.cancel()  # and wait for the end (``within`` seconds at most, when given)
        if within is None or within > 0:
            await asyncio.wait([self._task], timeout=within)

    async def wait(self, within: float) -> None:
        """Let the loop end by itself, for ``within`` seconds at most."""
        if within > 0:
            await asyncio.wait([self._task], timeout=within)


async def _logged(loop: Callable[[], Awaitable[None]], name: str) -> None:
    try:
        await loop()
    except asyncio.CancelledError:
        raise
    except Exception:
        logger.exception("redlease worker %s stopped on an error", name)


async def shielded(start: Callable[[], Awaitable[T]], within: float | None = None) -> T:
    """Finish what ``start`` starts even if the caller is cancelled meanwhile (a release
    must land).

    With ``within``, the caller waits that long at most (``asyncio.TimeoutError``) and the
    work goes on by itself; its outcome is then dropped (``asyncio.shield`` stops watching a
    task whose caller left, and asyncio would log its error as never retrieved).
    """
    if within is None:
        return await asyncio.shield(start())
    task = asyncio.ensure_future(start())
    _background.add(task)
    task.add_done_callback(_dropped)
    return await asyncio.wait_for(asyncio.shield(task), within)


def _dropped(task: asyncio.Future[Any]) -> None:
    _background.discard(task)
    if not task.cancelled():
        task.exception()


def fire(lease: Lease, callbacks: list[LostCallback]) -> None:
    """Run lost-lease callbacks; coroutine callbacks are scheduled on the running loop
    (with none, as ``on_lost`` outside the loop can meet, they are refused)."""
    pending = [result for result in run_callbacks(callbacks, lease) if inspect.isawaitable(result)]
    if not pending:
        return
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        for coroutine in pending:
            getattr(coroutine, "close", lambda: None)()
        raise InvalidArgument(
            f"an async def on_lost callback of lock {lease.name!r} runs on the event loop: "
            "call on_lost from a coroutine of the loop that holds the lease"
        ) from None
    for result in pending:
        task = asyncio.ensure_future(_logging_errors(result, lease.name))
        _background.add(task)
        task.add_done_callback(_background.discard)


def fire_aside(lease: Lease, callbacks: list[LostCallback]) -> threading.Thread | None:
    """The renewal worker's :func:`fire`: on the loop, where a slow sync callback holds up
    everything anyway (the sync twin runs them on a thread of their own)."""
    fire(lease, callbacks)
    return None


async def finish_aside(threads: list[threading.Thread]) -> None:
    """Nothing runs aside here (see :func:`fire_aside`)."""


async def _logging_errors(callback_run: Awaitable[object], name: str) -> None:
    """Await an ``async def`` on_lost callback, logging its error as a sync one's is."""
    try:
        await callback_run
    except Exception:
        logger.exception("on_lost callback of lock %r raised", name)


def wrap_locked(function: F, lock_for: Callable[..., Any]) -> F:
    """Wrap an ``async def`` so each call runs under ``lock_for(args, kwargs)``."""
    if not inspect.iscoroutinefunction(function):
        raise InvalidArgument(
            f"{function.__qualname__} is not an async def: an asyncio lock cannot block "
            "synchronous code; decorate it with the sync Locks instead"
        )

    @functools.wraps(function)
    async def locked_call(*args: Any, **kwargs: Any) -> Any:
        async with lock_for(args, kwargs):
            return await function(*args, **kwargs)

    return locked_call  # type: ignore[return-value]
