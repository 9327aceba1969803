"""The soak: many workers, many fenced acquisitions over many lock names, under faults.

``python -m redlease.chaos.soak [--workers 64] [--acquisitions 10000] [--names 64]
[--fault-every 30] [--json]`` starts two private servers (the lock's and the data's, see
``docs/soak.md``) unless ``--url`` is given, and ``workers`` processes of
:mod:`redlease.chaos.soak_worker`, each doing ``acquisitions`` blocking acquisitions of
random names with a fenced read-modify-write inside. Every ``fault_every`` seconds it
injects the next fault of the cycle:

* ``kill``: ``kill -9`` a worker (a holder if one holds a lock right now) and start a
  fresh one with the acquisitions it had left;
* ``sigstop``: ``SIGSTOP`` a worker (a holder if possible) for 2 x TTL, then ``SIGCONT``;
* ``pexpire``: ``PEXPIRE`` a held lease to 1 ms behind its holder's back;
* ``stall``: ``DEBUG SLEEP`` the lock server for 2 x TTL (private servers only).

Each injection opens a window ``[start, end + TTL]``. At the end it checks: never two
holders inside their leases; no overlap of two critical sections on one name outside the
windows (among sections whose fenced write was accepted) other than after the older
lease's deadline (a holder the machine itself paused); no fenced lost update; fences never
going back on a name; each worker's RSS and file descriptors after warm-up versus right
before it stopped; and the keys left on the lock server by kind. Exit status 0 when every
check holds, 1 when not; 64 for a usage mistake (bad options, a ``--logs`` path that is a
file), 69 when the ``--url`` server cannot be reached, 130 after Ctrl-C or SIGTERM (the
run still deletes its keys and stops its workers), each with one line on stderr. Every
wait is bounded and the whole run has a deadline.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

import redis

from redlease.chaos.errors import ChaosError
from redlease.chaos.interrupt import stop_signals
from redlease.chaos.soak_run import Soak
from redlease.chaos.soak_settings import SoakSettings, Target, private_target
from redlease.commands.common import (
    SECONDS_MAX,
    URL_ONLY_HINT,
    ExitCode,
    UsageError,
    reach,
    writable_directory,
)
from redlease.errors import InvalidArgument, ServerUnavailable
from redlease.keys import ttl_to_ms
from redlease.urls import from_url

PROG = "python -m redlease.chaos.soak"


def run_soak(
    settings: SoakSettings, url: str | None = None, logs: Path | None = None
) -> dict[str, Any]:
    """One soak run; the result is what ``--json`` prints. Logs go to ``logs`` or a
    temporary directory."""
    with tempfile.TemporaryDirectory(prefix="redlease-soak-") as scratch:
        directory = Path(scratch) if logs is None else logs
        directory.mkdir(parents=True, exist_ok=True)
        if url is None:
            with private_target() as target:
                report = Soak(settings, target, directory).execute()
        else:
            report = Soak(settings, Target(url, url, private=False), directory).execute()
    report["settings"] = asdict(settings)
    return report


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, with EX_USAGE (64) as ``redlease chaos`` has them."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(
        prog=PROG,
        description="Many workers x many fenced acquisitions over many lock names, with "
        "faults (kill -9, SIGSTOP, PEXPIRE, DEBUG SLEEP) every few seconds; then check "
        "overlaps, lost updates, fence order, RSS, file descriptors and leftover keys.",
        epilog="exit status: 0 when every check holds, 1 when one does not, 64 usage, "
        "69 server unreachable, 130 interrupted (Ctrl-C or SIGTERM)",
    )
    defaults = SoakSettings()
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--acquisitions", type=int, default=defaults.acquisitions)
    parser.add_argument("--names", type=int, default=defaults.names)
    parser.add_argument("--fault-every", type=float, default=defaults.fault_every,
                        help="seconds between faults; 0 for none")  # fmt: skip
    parser.add_argument("--ttl", type=float, default=defaults.ttl, help="lease TTL, not renewed")
    parser.add_argument("--hold", type=float, default=defaults.hold,
                        help="seconds between the read and the write")  # fmt: skip
    parser.add_argument("--acquire-timeout", type=float, default=defaults.acquire_timeout)
    parser.add_argument("--deadline", type=float, default=defaults.deadline,
                        help="seconds the whole run may take")  # fmt: skip
    parser.add_argument("--seed", type=int)
    parser.add_argument("--url", help="one server for lock and data (no stall fault)")
    parser.add_argument("--logs", type=Path, help="keep the workers' logs in this directory")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    return parser.parse_args(argv)


def _summary(report: dict[str, Any]) -> str:
    s, a, w = report["settings"], report["acquisitions"], report["workers"]
    o, k = report["overlaps"], report["leftover_keys"]
    lines = [
        f"soak: {s['workers']} workers x {s['acquisitions']} acquisitions over {s['names']} "
        f"names, TTL {s['ttl']:g} s, a fault every {s['fault_every']:g} s",
        f"  {report['seconds']:g} s, {a['attempted']} attempted ({a['per_second']}/s), "
        f"{a['granted']} granted, {a['timeouts']} timed out, errors {a['errors']}, "
        f"wait ms {a['wait_ms']}",
        f"  overlaps accepted/all: outside windows {o['outside']}/{o['outside_all']} "
        f"({o['outside_after_deadline']} after the older lease's deadline), "
        f"inside {o['inside']}/{o['inside_all']}; with a live lease {o['live_lease']}",
        f"  sections outside windows past their lease deadline "
        f"{report['overruns_outside_windows']}",
        f"  fenced lost updates {report['fenced_lost_updates']}, plain lost updates "
        f"{report['plain_lost_updates']}, rejected {report['rejected']}, "
        f"fence regressions {report['fence_regressions']}",
        f"  faults {report['faults_by_kind']}",
        f"  worker RSS KiB {w['rss_kib']}",
        f"  worker fds {w['fds']}",
        f"  leftover keys {k}; lock server {report['lock_server']}",
    ]
    lines += [f"  FAILED {failure}" for failure in report["failures"]]
    lines.append("  ok" if report["ok"] else "  NOT OK")
    return "\n".join(lines)


def _settings(args: argparse.Namespace) -> SoakSettings:
    """The run's settings, or a :class:`UsageError` naming the option that is wrong."""
    at_least_one = ("workers", "acquisitions", "names")
    for option in at_least_one:
        if getattr(args, option) < 1:
            raise UsageError(f"--{option} must be at least 1, not {getattr(args, option)}")
    for option in ("ttl", "acquire_timeout", "deadline"):
        if not 0 < getattr(args, option) < math.inf:
            raise UsageError(f"--{option.replace('_', '-')} must be a number of seconds above 0")
    try:
        ttl_to_ms(args.ttl, "--ttl")
    except InvalidArgument as error:
        raise UsageError(str(error)) from error
    for option in ("fault_every", "hold"):
        if not 0 <= getattr(args, option) <= SECONDS_MAX:
            raise UsageError(
                f"--{option.replace('_', '-')} must be a number of seconds, 0 or more, "
                f"at most {SECONDS_MAX:g}"
            )
    return SoakSettings(
        workers=args.workers,
        acquisitions=args.acquisitions,
        names=args.names,
        fault_every=args.fault_every,
        ttl=args.ttl,
        hold=args.hold,
        acquire_timeout=args.acquire_timeout,
        deadline=args.deadline,
        seed=args.seed,
    )


