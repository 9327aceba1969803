"""The edges of ``redlease chaos`` and the soak: bad options, bad paths, interrupted runs,
unreachable servers and the soak's leak checks on tiny runs. Each test is quick: a run is
either refused before any work, or cut short by a real signal, or the smallest there is."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import redis

import redlease
from conftest import cli_environment
from redlease.chaos.soak_settings import SoakSettings
from redlease.chaos.soak_worker import read_log

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
