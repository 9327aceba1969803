"""The bench's targets summary reads met / not met right from a result object.

No server and no timing: the result objects are fixtures shaped like ``run.py --json``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.append(str(Path(__file__).resolve().parent.parent / "bench"))

from targets import evaluate


def contended(rate: float, longest: float, server: float, client: float) -> dict[str, Any]:
    return {
        "acquires_per_s": rate,
        "longest_wait_ms": longest,
        "commands_per_acquire": server,
        "client_commands_per_acquire": client,
        "overlaps": 0,
        "counter_mismatch": 0,
    }


def result_of_one_run() -> dict[str, Any]:
    return {
        "redlease": {
            "cycle_us": 380.0,
            "cycle_cpu_us": 260.0,
            "cycle_server_commands": 5.0,
            "cycle_client_commands": 2.0,
            "async_cycle_us": 460.0,
            "redlock5_ratio": 1.4,
            "redlock5_cycle_us": 600.0,
            "async_redlock5_ratio": 1.7,
            "async_redlock5_cycle_us": 800.0,
            "server_bytes_per_held_lock": 240.0,
            "server_keys_per_held_lock": 2.0,
            "keys_left_names": 100_000,
            "keys_left": 16_300,
            "keys_left_slots": 16_342,
            "keys_left_per_1000_names": 163.0,
            "keys_left_wait_s": 11.0,
            "contended": {
                "8": contended(1300.0, 20.0, 6.0, 2.0),
                "16": contended(1200.0, 60.0, 7.0, 2.0),
            },
        },
        "redis-py": {
            "cycle_us": 400.0,
            "cycle_cpu_us": 250.0,
            "async_cycle_us": 430.0,
            "contended": {"8": contended(1600.0, 2000.0, 4, 2), "16": contended(1700.0, 0, 4, 2)},
        },
        "python-redis-lock": {
            "contended": {"8": contended(1000.0, 40.0, 10, 5), "16": contended(1250.0, 0, 10, 5)},
        },
        "claims": {
            "flash_sale": {
                "redlease": {"buys_per_s": 1200.0},
                "postgres_for_update": {"buys_per_s": 1100.0},
            }
        },
    }


def test_each_target_is_met_or_not_by_the_figures_of_the_same_run() -> None:
    met = {name: check["met"] for name, check in evaluate(result_of_one_run()).items()}

    assert met == {
        "cycle": True,  # 380 µs against redis-py's 400
        "cycle_cpu": False,  # 260 µs of CPU against 250
        "acquires8_vs_redis_py": True,  # 1300 ≥ 0.8 of 1600
        "acquires8_vs_python_redis_lock": True,
        "longest8_wait": True,
        "overlaps8": True,
        "acquires16_vs_redis_py": False,  # 1200 < 0.8 of 1700
        "acquires16_vs_python_redis_lock": False,  # 1200 < 1250
        "longest16_wait": False,  # 60 ms > 50
        "overlaps16": True,
        "contended_server_commands": False,  # the worst count, 16 workers, ran 7
        "contended_client_commands": True,
        "cycle_server_commands": True,
        "async_cycle": False,  # 460 / 430 > 1.05
        "redlock5": True,
        "async_redlock5": False,
        "bytes_per_held_lock": True,
        "keys_left": True,
        "flash_sale": True,
    }


def test_a_target_whose_part_did_not_run_is_not_measured() -> None:
    result = result_of_one_run()
    del result["claims"]["flash_sale"]
    del result["redlease"]["contended"]["16"]

    checks = evaluate(result)

    assert checks["flash_sale"]["met"] is None
    assert checks["flash_sale"]["measured"] == "n/a"
    assert checks["longest16_wait"]["met"] is None
    assert checks["overlaps16"]["met"] is None
    assert checks["longest8_wait"]["met"] is True


def test_an_overlap_or_a_lost_count_fails_the_safety_target() -> None:
    result = result_of_one_run()
    result["redlease"]["contended"]["8"]["counter_mismatch"] = -1

    assert evaluate(result)["overlaps8"]["met"] is False


@pytest.mark.parametrize(
    ("names", "left", "slots", "met"),
    [
        (100_000, 16_384, 16_342, True),  # the full run: the target's own bound
        (100_000, 100_000, 16_342, False),  # a key per name
        (10_000, 7_500, 7_594, True),  # fewer names: one key per hash slot they touch
        (10_000, 10_000, 7_594, False),  # a key per name fails a short run as well
    ],
)
def test_keys_left_are_bounded_by_the_target_or_the_hash_slots_of_fewer_names(
    names: int, left: int, slots: int, met: bool
) -> None:
    result = result_of_one_run()
    result["redlease"] |= {"keys_left_names": names, "keys_left": left, "keys_left_slots": slots}

    assert evaluate(result)["keys_left"]["met"] is met


def test_the_client_command_count_sees_the_commands_redlease_packs_itself(redlease_url, prefix):
    """redlease packs its lock commands with hiredis, past redis-py's serializers: a count
    that missed them would report a cycle as free of client commands."""
    import redlease  # noqa: PLC0415
    from counting import client_commands  # noqa: PLC0415

    with redlease.Locks(redlease_url, prefix=prefix) as locks:
        with locks.lock("warm", ttl=5):
            pass
        with client_commands() as sent:
            with locks.lock("counted", ttl=5):
                pass
    assert sum(sent.values()) == 2, sent
