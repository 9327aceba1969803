"""The edges of ``redlease chaos`` and the soak: bad options, bad paths, interrupted runs,
unreachable servers and the soak's leak checks on tiny runs. Each test is quick: a run is
either refused before any work, or cut short by a real signal, or the smallest there is."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import redlease
from conftest import cli_environment, redlease_command
from redlease.chaos.soak_settings import SoakSettings
from redlease.chaos.soak_worker import read_log
from redlease.server import EmbeddedServer

SOAK = [sys.executable, "-m", "redlease.chaos.soak"]


def _run(command: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        check=False,
        env=cli_environment(None),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """stderr is one clear line, never a traceback."""
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


# The soak worker's leak samples.


def test_a_worker_opens_every_connection_before_its_warm_up_sample(
    redlease_url: str, prefix: str, tmp_path: Path
) -> None:
    """A worker that never waited during its warm-up has its pub/sub connection anyway, so
    its first contended wait afterwards adds no descriptor (it used to add 3)."""
    board = tmp_path / "board.bin"
    board.write_bytes(bytes(8))
    log = tmp_path / "w.jsonl"
    with redlease.Locks(redis.Redis.from_url(redlease_url), prefix=prefix) as locks:
        # Held when the worker's one acquisition comes: it must wait (and subscribe).
        locks.lock("n000", ttl=2.5, renew=False, owner="test").acquire()
        done = _run(
            [
                sys.executable,
                "-m",
                "redlease.chaos.soak_worker",
                "--lock-url",
                redlease_url,
                "--data-url",
                redlease_url,
                "--prefix",
                prefix,
                "--names",
                "1",
                "--slot",
                "0",
                "--worker",
                "w00.0",
                "--count",
                "1",
                "--ttl",
                "1",
                "--acquire-timeout",
                "10",
                "--warmup",
                "0",
                "--deadline",
                str(time.monotonic() + 60),
                "--stop-file",
                str(tmp_path / "stop"),
                "--board",
                str(board),
                "--log",
                str(log),
            ]
        )
    assert done.returncode == 0, done.stdout + done.stderr
    worker = read_log(log)
    assert len(worker.sections) == 1
    assert worker.warm is not None
    assert worker.end is not None
    assert worker.end[1] - worker.warm[1] <= 0, (worker.warm, worker.end)


def test_the_warm_up_leaves_at_least_one_acquisition_to_sample() -> None:
    assert SoakSettings(acquisitions=1).warmup == 0
    assert SoakSettings(acquisitions=2).warmup == 1
    assert SoakSettings(acquisitions=10_000).warmup == 200


# The soak's options and servers: one line and a sysexits code, before any work.


@pytest.fixture
def silent_listener() -> Iterator[socket.socket]:
    """A port that accepts connections and never replies."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(50)
        yield listener


@pytest.fixture
def silent_server(silent_listener: socket.socket) -> str:
    return f"redis://127.0.0.1:{silent_listener.getsockname()[1]}/0"


@pytest.mark.parametrize(
    ("options", "code", "said"),
    [
        (["--url", "redis://127.0.0.1:1/0"], 69, "cannot reach"),
        (["--url", "notaurl"], 64, "--url"),
        (["--url", "redis://127.0.0.1:1/abc"], 64, "--url"),
        (["--ttl", "inf"], 64, "--ttl"),
        (["--workers", "0"], 64, "--workers"),
        (["--acquisitions", "0"], 64, "--acquisitions"),
        (["--names", "0"], 64, "--names"),
        (["--ttl", "0"], 64, "--ttl"),
        (["--ttl", "0.0001"], 64, "--ttl"),
        (["--ttl", "1e12"], 64, "--ttl"),
        (["--hold", "1e10"], 64, "--hold"),
        (["--fault-every", "-1"], 64, "--fault-every"),
        (["--nope"], 64, "--nope"),
    ],
)
def test_soak_refuses_bad_options_in_one_line(options: list[str], code: int, said: str) -> None:
    done = _run([*SOAK, "--workers", "1", "--acquisitions", "5", *options], timeout=30)
    assert done.returncode == code, done.stderr
    assert said in _one_line(done)
    assert done.stdout == ""


