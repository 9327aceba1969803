"""The harness's own error, apart so that every chaos module can raise it."""

from __future__ import annotations


class ChaosError(RuntimeError):
    """The harness could not carry out a scenario (workers never started, no holder)."""
