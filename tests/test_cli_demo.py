"""The ``redlease`` command, run for real in a subprocess against the test server.

The flash sale is the product's first promise made visible: buyer processes oversell
without the lock and sell exactly the stock with it. Every run here goes through
``python -m redlease`` as a user would type it, with ``REDIS_URL`` set to the test server.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import redis

from conftest import cli_environment, redlease_command, run_redlease
from redlease.cli import main

RUN_TIMEOUT = 90
SUMMARY_KEYS = {"stock", "sold", "oversold", "workers", "seconds", "locked", "buys_per_s"}


def run_cli(*args: str, url: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_redlease(*args, url=url, timeout=RUN_TIMEOUT)


def sale_figures(completed: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.strip().splitlines()
    assert lines, completed.stderr
    figures = json.loads(lines[-1])
    assert isinstance(figures, dict)
    return figures


def test_locked_sale_sells_exactly_the_stock(redlease_url):
    figures = sale_figures(run_cli("demo", "flash-sale", "--json", url=redlease_url))

    assert figures["locked"] is True
    assert figures["sold"] == figures["stock"] == 100
    assert figures["oversold"] == 0
    assert figures["stock_left"] == 0


def test_sale_without_the_lock_oversells(redlease_url):
    figures = sale_figures(run_cli("demo", "flash-sale", "--no-lock", "--json", url=redlease_url))

    assert figures["locked"] is False
    assert figures["oversold"] > 0
    assert figures["oversold"] == figures["sold"] - figures["stock"]


def test_json_output_is_a_single_object_with_the_figures(redlease_url):
    completed = run_cli(
        "demo", "flash-sale", "--json", "--stock", "20", "--workers", "2", url=redlease_url
    )

    figures = sale_figures(completed)
    assert completed.stdout.strip().count("\n") == 0
    assert SUMMARY_KEYS <= figures.keys()
    assert figures["workers"] == 2
    assert figures["seconds"] > 0
    assert figures["buys_per_s"] > 0


def test_table_output_summarizes_the_sale(redlease_url):
    completed = run_cli("demo", "flash-sale", "--stock", "20", "--workers", "2", url=redlease_url)

    assert completed.returncode == 0, completed.stderr
    for label in ("stock", "sold", "oversold", "workers", "seconds", "throughput", "lock"):
        assert label in completed.stdout
    assert "Sold exactly 20 of 20" in completed.stdout


def test_concurrent_runs_keep_apart_and_leave_no_keys(redlease_url):
    args = ("demo", "flash-sale", "--json", "--stock", "30", "--workers", "3")
    runs = [
        subprocess.Popen(
            redlease_command(*args),
            env=cli_environment(redlease_url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for process in runs:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT)
        completed = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        figures = sale_figures(completed)
        assert figures["sold"] == 30
        assert figures["oversold"] == 0

    with redis.Redis.from_url(redlease_url) as client:
        assert list(client.scan_iter(match="redlease-demo:*")) == []


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="no-command"),
        pytest.param(["demo"], id="no-demo"),
        pytest.param(["demo", "no-such-demo"], id="unknown-demo"),
        pytest.param(["demo", "flash-sale", "--stock", "0"], id="zero-stock"),
        pytest.param(["demo", "flash-sale", "--workers", "many"], id="not-a-number"),
        pytest.param(["--no-such-option"], id="unknown-option"),
    ],
)
def test_bad_usage_exits_64(args):
    completed = run_cli(*args)

    assert completed.returncode == 64
    assert "usage:" in completed.stderr
    assert completed.stdout == ""


def test_unreachable_server_exits_69_with_a_clear_message(redlease_url):
    completed = run_cli("demo", "flash-sale", "--url", "redis://127.0.0.1:1", url=redlease_url)

    assert completed.returncode == 69
    assert "cannot reach" in completed.stderr
    assert "redis://127.0.0.1:1" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_module_help_lists_the_commands():
    completed = run_cli("--help")

    assert completed.returncode == 0
    assert "demo" in completed.stdout


def test_demo_help_describes_its_options():
    completed = run_cli("demo", "flash-sale", "--help")

    assert completed.returncode == 0
    for option in ("--stock", "--workers", "--no-lock", "--json", "--url", "--hold-ms"):
        assert option in completed.stdout


def test_main_returns_exit_codes_instead_of_exiting(capsys):
    assert main(["--version"]) == 0
    assert main(["demo", "flash-sale", "--hold-ms", "-1"]) == 64
    assert "--hold-ms" in capsys.readouterr().err
