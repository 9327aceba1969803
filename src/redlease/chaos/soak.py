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
check holds, 1 when not. Every wait is bounded and the whole run has a deadline.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from redlease.chaos.soak_run import Soak
from redlease.chaos.soak_settings import SoakSettings, Target, private_target


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


def _args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m redlease.chaos.soak",
        description="Many workers x many fenced acquisitions over many lock names, with "
        "faults (kill -9, SIGSTOP, PEXPIRE, DEBUG SLEEP) every few seconds; then check "
        "overlaps, lost updates, fence order, RSS, file descriptors and leftover keys.",
        epilog="exit status: 0 when every check holds, 1 when one does not",
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


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    settings = SoakSettings(
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
    report = run_soak(settings, url=args.url, logs=args.logs)
    print(json.dumps(report) if args.json else _summary(report))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
