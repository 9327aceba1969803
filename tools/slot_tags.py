"""Write (or check) the table of hash tags, one per Redis Cluster slot.

    python tools/slot_tags.py          # rewrite src/redlease/slot_tags.txt
    python tools/slot_tags.py --check  # exit 1 if the table is missing or wrong

Line ``s`` (from 0) of the table is the shortest string of ``[a-z0-9]`` whose CRC16, as
Redis Cluster computes it, falls in slot ``s``. A lock's fencing counter lives under its
slot's tag (``<prefix>:{<tag>}:fence``), so every name of a slot shares one counter
(nothing is kept per name) while the lock's scripts stay within one slot.
"""

from __future__ import annotations

import argparse
import binascii
import itertools
import string
import sys
from pathlib import Path

SLOTS = 16384
TABLE = Path(__file__).resolve().parent.parent / "src" / "redlease" / "slot_tags.txt"


def slot(text: str) -> int:
    return binascii.crc_hqx(text.encode(), 0) % SLOTS


def tags() -> list[str]:
    found: list[str | None] = [None] * SLOTS
    missing = SLOTS
    alphabet = string.ascii_lowercase + string.digits
    for length in itertools.count(1):
        for letters in itertools.product(alphabet, repeat=length):
            text = "".join(letters)
            index = slot(text)
            if found[index] is None:
                found[index] = text
                missing -= 1
                if not missing:
                    return [tag for tag in found if tag is not None]
    raise AssertionError("unreachable")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    wanted = "\n".join(tags()) + "\n"
    if parser.parse_args().check:
        current = TABLE.read_text(encoding="ascii") if TABLE.exists() else ""
        if current != wanted:
            print(f"{TABLE} is stale: run python tools/slot_tags.py", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(wanted, encoding="ascii")
    return 0


if __name__ == "__main__":
    sys.exit(main())
