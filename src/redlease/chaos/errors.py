"""The harness's own error, apart so that every chaos module can raise it."""

from __future__ import annotations

from pathlib import Path


class ChaosError(RuntimeError):
    """The harness could not carry out a scenario (workers never started, no holder)."""


class WaiterFailed(ChaosError):
    """A scripted waiter's acquisition failed before the fault (an error it logged): that
    injection counts as a waiter never woken, and the run goes on."""


def remove_earlier(path: Path) -> None:
    """Remove a file an earlier run left in a reused ``--logs`` directory (its stop file, a
    worker's log, which the worker would append to); one that cannot be removed is a
    :class:`ChaosError` naming it."""
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        raise ChaosError(
            f"cannot remove {path}, left by an earlier run in the --logs directory: "
            f"{error.strerror or error}; use another directory"
        ) from error
