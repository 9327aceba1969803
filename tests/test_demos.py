"""The demos, run for real through ``python -m redlease demo ...``.

Each demo starts real worker processes against the test server (``REDIS_URL``) and prints
its figures as one JSON object. With the lock each must show what the lock promises (no
oversell with a segmented stock, one source call for a cache rebuild, one order per user,
a renewed lease that nobody else gets), and without it the failure the lock prevents.

What a demo shows while it runs is checked on a real pseudo-terminal, where a user sees it:
the stage it is in from the first moment, and its own lines never joined to the status line.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest
import redis

from conftest import cli_environment

RUN_TIMEOUT = 90
PLAIN_COMMAND = (
    "import sys; sys.modules['rich'] = None; "  # rich not installed: the plain display
    "from redlease.cli import main; raise SystemExit(main(sys.argv[1:]))"
)
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
STATUS_TEXT = re.compile(r": \d+/\d+|\.\.\.\s*$")
"""A status line's mark: a count ``3/8`` after a colon, or ``...`` for a stage without one."""
TIMELINE = re.compile(r"^\s*\d+\.\d{3} s  (holder|contender) ")
LOST_WARNING = "redlease: lease on lock 'watchdog:job' lost"


def run_demo(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_environment(url)
    return subprocess.run(
        [sys.executable, "-m", "redlease", "demo", *args],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def figures_of(url: str, *args: str) -> dict[str, object]:
    """Run a demo with ``--json``; check it exited 0 and left no key behind."""
    completed = run_demo(url, *args, "--json")
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert len(lines) == 1, completed.stdout
    figures = json.loads(lines[0])
    assert isinstance(figures, dict)
    with redis.Redis.from_url(url) as client:
        assert list(client.scan_iter(match="redlease-demo:*")) == []
    return figures


# flash sale with a segmented stock


def test_segmented_sale_sells_each_segment_exactly(redlease_url):
    figures = figures_of(redlease_url, "flash-sale", "--segments", "4")

    assert figures["locked"] is True
    assert figures["segments"] == 4
    assert figures["oversold"] == 0
    assert figures["sold"] == figures["stock"] == 100
    assert figures["segment_stock"] == [25, 25, 25, 25]
    assert figures["segment_sold"] == figures["segment_stock"]
    assert figures["stock_left"] == 0
    assert figures["buys_per_s"] > 0  # throughput grows with N: see docs/cli.md, not asserted


def test_uneven_segments_split_the_stock_without_loss(redlease_url):
    figures = figures_of(
        redlease_url, "flash-sale", "--segments", "3", "--stock", "20", "--workers", "3"
    )

    assert figures["segment_stock"] == [7, 7, 6]
    assert figures["segment_sold"] == [7, 7, 6]
    assert figures["oversold"] == 0


def test_segmented_sale_without_the_lock_oversells(redlease_url):
    figures = figures_of(redlease_url, "flash-sale", "--segments", "4", "--no-lock")

    assert figures["locked"] is False
    assert figures["oversold"] > 0
    assert sum(figures["segment_sold"]) == figures["sold"]


def test_more_segments_than_items_is_a_usage_error(redlease_url):
    completed = run_demo(redlease_url, "flash-sale", "--stock", "3", "--segments", "4")

    assert completed.returncode == 64
    assert "--segments" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_one_segment_keeps_the_unsplit_sale(redlease_url):
    figures = figures_of(redlease_url, "flash-sale", "--stock", "20", "--workers", "2")

    assert figures["segments"] == 1
    assert figures["segment_sold"] == [20]


# cache rebuild


def test_cache_is_rebuilt_by_exactly_one_process(redlease_url):
    figures = figures_of(redlease_url, "cache-rebuild")

    assert figures["locked"] is True
    assert figures["source_calls"] == 1
    assert figures["workers"] == 8
    assert figures["readers"] == 7
    assert figures["distinct_values"] == 1
    assert figures["seconds"] >= 0.5


def test_cache_without_the_lock_stampedes_the_source(redlease_url):
    figures = figures_of(redlease_url, "cache-rebuild", "--no-lock")

    assert figures["locked"] is False
    assert figures["source_calls"] > 1
    assert figures["readers"] == figures["workers"] - figures["source_calls"]


# one order per user


def test_hammering_buy_creates_exactly_one_order(redlease_url):
    figures = figures_of(redlease_url, "one-order", "--workers", "4", "--attempts", "10")

    assert figures["locked"] is True
    assert figures["attempts"] == 40
    assert figures["orders"] == 1
    assert figures["refused"] == 39
    assert figures["workers"] == 4


def test_buy_without_the_lock_creates_duplicates(redlease_url):
    figures = figures_of(redlease_url, "one-order", "--workers", "4", "--no-lock")

    assert figures["locked"] is False
    assert figures["orders"] > 1
    assert figures["duplicates"] == figures["orders"] - 1


# watchdog


def test_renewed_lease_outlives_its_ttl_and_keeps_the_other_out(redlease_url):
    figures = figures_of(redlease_url, "watchdog")

    assert figures["ttl"] == 1.0
    assert figures["job_seconds"] == 3.5
    assert figures["renewals"] >= 3
    assert figures["overlaps"] == 0
    assert figures["contender_acquired"] == 0
    assert figures["contender_tries"] > 0
    assert figures["holder_lost"] is False
    log = figures["renewal_log"]
    assert len(log) >= 3
    assert all(entry["server_ttl_ms"] is not None for entry in log)
    assert all(0 < entry["server_ttl_ms"] <= 1000 for entry in log)


def test_unrenewed_lease_expires_under_the_job_and_is_reported_lost(redlease_url):
    figures = figures_of(redlease_url, "watchdog", "--no-renew")

    assert figures["renewals"] == 0
    assert figures["overlaps"] > 0
    assert figures["first_overlap_s"] >= 0.9  # not before the 1 s lease ran out
    assert figures["holder_lost"] is True
    # told by its local deadline; the release's answer ("expired") may refine it later
    assert any(word in figures["lost_reason"] for word in ("deadline", "expired"))


def test_watchdog_narrates_each_renewal(redlease_url):
    completed = run_demo(redlease_url, "watchdog", "--ttl", "0.3", "--job-seconds", "1.2")

    assert completed.returncode == 0, completed.stderr
    renewals = [line for line in completed.stderr.splitlines() if "renewal #" in line]
    assert len(renewals) >= 3
    assert all("server TTL" in line for line in renewals)
    assert "overlaps" in completed.stdout
    assert "never got in" in completed.stdout


# the CLI around them


@pytest.mark.parametrize(
    ("demo", "options"),
    [
        ("flash-sale", ["--segments"]),
        ("cache-rebuild", ["--workers", "--rebuild-seconds", "--no-lock", "--json"]),
        ("one-order", ["--workers", "--attempts", "--user-id", "--no-lock", "--json"]),
        ("watchdog", ["--ttl", "--job-seconds", "--no-renew", "--json"]),
    ],
)
def test_demo_help_describes_its_options(redlease_url, demo, options):
    completed = run_demo(redlease_url, demo, "--help")

    assert completed.returncode == 0
    for option in options:
        assert option in completed.stdout


# what a demo shows while it runs


def run_on_terminal(url: str | None, *args: str, rich: bool = False) -> tuple[int, str]:
    """``redlease demo ARGS`` with stdout and stderr on a pseudo-terminal: status, bytes seen.

    Without ``rich`` the command runs as if rich were not installed (the plain display).
    """
    env = cli_environment(url) | {"COLUMNS": "200", "TERM": "xterm"}
    command = (
        [sys.executable, "-m", "redlease", "demo", *args]
        if rich
        else [sys.executable, "-c", PLAIN_COMMAND, "demo", *args]
    )
    terminal, child_end = pty.openpty()
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=child_end, stderr=child_end, env=env
    )
    os.close(child_end)
    seen = bytearray()
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([terminal], [], [], 0.2)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(terminal, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(terminal)
        if process.poll() is None:
            process.kill()
    return process.wait(timeout=RUN_TIMEOUT), seen.decode(errors="replace")


def screen(output: str) -> list[str]:
    """The lines a terminal shows after ``output``: ``\\r`` returns to the line's start."""
    lines: list[str] = []
    line: list[str] = []
    column = 0
    for char in ANSI_ESCAPE.sub("", output):
        if char == "\n":
            lines.append("".join(line).rstrip())
            line, column = [], 0
        elif char == "\r":
            column = 0
        else:
            line[column : column + 1] = [char]
            column += 1
    lines.append("".join(line).rstrip())
    return [text for text in lines if text]


def status_texts(output: str) -> list[str]:
    """Every status line drawn, in order (each is written after a ``\\r``)."""
    pieces = re.split(r"[\r\n]", ANSI_ESCAPE.sub("", output))
    return [piece.strip() for piece in pieces if STATUS_TEXT.search(piece.strip())]


PLAIN_RUNS = {
    "flash-sale": ("flash-sale", "--stock", "20", "--workers", "2"),
    "cache-rebuild": ("cache-rebuild", "--workers", "2", "--rebuild-seconds", "0.1"),
    "one-order": ("one-order", "--workers", "2", "--attempts", "5"),
    "watchdog": ("watchdog", "--ttl", "0.3", "--job-seconds", "1.2"),
    "watchdog-no-renew": ("watchdog", "--no-renew", "--ttl", "0.3", "--job-seconds", "1.2"),
}
STAGES = {  # who starts, and what they then do
    "flash-sale": ("2 buyer processes", "selling"),
    "cache-rebuild": ("2 processes", "missing the cache"),
    "one-order": ("2 processes", "clicking buy"),
    "watchdog": ("the holder and the contender", "running the job"),
    "watchdog-no-renew": ("the holder and the contender", "running the job"),
}


@pytest.fixture(scope="module")
def plain_run(redlease_server):
    """Each demo run once on a terminal without rich; its exit status and output."""
    seen: dict[str, tuple[int, str]] = {}

    def run(name: str) -> tuple[int, str]:
        if name not in seen:
            seen[name] = run_on_terminal(redlease_server.url, *PLAIN_RUNS[name])
        return seen[name]

    return run


@pytest.mark.parametrize("name", PLAIN_RUNS)
def test_plain_display_keeps_its_status_off_every_other_line(plain_run, name):
    code, output = plain_run(name)

    assert code == 0, output
    shown = screen(output)
    assert [line for line in shown if STATUS_TEXT.search(line)] == [], (
        "a status line was joined to another line, or left on screen"
    )
    timeline = [line for line in shown if re.search(r" s  (holder|contender) ", line)]
    assert all(TIMELINE.match(line) for line in timeline), timeline


@pytest.mark.parametrize("name", PLAIN_RUNS)
def test_plain_display_says_what_it_is_doing_from_the_start(plain_run, name):
    code, output = plain_run(name)
    workers, working = STAGES[name]

    assert code == 0, output
    drawn = status_texts(output)
    assert drawn[0] == "reaching the server ..."
    assert drawn[1].startswith(f"starting {workers}: 0/")
    assert drawn[1].endswith(" ready")
    assert any(text.startswith(f"{working}: ") for text in drawn)
    assert drawn[-1] == "collecting the results ..."


def test_plain_display_starts_by_saying_it_starts_a_private_server():
    code, output = run_on_terminal(None, "one-order", "--workers", "1", "--attempts", "2")

    assert code == 0, output
    drawn = status_texts(output)
    assert drawn[0] == "starting a private server ..."
    assert drawn[1] == "starting 1 process: 0/1 ready"


def test_rich_display_names_what_is_starting(redlease_url):
    pytest.importorskip("rich")
    code, output = run_on_terminal(
        redlease_url, "flash-sale", "--stock", "20", "--workers", "2", rich=True
    )

    assert code == 0, output
    text = ANSI_ESCAPE.sub("", output)
    assert "starting 2 buyer processes" in text
    assert "ready" in text
    assert text.index("starting 2 buyer processes") < text.index("selling")
    assert "Sold exactly 20 of 20" in text


def test_a_demo_without_a_terminal_writes_nothing_on_stderr(redlease_url):
    completed = run_demo(redlease_url, "flash-sale", "--stock", "20", "--workers", "2")

    assert completed.returncode == 0
    assert completed.stderr == ""
    assert "Sold exactly 20 of 20" in completed.stdout


def test_a_workers_lost_lease_warning_reaches_the_command_once(redlease_url):
    completed = run_demo(
        redlease_url, "watchdog", "--no-renew", "--ttl", "0.3", "--job-seconds", "1.2"
    )

    assert completed.returncode == 0, completed.stderr
    warnings = [line for line in completed.stderr.splitlines() if line.startswith(LOST_WARNING)]
    assert len(warnings) == 1, completed.stderr
    assert "(fence 1)" in warnings[0]


def test_a_renewed_lease_logs_no_warning(redlease_url):
    completed = run_demo(redlease_url, "watchdog", "--ttl", "0.3", "--job-seconds", "1.2")

    assert completed.returncode == 0, completed.stderr
    assert "redlease:" not in completed.stderr