def test_soak_refuses_a_logs_path_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    done = _run([*SOAK, "--workers", "1", "--logs", str(file)], timeout=30)
    assert done.returncode == 64
    assert str(file) in _one_line(done)


def test_soak_says_a_server_that_never_replies_is_unreachable(silent_server: str) -> None:
    done = _run([*SOAK, "--workers", "1", "--url", silent_server], timeout=30)
    assert done.returncode == 69
    line = _one_line(done)
    assert silent_server in line
    assert "REDIS_URL" not in line, "the soak does not read REDIS_URL"


def test_soak_stopped_while_it_probes_the_server_says_interrupted(
    silent_listener: socket.socket, silent_server: str, tmp_path: Path
) -> None:
    process = _start([*SOAK, "--workers", "1", "--url", silent_server], tmp_path)
    silent_listener.settimeout(30)
    probe, _ = silent_listener.accept()  # python is up and the probe waits for the server
    with probe:
        stderr = _stop_with(process, signal.SIGTERM)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    assert "Traceback" not in stderr


@pytest.mark.parametrize("tool", ["chaos", "soak"])
def test_a_logs_directory_that_cannot_be_written_is_refused_before_any_work(
    tool: str, redlease_url: str
) -> None:
    """/proc is a directory even root cannot write a file in."""
    started = time.monotonic()
    if tool == "chaos":
        done = _chaos("pexpire", "--quick", "--url", redlease_url, "--logs", "/proc")
    else:
        done = _run([*SOAK, "--workers", "1", "--url", redlease_url, "--logs", "/proc"])
    assert done.returncode == 64, done.stderr
    assert "/proc" in _one_line(done)
    assert time.monotonic() - started < 15  # refused, not run


@pytest.mark.parametrize(
    ("tool", "left"),
    [
        ("chaos", "pexpire.stop"),
        ("chaos", "pexpire-w1.err"),
        ("soak", "stop"),
        ("soak", "w00.0.err"),
        ("soak", "board.bin"),
    ],
)
def test_an_earlier_runs_file_that_cannot_be_removed_is_one_line(
    tool: str, left: str, redlease_url: str, tmp_path: Path
) -> None:
    """A file of an earlier run that is no file (or another user's): one line that names
    it, exit 70, never a traceback."""
    stale = tmp_path / left
    stale.mkdir()
    if tool == "chaos":
        done = _chaos("pexpire", "--quick", "--url", redlease_url, "--logs", str(tmp_path))
    else:
        done = _run([*SOAK, "--workers", "1", "--url", redlease_url, "--logs", str(tmp_path)])
    assert done.returncode == 70, done.stderr
    assert "Traceback" not in done.stderr
    assert str(stale) in done.stderr


def test_a_soak_in_a_reused_logs_directory_reports_this_run_only(
    redlease_url: str, tmp_path: Path
) -> None:
    command = [
        *SOAK, "--json", "--url", redlease_url, "--logs", str(tmp_path),
        "--workers", "2", "--acquisitions", "5", "--names", "2", "--fault-every", "0",
    ]  # fmt: skip
    for _ in range(2):
        done = _run(command, timeout=120)
        report = json.loads(done.stdout)
        assert done.returncode == 0, (done.stderr, report["failures"])
        assert report["completed"]
        assert report["acquisitions"]["attempted"] == 10


# ``redlease chaos``'s paths: checked before running, results never lost.


