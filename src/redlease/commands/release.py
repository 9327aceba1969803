"""``redlease release NAME --force``: the operator's escape hatch for a stuck lock.

It deletes the lease of a lock (and the writer and the readers/permits of a read-write
lock or semaphore of that name) whoever holds it. It never deletes the fencing counter:
the next holder must get a larger token than the evicted one, so that the evicted
holder's late writes are still refused by a fenced resource. The waiters are woken in the
same script, so they need not wait out the evicted lease.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from redlease.commands.common import ExitCode, add_connection_options, connect
from redlease.commands.state import evict, snapshot
from redlease.keys import LockKeys, validate_name, validate_prefix

__all__ = ["register"]


def register(commands: Any) -> None:
    release = commands.add_parser(
        "release",
        help="force a lock free, whoever holds it (needs --force)",
        description="Delete the lease of NAME whoever holds it (also the writer and the "
        "readers/permits of a read-write lock or semaphore). The fencing counter stays, so "
        "tokens never go back. The evicted holder finds out at its next renewal or release.",
    )
    release.add_argument("name", metavar="NAME")
    release.add_argument(
        "--force", action="store_true", help="really do it (without it: say what would go)"
    )
    add_connection_options(release)
    release.set_defaults(handler=force_release)


def force_release(args: argparse.Namespace) -> int:
    keys = LockKeys(validate_name(args.name), validate_prefix(args.prefix))
    with connect(args) as client:
        if not args.force:
            return _refuse(client, keys)
        evicted = evict(client, keys)
        fence = snapshot(client, keys).fence
    if not evicted:
        print(f"{keys.name}: not held; nothing removed")
        return ExitCode.OK
    for holder in evicted:
        print(f"{keys.name}: removed the {holder.kind} lease of {holder.describe()}")
    print(
        f"{keys.name}: kept the fence counter ({fence if fence is not None else 'none'}): "
        "the next holder gets a larger token; the waiters were woken to try again"
    )
    return ExitCode.OK


def _refuse(client: Any, keys: LockKeys) -> int:
    state = snapshot(client, keys)
    if state.holders:
        what = "; ".join(f"the {h.kind} lease of {h.describe()}" for h in state.holders)
        detail = f"would remove {what} (the fence counter stays)"
    else:
        detail = "it is not held, so nothing would be removed"
    print(
        f"redlease: refusing to release {keys.name!r} without --force: {detail}",
        file=sys.stderr,
    )
    return ExitCode.USAGE
