# Generated from redlease/aio/client.py by tools/unasync.py; edit that file instead.
"""What both clients of the sync flavour share (the sync twin is generated): a renewal
worker woken by every new or rescheduled lease, and closing as a context manager."""

from __future__ import annotations

from typing import TypeVar

from redlease.core.client_state import LocksBase
from redlease.core.lease import Lease
from redlease.sync.renewer import Renewer

ClientT = TypeVar("ClientT", bound="Client")


class Client(LocksBase):
    _renewer: Renewer

    def _adopt(self, lease: Lease, role: str | None) -> bool:
        if super()._adopt(lease, role) or not self._renewer.running():
            self._renewer.wake()
            return True
        return False

    def _reschedule(self, lease: Lease, sent_at: float) -> bool:
        if super()._reschedule(lease, sent_at):
            self._renewer.wake()
            return True
        return False

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: ClientT) -> ClientT:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
