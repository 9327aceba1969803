"""Generate the sync flavour from the asyncio one, or check that it is current.

    python tools/unasync.py          # rewrite the generated modules of src/redlease/sync/
    python tools/unasync.py --check  # exit 1 if any generated file is stale

The asyncio modules are the source; the sync twins are derived by token replacement so
the two can never drift (redis-py's hand-kept twins did).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "src" / "redlease"
GENERATED = (
    "background.py",
    "client.py",
    "confirmations.py",
    "driver.py",
    "engine.py",
    "family.py",
    "fanout.py",
    "giveback.py",
    "handle.py",
    "links.py",
    "lock.py",
    "notify.py",
    "redlock.py",
    "renewer.py",
    "scripts.py",
    "waiter.py",
)
HEADER = "# Generated from redlease/aio/{name} by tools/unasync.py; edit that file instead.\n"

REPLACEMENTS: list[tuple[str, str]] = [
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\bAwaitable\[([\w\[\], |]+?)\]", r"\1"),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\bredis\.asyncio\.cluster\b", "redis.cluster"),
    (r"\bredis\.asyncio\b", "redis"),
    (r"\bredlease\.aio\b", "redlease.sync"),
    (r"\bAsync(\w+)", r"\1"),
    (r"asyncio lock", "sync lock"),
    (r"``async with``", "``with``"),
    (r"asyncio client", "sync client"),
    (r"current task", "current thread"),
    (r"a task that", "a thread that"),
    (r"renewal task", "renewal thread"),
    (r"per event loop", "and share it between threads"),
    (r"asyncio flavour", "sync flavour"),
    (r"``redis\.asyncio\.Redis``", "``redis.Redis``"),
]


def unasync(text: str) -> str:
    for pattern, replacement in REPLACEMENTS:
        text = re.sub(pattern, replacement, text)
    return text


def render(name: str) -> str:
    """The sync twin of one asyncio module, sorted and formatted as ruff would leave it."""
    source = (ROOT / "aio" / name).read_text(encoding="utf-8")
    text = HEADER.format(name=name) + unasync(source)
    target = str(ROOT / "sync" / name)
    ruff = [sys.executable, "-m", "ruff"]
    sort = [*ruff, "check", "--select", "I,F401", "--fix-only", "--stdin-filename", target, "-"]
    text = subprocess.run(sort, input=text, capture_output=True, text=True, check=True).stdout
    fmt = [*ruff, "format", "--stdin-filename", target, "-"]
    return subprocess.run(fmt, input=text, capture_output=True, text=True, check=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    options = parser.parse_args(argv)
    stale = []
    for name in GENERATED:
        target = ROOT / "sync" / name
        wanted = render(name)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        if current == wanted:
            continue
        stale.append(name)
        if not options.check:
            target.write_text(wanted, encoding="utf-8")
    if options.check and stale:
        print(
            f"stale generated files in src/redlease/sync: {', '.join(stale)}; "
            "run python tools/unasync.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
