"""A small TCP proxy of our own, for network faults on loopback.

The machine has no ``tc netem`` and no toxiproxy, so the harness puts one :class:`Link`
between each worker and each lock server it talks to, and changes the link's behaviour
while the workers run:

* ``delay``: every reply (server to client) is held back this many seconds, in order;
* :attr:`Mode.DROP`: the next reply is thrown away and the connection reset, so the
  client cannot know whether its command ran (the ambiguous outcome of a lost packet
  followed by a timeout); later replies pass again;
* :attr:`Mode.DROP_MESSAGE`: the same for the next pub/sub message (a hand-off lost while
  its connection drops); other replies pass meanwhile;
* :attr:`Mode.REFUSE`: every connection is reset at once, new ones too (an unreachable
  host that says so);
* :attr:`Mode.BLACKHOLE`: nothing is forwarded either way and nothing is closed; bytes
  wait in the proxy and are delivered when the link heals, as TCP retransmission would
  after a partition that ends before the connection times out. New connections are
  accepted but not connected upstream until then.

All links share one asyncio loop in a daemon thread (:class:`ProxyHub`); the harness
changes a link from its own thread through :meth:`Link.set`.
"""

from __future__ import annotations

import asyncio
import enum
import threading
import time
from collections.abc import Awaitable
from contextlib import suppress
from typing import TypeVar

from redlease.chaos.errors import ChaosError

HOST = "127.0.0.1"
CHUNK = 65_536
START_TIMEOUT = 5.0
STOP_TIMEOUT = 5.0
CONNECT_TIMEOUT = 5.0

T = TypeVar("T")


class Mode(enum.Enum):
    FORWARD = "forward"
    DROP = "drop"
    DROP_MESSAGE = "drop-message"
    BLACKHOLE = "blackhole"
    REFUSE = "refuse"
    CUT_MESSAGE = "cut-message"
    """The next pub/sub message arrives half-way, then its connection breaks."""


class Link:
    """One loopback port that forwards every connection to ``upstream``."""

    def __init__(self, hub: ProxyHub, upstream: tuple[str, int]) -> None:
        self.hub = hub
        self.upstream = upstream
        self.port = 0
        self.delay = 0.0
        self.mode = Mode.FORWARD
        self._server: asyncio.base_events.Server | None = None
        self._open: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def set(self, *, delay: float = 0.0, mode: Mode = Mode.FORWARD) -> None:
        """Change the link's behaviour (from any thread); ``set()`` heals it."""
        self.hub.call(self._apply(delay, mode))

    async def _apply(self, delay: float, mode: Mode) -> None:
        assert self._open is not None
        self.delay, self.mode = delay, mode
        if mode is Mode.BLACKHOLE:
            self._open.clear()
        else:
            self._open.set()
        if mode is Mode.REFUSE:
            for writer in list(self._writers):
                writer.transport.abort()

    async def _listen(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._server = await asyncio.start_server(self._serve, HOST, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._open is not None
        if self.mode is Mode.REFUSE:
            writer.transport.abort()
            return
        self._writers.add(writer)
        try:
            await self._open.wait()
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.upstream), CONNECT_TIMEOUT
            )
        except (OSError, asyncio.TimeoutError, asyncio.CancelledError):
            self._writers.discard(writer)
            writer.transport.abort()
            return
        self._writers.add(upstream_writer)
        pair = (writer, upstream_writer)
        try:
            await asyncio.gather(
                self._pipe(reader, upstream_writer, pair, reply=False),
                self._pipe(upstream_reader, writer, pair, reply=True),
            )
        except asyncio.CancelledError:  # the hub is stopping
            for end in pair:
                end.transport.abort()
        for end in pair:
            self._writers.discard(end)

    async def _pipe(
        self,
        source: asyncio.StreamReader,
        target: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
        *,
        reply: bool,
    ) -> None:
        """Copy ``source`` to ``target`` in order, applying the link's faults."""
        assert self._open is not None
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        sender = asyncio.ensure_future(self._send(queue, target, pair, reply=reply))
        try:
            while chunk := await source.read(CHUNK):
                due = time.monotonic() + (self.delay if reply else 0.0)
                queue.put_nowait((due, chunk))
        except OSError:
            pass
        queue.put_nowait((0.0, b""))
        with suppress(OSError):
            await sender

    async def _send(
        self,
        queue: asyncio.Queue[tuple[float, bytes]],
        target: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
        *,
        reply: bool,
    ) -> None:
        assert self._open is not None
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            await asyncio.sleep(max(due - time.monotonic(), 0.0))
            await self._open.wait()
            if reply and (
                self.mode is Mode.DROP or (self.mode is Mode.DROP_MESSAGE and _is_message(chunk))
            ):
                self.mode = Mode.FORWARD
                break
            if reply and self.mode is Mode.CUT_MESSAGE and _is_message(chunk):
                self.mode = Mode.FORWARD
                target.write(chunk[: len(chunk) // 2])
                await target.drain()
                break
            target.write(chunk)
            await target.drain()
        for end in pair:
            end.transport.abort()


class ProxyHub:
    """An asyncio loop in a daemon thread that serves every :class:`Link`."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="redlease-chaos-proxy", daemon=True
        )
        self.links: list[Link] = []

    def __enter__(self) -> ProxyHub:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def link(self, host: str, port: int) -> Link:
        """A new link to ``host:port``, already listening."""
        link = Link(self, (host, port))
        self.call(link._listen())
        self.links.append(link)
        return link

    def heal_all(self) -> None:
        for link in self.links:
            link.set()

    def call(self, coroutine: Awaitable[T], timeout: float = START_TIMEOUT) -> T:
        """Run ``coroutine`` on the proxy loop and wait (bounded) for its result."""
        future = asyncio.run_coroutine_threadsafe(_wrap(coroutine), self._loop)
        try:
            return future.result(timeout)
        except TimeoutError as error:
            future.cancel()
            raise ChaosError(f"the chaos proxy did not answer within {timeout:g} s") from error

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        with suppress(ChaosError):
            self.call(_close_all(self.links), STOP_TIMEOUT)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()


def _is_message(chunk: bytes) -> bool:
    """Whether ``chunk`` starts with a pub/sub message (RESP2 array or RESP3 push)."""
    return chunk[:2] in (b"*3", b">3") and b"message\r\n" in chunk[:24]


async def _wrap(coroutine: Awaitable[T]) -> T:
    return await coroutine


async def _close_all(links: list[Link]) -> None:
    for link in links:
        await link._close()
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