def _chaos(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return _run(redlease_command("chaos", *args), timeout=timeout)


def test_chaos_refuses_a_markdown_page_it_cannot_write_before_running(
    redlease_url: str, tmp_path: Path
) -> None:
    started = time.monotonic()
    done = _chaos("pexpire", "--quick", "--url", redlease_url, "--markdown", "/nonexistent/x.md")
    assert done.returncode == 64
    assert "/nonexistent/x.md" in _one_line(done)
    assert time.monotonic() - started < 15  # refused, not run


def test_chaos_refuses_a_logs_path_that_is_a_file(redlease_url: str, tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    done = _chaos("pexpire", "--quick", "--url", redlease_url, "--logs", str(file))
    assert done.returncode == 64
    assert str(file) in _one_line(done)


def test_chaos_in_a_reused_logs_directory_reports_this_run_only(
    redlease_url: str, tmp_path: Path
) -> None:
    """The doc's own example run twice: the second run's verdict is its own."""
    for _ in range(2):
        done = _chaos(
            "pexpire", "--quick", "--json", "--url", redlease_url, "--logs", str(tmp_path)
        )
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert done.returncode == 0, (done.stderr, report)
        assert report["scenarios"]["pexpire"]["fenced_lost_updates"] == 0


def test_chaos_reports_its_results_when_the_server_stops_answering_mid_run(
    tmp_path: Path,
) -> None:
    """A --url server paused past every socket timeout: the scenario is reported (an error
    or a verdict), the run's keys are deleted once the server is back, never a traceback."""
    with EmbeddedServer() as server:
        process = _start(
            redlease_command("chaos", "sigstop", "--quick", "--json", "--url", server.url),
            tmp_path,
        )
        try:
            with redis.Redis.from_url(server.url) as client:
                prefix = _prefix_on(client, "redlease-chaos-sigstop-*", timeout=60)
            time.sleep(0.5)
            server.pause()
            time.sleep(16)  # past the 5 s socket timeouts of the counter reads and clean-up
            server.resume()
            stdout, stderr = process.communicate(timeout=120)
        finally:
            server.resume()
            if process.poll() is None:
                process.kill()
                process.wait()
        assert "Traceback" not in stderr, stderr
        report = json.loads(stdout.strip().splitlines()[-1])
        assert "sigstop" in report["scenarios"]
        assert process.returncode in (0, 70), stderr
        if process.returncode == 70:
            assert "sigstop" in stderr
        with redis.Redis.from_url(server.url) as client:
            assert list(client.scan_iter(match=f"{prefix}*")) == []


def test_chaos_prints_its_results_even_when_the_page_cannot_be_written(
    redlease_url: str,
) -> None:
    done = _chaos("pexpire", "--quick", "--json", "--url", redlease_url, "--markdown", "/dev/full")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["scenarios"]["pexpire"]["fenced_lost_updates"] == 0
    assert done.returncode == (74 if report["ok"] else 70)
    assert "/dev/full" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_scenario_error_names_a_log_directory_that_still_exists(tmp_path: Path) -> None:
    """Workers that cannot lock (a read-only replica): the error names the scenario on
    stderr, and the directory it points to is kept."""
    with (
        EmbeddedServer() as primary,
        EmbeddedServer(args=["--replicaof", "127.0.0.1", str(primary.port)]) as replica,
    ):
        environment = cli_environment(None) | {"TMPDIR": str(tmp_path)}
        done = subprocess.run(
            redlease_command("chaos", "sigstop", "--quick", "--json", "--url", replica.url),
            check=False,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 70, done.stderr
    error = json.loads(done.stdout.strip().splitlines()[-1])["scenarios"]["sigstop"]["error"]
    kept = Path(error.rsplit(" in ", 1)[1].split()[0])
    assert kept.is_dir(), error
    assert any(kept.iterdir()), error
    assert "sigstop" in done.stderr
    assert "Traceback" not in done.stderr
    assert str(kept) in done.stderr


# Interrupted runs: keys deleted, workers resumed and reaped, temporary files gone.


def _prefix_on(client: redis.Redis, pattern: str, timeout: float) -> str:
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        for key in client.scan_iter(match=pattern, count=1000):
            return key.decode().split(":", 1)[0].split("{", 1)[0].rstrip(":")
        time.sleep(0.05)
    raise AssertionError(f"no key matching {pattern} within {timeout} s")


def _processes_of(prefix: str) -> list[tuple[int, str]]:
    """Live processes whose command line names ``prefix``, with their state letter."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if prefix.encode() not in (entry / "cmdline").read_bytes():
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append((int(entry.name), state))
    return found


def _wait_for_stopped_worker(prefix: str, timeout: float) -> None:
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        if any(state == "T" for _, state in _processes_of(prefix)):
            return
        time.sleep(0.01)
    raise AssertionError(f"no worker of {prefix} was stopped within {timeout} s")


def _gone(prefix: str, timeout: float) -> list[tuple[int, str]]:
    limit = time.monotonic() + timeout
    while (left := _processes_of(prefix)) and time.monotonic() < limit:
        time.sleep(0.1)
    return left


def _start(command: list[str], tmp_path: Path) -> subprocess.Popen[str]:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    return subprocess.Popen(
        command,
        env=cli_environment(None) | {"TMPDIR": str(scratch)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop_with(process: subprocess.Popen[str], signum: signal.Signals) -> str:
    """Send ``signum``; the process's stderr once it ended (killed if not within 60 s)."""
    try:
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return stderr


RUNS: dict[str, Any] = {
    "chaos": (redlease_command("chaos", "sigstop", "--quick"), "redlease-chaos-sigstop-*"),
    "soak": (
        [
            *SOAK,
            "--workers",
            "3",
            "--acquisitions",
            "100000",
            "--names",
            "3",
            "--fault-every",
            "0.5",
            "--ttl",
            "0.5",
        ],
        "redlease-soak-*",
    ),
}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("tool", ["chaos", "soak"])
def test_an_interrupted_run_cleans_up_after_itself(
    tool: str, signum: signal.Signals, redlease_url: str, tmp_path: Path
) -> None:
    """Signalled while a worker is stopped by the sigstop fault: exit 130 in one line, the
    stopped worker resumed and reaped, no key of the run left, no temporary directory."""
    command, pattern = RUNS[tool]
    client = redis.Redis.from_url(redlease_url)
    process = _start([*command, "--url", redlease_url], tmp_path)
    try:
        prefix = _prefix_on(client, pattern, timeout=60)
        _wait_for_stopped_worker(prefix, timeout=60)
    except BaseException:
        _stop_with(process, signal.SIGKILL)
        raise
    stderr = _stop_with(process, signum)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert _gone(prefix, timeout=5) == []
    assert list(client.scan_iter(match=f"{prefix}*")) == []
    assert list((tmp_path / "tmp").iterdir()) == []
    client.close()


def test_workers_die_with_a_killed_soak_even_when_stopped(
    redlease_url: str, tmp_path: Path
) -> None:
    command, pattern = RUNS["soak"]
    client = redis.Redis.from_url(redlease_url)
    process = _start([*command, "--url", redlease_url], tmp_path)
    try:
        prefix = _prefix_on(client, pattern, timeout=60)
        _wait_for_stopped_worker(prefix, timeout=60)
        process.kill()
        process.wait()
        left = _gone(prefix, timeout=5)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid, _ in _processes_of(prefix):
            os.kill(pid, signal.SIGKILL)
        for key in client.scan_iter(match=f"{prefix}*"):
            client.delete(key)
        client.close()
    assert left == []


def test_a_soak_of_one_acquisition_per_worker_passes(redlease_url: str) -> None:
    """The warm-up sample used to come after the last acquisition: RSS growth None."""
    done = _run(
        [
            *SOAK,
            "--json",
            "--url",
            redlease_url,
            "--workers",
            "2",
            "--acquisitions",
            "1",
            "--names",
            "1",
            "--fault-every",
            "0",
        ],
        timeout=60,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["failures"] == [], report["failures"]
    assert done.returncode == 0
    assert report["workers"]["sampled"] == 2
