"""A command packed once per fan-out round, as every master's connection would pack it.

Packing costs about as much as a send, and a round sends the same command to every master,
so it is packed once per way of packing (see :func:`packing_of`), by hiredis where that
gives the very bytes the connection would (redis-py's own packers do more work per
argument: the asyncio one is pure Python, the sync one re-checks each argument's type).
"""

from __future__ import annotations

from typing import Any

_hiredis_pack: Any
try:
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # hiredis is optional
    _hiredis_pack = None

_PLAIN = (str, bytes, int)


def pack(connection: Any, args: tuple[object, ...]) -> Any:
    """``args`` packed as ``connection`` would, by hiredis when it packs the same bytes:
    plain strings, bytes and integers, encoded as strict UTF-8."""
    encoder = connection.encoder
    if (
        _hiredis_pack is not None
        and encoder.encoding.lower().replace("-", "") == "utf8"
        and encoder.encoding_errors == "strict"
        and all(type(arg) in _PLAIN for arg in args)
    ):
        return [_hiredis_pack(args)]
    return connection.pack_command(*args)


def packing_of(connection: Any) -> tuple[object, ...]:
    """What decides the bytes a connection packs a command into: its packer and encoding."""
    encoder = getattr(connection, "encoder", None)
    return (
        type(getattr(connection, "_command_packer", None)),
        getattr(encoder, "encoding", None),
        getattr(encoder, "encoding_errors", None),
    )
