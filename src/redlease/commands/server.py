"""``redlease server``: a private Redis/Valkey in the foreground, for trying things out.

The first line of stdout is the URL, so a script can read it and export ``REDIS_URL``.
Ctrl-C or SIGTERM stops the server (and removes its files); it keeps nothing on disk.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from types import FrameType
from typing import Any

from redlease.commands.common import ExitCode, port_number
from redlease.server import EmbeddedServer

__all__ = ["register"]

HEALTH_INTERVAL = 1.0


def register(commands: Any) -> None:
    server = commands.add_parser(
        "server",
        help="run a private Redis/Valkey server in the foreground; prints its URL",
        description="Start the embedded (or a PATH) Redis/Valkey server on localhost, print "
        "its URL as the first line of stdout, and run until Ctrl-C or SIGTERM.",
    )
    server.add_argument("--port", type=port_number, help="port to listen on (default: a free one)")
    server.set_defaults(handler=serve)


def serve(args: argparse.Namespace) -> int:
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {
        signum: signal.signal(signum, request_stop) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    server = EmbeddedServer(port=args.port)
    try:
        info = server.start()
        print(info.url, flush=True)
        print(
            f"redlease: {info.binary} {info.version or ''} running (pid {server.pid}); "
            "Ctrl-C stops it",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(HEALTH_INTERVAL):
            if server.pid is None:
                print("redlease: the server exited on its own", file=sys.stderr)
                return ExitCode.UNAVAILABLE
    finally:
        server.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return ExitCode.OK
