"""The server-side scripts, one ``.lua`` file each, read once at import.

The lock scripts share helpers (fences as exact decimal strings, the server's clock, queue
membership) kept once in ``lib.lua``, which is put before each of them.
"""

from __future__ import annotations

import enum
import hashlib
from importlib.resources import files


class ScriptName(enum.Enum):
    ACQUIRE = "acquire"
    RELEASE = "release"
    RENEW = "renew"
    SHARED = "shared"
    COUNTDOWN = "countdown"
    MULTI_ACQUIRE = "multi_acquire"
    FENCE_FLOOR = "fence_floor"
    SNAPSHOT = "snapshot"
    EVICT = "evict"

    @property
    def source(self) -> str:
        return SOURCES[self]

    @property
    def sha(self) -> str:
        return SHAS[self]


WITH_LIBRARY = frozenset(
    {
        ScriptName.ACQUIRE,
        ScriptName.RELEASE,
        ScriptName.RENEW,
        ScriptName.SHARED,
        ScriptName.MULTI_ACQUIRE,
        ScriptName.EVICT,
    }
)


def _read(name: str) -> str:
    return files(__package__).joinpath(f"{name}.lua").read_text(encoding="utf-8")


_LIBRARY = _read("lib")
SOURCES: dict[ScriptName, str] = {
    name: (_LIBRARY + _read(name.value)) if name in WITH_LIBRARY else _read(name.value)
    for name in ScriptName
}
SHAS: dict[ScriptName, str] = {
    name: hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
    for name, source in SOURCES.items()
}
