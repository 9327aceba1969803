"""The harness's own error, apart so that every chaos module can raise it."""

from __future__ import annotations


class ChaosError(RuntimeError):
    """The harness could not carry out a scenario (workers never started, no holder)."""


class WaiterFailed(ChaosError):
    """A scripted waiter's acquisition failed before the fault (an error it logged): that
    injection counts as a waiter never woken, and the run goes on."""