def _check_paths_and_server(args: argparse.Namespace) -> None:
    """Before any work: the log directory can be made, the ``--url`` server answers."""
    if args.logs is not None:
        writable_directory(args.logs, "--logs")
    if args.url is not None:
        try:
            from_url(redis.Redis.from_url, args.url).close()
        except InvalidArgument as error:
            raise UsageError(f"--url: {error}") from error
        reach(args.url, hint=URL_ONLY_HINT)


def main(argv: list[str] | None = None) -> int:
    """The soak's command line; failures are one line on stderr and a sysexits code."""
    try:
        args = _args(argv)
        settings = _settings(args)
        with stop_signals():
            _check_paths_and_server(args)
            report = run_soak(settings, url=args.url, logs=args.logs)
    except UsageError as error:
        return _fail(ExitCode.USAGE, f"error: {error}")
    except (ServerUnavailable, redis.ConnectionError, redis.TimeoutError) as error:
        return _fail(ExitCode.UNAVAILABLE, f"server unavailable: {error}")
    except (ChaosError, redis.RedisError) as error:
        return _fail(ExitCode.SOFTWARE, str(error))
    except KeyboardInterrupt:
        return _fail(ExitCode.INTERRUPTED, "interrupted; the run's keys are deleted")
    print(json.dumps(report) if args.json else _summary(report))
    return 0 if report["ok"] else 1


def _fail(code: ExitCode, message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
