"""The server-side scripts, one ``.lua`` file each, read once at import."""

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

    @property
    def source(self) -> str:
        return SOURCES[self]

    @property
    def sha(self) -> str:
        return SHAS[self]


SOURCES: dict[ScriptName, str] = {
    name: files(__package__).joinpath(f"{name.value}.lua").read_text(encoding="utf-8")
    for name in ScriptName
}
SHAS: dict[ScriptName, str] = {
    name: hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()
    for name, source in SOURCES.items()
}
