"""Private child processes: the servers, cluster nodes and sentinels redlease starts itself.

One place for what every such process needs, so that each launcher (:mod:`redlease.server`,
:mod:`redlease.topology`, the benchmark's ZooKeeper and etcd nodes, the chaos harness)
does not grow its own copy:

* a loopback port that is free right now (:func:`free_port`);
* a start that ties the child to us (:func:`spawn`): its own session, so a Ctrl-C typed
  in a terminal reaches Python, which then stops the child in order, rather than killing
  it under a running test; and on Linux ``PR_SET_PDEATHSIG``, so the kernel kills it when
  the thread that started it dies without running ``atexit`` (SIGTERM with the default
  handler, SIGKILL, a crash). The kernel ties that signal to the *thread*, so it is only
  set when the main thread starts the child; elsewhere only ``atexit`` applies;
* a stop that always ends (:func:`stop`): resume a paused child, ask it politely, then
  SIGTERM, then SIGKILL, each bounded; and :func:`kill` for a crash on purpose;
* one ``atexit`` hook, registered on first use and never at import, that stops what this
  process started and is still running (:func:`stop_at_exit`); a forked child exiting
  does not stop its parent's processes;
* the end of a child's log for error messages (:func:`log_tail`).
"""

from __future__ import annotations

import atexit
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from contextlib import suppress
from pathlib import Path
from typing import Protocol

__all__ = [
    "Stoppable",
    "die_with_parent",
    "forget_at_exit",
    "free_port",
    "kill",
    "log_tail",
    "spawn",
    "stop",
    "stop_at_exit",
]

_PR_SET_PDEATHSIG = 1
_LOG_TAIL_LINES = 20
_EXIT_STOP_TIMEOUT = 2.0


class Stoppable(Protocol):
    """Something that owns child processes and can stop them within ``timeout`` seconds."""

    def stop(self, timeout: float = ...) -> None: ...


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now; another process may still take it before we bind it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def spawn(
    command: Sequence[str], log_path: Path, *, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` as a private child: no stdin, stdout and stderr to ``log_path``."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - sets the death signal only
        )


def stop(
    process: subprocess.Popen[bytes],
    timeout: float,
    ask: Callable[[float], bool] | None = None,
) -> None:
    """Stop ``process`` within about ``2 * timeout`` seconds, whatever state it is in.

    A paused child is resumed first (it could act on nothing else). ``ask(seconds)`` may
    request a clean shutdown (for a server: ``SHUTDOWN NOSAVE``) and returns False when
    it could not; then SIGTERM is sent. SIGTERM and SIGKILL follow if it lingers.
    """
    if process.poll() is not None:
        return
    with suppress(ProcessLookupError):
        process.send_signal(signal.SIGCONT)
    if ask is None or not ask(min(timeout / 2, 1.0)):
        with suppress(ProcessLookupError):
            process.terminate()
    for escalate in (process.terminate, process.kill):
        try:
            process.wait(timeout / 2)
            return
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                escalate()
    with suppress(subprocess.TimeoutExpired):
        process.wait(timeout)


def kill(process: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGKILL ``process`` at once, as a crash would, and reap it (bounded)."""
    if process.poll() is None:
        with suppress(ProcessLookupError):
            process.kill()
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout)


def die_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGKILL the child when our thread dies, if usable."""
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL.value)
        if os.getppid() != parent:  # the parent died before the signal was set
            os._exit(1)

    return set_death_signal


_live: dict[Stoppable, int] = {}
_atexit_registered = False


def stop_at_exit(owner: Stoppable) -> None:
    """Have ``owner.stop()`` called when this process exits, unless forgotten before."""
    global _atexit_registered
    _live[owner] = os.getpid()
    if not _atexit_registered:
        atexit.register(_stop_live)
        _atexit_registered = True


def forget_at_exit(owner: Stoppable) -> None:
    """``owner`` stopped on its own: nothing to do for it at exit."""
    _live.pop(owner, None)


def _stop_live() -> None:
    """Stop what this process started; a forked child exiting must not stop its parent's."""
    for owner, owner_pid in list(_live.items()):
        if owner_pid == os.getpid():
            owner.stop(timeout=_EXIT_STOP_TIMEOUT)


def log_tail(log_path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a child's log, for an error message."""
    try:
        text = log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:]) or "(empty log)"
