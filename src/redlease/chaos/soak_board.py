"""What a soak worker shares with its runner outside the log: its state on the board,
and its resource samples.

The :class:`Board` is a small memory-mapped file with one slot per worker, ``(state,
name index)``, so the runner can aim a fault at a worker that holds a lock right now;
:func:`resources` is a worker's own RSS and descriptor count for the leak checks.
"""

from __future__ import annotations

import mmap
import os
import struct
from contextlib import suppress
from pathlib import Path

IDLE, WAITING, HOLDING = 0, 1, 2
SLOT = struct.Struct("<ii")


class Board:
    """Per worker slot: ``(state, name index)`` in a shared file, read by the runner.

    Plain memory writes through ``mmap``: no system call per state change.
    """

    def __init__(self, path: Path, slots: int, *, create: bool = False) -> None:
        if create:
            path.write_bytes(bytes(SLOT.size * slots))
        self.slots = slots
        with path.open("r+b") as stream:
            self._map = mmap.mmap(stream.fileno(), SLOT.size * slots)

    def set(self, slot: int, state: int, name: int) -> None:
        SLOT.pack_into(self._map, slot * SLOT.size, state, name)

    def get(self, slot: int) -> tuple[int, int]:
        state, name = SLOT.unpack_from(self._map, slot * SLOT.size)
        return int(state), int(name)

    def close(self) -> None:
        self._map.close()


def resources() -> tuple[int, int]:
    """This process's resident set (KiB, ``VmRSS``) and open file descriptors."""
    rss = 0
    with suppress(OSError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
                break
    try:
        fds = len(os.listdir("/proc/self/fd")) - 1  # minus the one listdir itself opened
    except OSError:
        fds = -1
    return rss, fds
