"""What a topology raises when it cannot start or settle."""

from __future__ import annotations

from redlease.errors import ServerUnavailable

__all__ = ["TopologyError", "TopologyUnsupported"]


class TopologyError(ServerUnavailable):
    """A cluster or sentinel topology did not reach the expected state in time."""


class TopologyUnsupported(TopologyError):
    """The server binary cannot run this topology (no cluster support, for example)."""
