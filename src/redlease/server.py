"""A private Redis/Valkey server for tests, demos and benchmarks, or the URL of one.

:func:`server_url` follows redlease's resolution order (see :mod:`redlease.server_finder`):
an explicit URL, then ``REDIS_URL``, and only then a private :class:`EmbeddedServer`
started from a binary. A private server keeps nothing on disk, listens on localhost only,
and never outlives the Python process that started it (see :mod:`redlease.processes`):
a normal exit, ``sys.exit`` and Ctrl-C stop it through one ``atexit`` hook, and when the
process dies without running ``atexit``, Linux kills the server through
``PR_SET_PDEATHSIG`` (only when the main thread started it; elsewhere its temporary
directory may also be left behind). No signal handler is installed in the user's process.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlease import processes
from redlease.errors import ServerUnavailable
from redlease.processes import free_port, log_tail
from redlease.server_finder import (
    BINARY_ENV,
    INSTALL_HINT,
    URL_ENV,
    find_server_binary,
    resolve_url,
)

# bench/coord_servers.py imports the death-signal hook from here; new code should use
# redlease.processes.die_with_parent.
_die_with_parent = processes.die_with_parent

__all__ = [
    "BINARY_ENV",
    "INSTALL_HINT",
    "URL_ENV",
    "EmbeddedServer",
    "ServerInfo",
    "ServerStartError",
    "find_server_binary",
    "free_port",
    "resolve_url",
    "server_url",
]

_PORT_ATTEMPTS = 5
_READY_LINE = "Ready to accept connections"
# DEBUG lets fault tests freeze a server from inside (DEBUG SLEEP). Redis 7.0 turned it
# off by default behind this option; older servers have DEBUG on and refuse the option.
_DEBUG_OPTION = ("--enable-debug-command", "local")
_binaries_without_debug_option: set[str] = set()


class ServerStartError(ServerUnavailable):
    """A server we started exited, or did not answer PING, before the startup deadline."""


@dataclass(frozen=True)
class ServerInfo:
    """Where a server is and what it is; ``started`` is False for an external URL."""

    url: str
    host: str
    port: int
    binary: str | None
    version: str | None
    started: bool

    @classmethod
    def external(cls, url: str) -> ServerInfo:
        """Describe a server we did not start; ``version`` is None if it cannot be asked."""
        parts = urlsplit(url)
        default_port = 0 if parts.scheme == "unix" else 6379
        return cls(
            url=url,
            host=parts.hostname or parts.path,
            port=parts.port or default_port,
            binary=None,
            version=_server_version(url),
            started=False,
        )


@contextmanager
def server_url(url: str | None = None, **kwargs: Any) -> Iterator[str]:
    """Yield a usable server URL: explicit, ``REDIS_URL``, or a private server stopped after.

    ``kwargs`` go to :class:`EmbeddedServer` and only matter when a server is started.
    """
    resolved = resolve_url(url)
    if resolved is not None:
        yield resolved
        return
    with EmbeddedServer(**kwargs) as server:
        yield server.url


class EmbeddedServer:
    """A private Redis/Valkey process with no persistence, on a localhost port.

    ``start`` and ``stop`` are idempotent. ``pause``/``resume``/``kill``/``restart`` exist
    for fault tests: a paused server holds connections open without answering, a killed
    one drops them, and a restarted one comes back on the same port with no data.
    """

    def __init__(
        self,
        *,
        binary: str | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        args: Sequence[str] = (),
        startup_timeout: float = 10.0,
    ) -> None:
        self._requested_binary = binary
        self._port = port
        self._host = host
        self._args = tuple(args)
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self._process_port = 0
        self._directory: Path | None = None
        self._info: ServerInfo | None = None

    @property
    def url(self) -> str:
        return self.info.url

    @property
    def port(self) -> int:
        return self.info.port

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs (also while paused), else None."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def info(self) -> ServerInfo:
        if self._info is None:
            raise RuntimeError("the server has not been started yet; call start() first")
        return self._info

    def start(self) -> ServerInfo:
        """Start the server if it is not running; return where it listens."""
        if self._is_running():
            return self.info
        binary = find_server_binary(self._requested_binary)
        port_is_fixed = self._port is not None
        for attempt in range(_PORT_ATTEMPTS):
            port = self._port if self._port is not None else free_port(self._host)
            try:
                version = self._launch(binary, port)
            except _PortTaken:
                if port_is_fixed or attempt == _PORT_ATTEMPTS - 1:
                    raise ServerStartError(
                        f"port {port} on {self._host} is already in use; "
                        f"{binary} could not listen there"
                    ) from None
                continue
            self._port = port
            self._info = ServerInfo(
                url=f"redis://{self._host}:{port}/0",
                host=self._host,
                port=port,
                binary=binary,
                version=version,
                started=True,
            )
            processes.stop_at_exit(self)
            return self._info
        raise AssertionError("unreachable: the last attempt returns or raises")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (SHUTDOWN NOSAVE, then SIGTERM, then SIGKILL) and remove its files."""
        if self._process is not None:
            processes.stop(self._process, timeout, ask=self._ask_to_shut_down)
        self._process = None
        self._remove_directory()
        processes.forget_at_exit(self)

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): connections stay open but nothing is answered."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused process run again (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash would; ``restart`` brings it back."""
        if self._process is not None:
            processes.kill(self._process)

    def restart(self) -> ServerInfo:
        """Stop (if running) and start again on the same port, with an empty data set."""
        self.stop()
        return self.start()

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self._info.url if self._info else "not started"
        return f"<EmbeddedServer {where} pid={self.pid}>"

    def _launch(self, binary: str, port: int) -> str | None:
        """Start ``binary`` on ``port`` and wait for PING; return the server's version."""
        try:
            return self._launch_once(binary, port)
        except _DebugOptionRefused:
            _binaries_without_debug_option.add(binary)
            return self._launch_once(binary, port)

    def _launch_once(self, binary: str, port: int) -> str | None:
        self._remove_directory()
        self._directory = Path(tempfile.mkdtemp(prefix="redlease-server-"))
        log_path = self._directory / "server.log"
        self._process_port = port
        debug = () if binary in _binaries_without_debug_option else _DEBUG_OPTION
        command = [
            binary,
            "--port", str(port),
            "--bind", self._host,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self._directory),
            "--daemonize", "no",
            "--protected-mode", "yes",
            *debug,
            *self._args,
        ]  # fmt: skip
        self._process = processes.spawn(command, log_path)
        try:
            return self._wait_until_ready(binary, port, log_path)
        except BaseException:
            self.stop(timeout=1.0)
            raise

    def _wait_until_ready(self, binary: str, port: int, log_path: Path) -> str | None:
        """Wait until *our* process answers on ``port``; return its version if it tells.

        Checking ``process_id`` matters: when another server holds the port, that one
        answers while ours is still on its way out with "Address already in use". When the
        server will not say (a password or ACL set through ``args``), its log must say it
        is ready instead.
        """
        assert self._process is not None
        url = f"redis://{self._host}:{port}/0"
        deadline = time.monotonic() + self._startup_timeout
        pause = 0.005
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                log = log_tail(log_path)
                if "Address already in use" in log:
                    raise _PortTaken
                if "FATAL CONFIG" in log and _DEBUG_OPTION[0].lstrip("-") in log:
                    raise _DebugOptionRefused
                raise ServerStartError(
                    f"{binary} exited with code {self._process.returncode} "
                    f"while starting on port {port}; its log ends with:\n{log}"
                )
            try:
                info = _server_info(url, timeout=0.5)
            except (redis.AuthenticationError, redis.ResponseError):
                if _READY_LINE in log_tail(log_path):
                    return None
            except (redis.ConnectionError, redis.TimeoutError):
                pass
            else:
                if info.get("process_id") == self._process.pid:
                    return _version(info)
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        raise ServerStartError(
            f"{binary} did not answer PING on port {port} within "
            f"{self._startup_timeout:g} s; its log ends with:\n{log_tail(log_path)}"
        )

    def _ask_to_shut_down(self, timeout: float) -> bool:
        """Send SHUTDOWN NOSAVE; True if the server took it (redis-py: no reply, no error).

        False when it cannot be asked (no answer, a password set through ``args``), so the
        caller falls back to SIGTERM, which Redis and Valkey also treat as a clean shutdown.
        """
        client = redis.Redis(host=self._host, port=self._process_port, **_one_try(timeout))
        with client:
            try:
                client.ping()
            except redis.RedisError:
                return False
            try:
                client.shutdown(nosave=True)
            except redis.RedisError:
                return False
        return True

    def _is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _signal(self, signal_number: signal.Signals) -> None:
        if self._process is None or self._process.poll() is not None:
            raise RuntimeError(f"the server is not running; cannot send {signal_number.name}")
        self._process.send_signal(signal_number)

    def _remove_directory(self) -> None:
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
            self._directory = None


class _PortTaken(Exception):
    """The server could not bind its port; a new free port may work."""


class _DebugOptionRefused(Exception):
    """A server older than Redis 7.0: it has DEBUG on and does not know the option."""


def _server_version(url: str) -> str | None:
    """The version of the server at ``url``, or None if it cannot be asked."""
    try:
        return _version(_server_info(url, timeout=1.0))
    except redis.RedisError:
        return None


def _server_info(url: str, timeout: float) -> dict[str, Any]:
    with redis.Redis.from_url(url, **_one_try(timeout)) as client:
        info: dict[str, Any] = client.info("server")
        return info


def _version(info: dict[str, Any]) -> str | None:
    """Valkey also reports a ``redis_version`` (7.2.4, for compatibility): prefer its own."""
    version = info.get("valkey_version") or info.get("redis_version")
    return str(version) if version is not None else None


def _one_try(timeout: float) -> dict[str, Any]:
    """Client options for probes: redis-py's default retries would add seconds of backoff."""
    return {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
    }
