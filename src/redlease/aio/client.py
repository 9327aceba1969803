"""What both clients of the asyncio flavour share (the sync twin is generated): a renewal
worker woken by every new or rescheduled lease, and closing as a context manager."""

from __future__ import annotations

from typing import TypeVar

from redlease.aio.renewer import AsyncRenewer
from redlease.core.client_state import LocksBase
from redlease.core.lease import Lease

ClientT = TypeVar("ClientT", bound="AsyncClient")


class AsyncClient(LocksBase):
    _renewer: AsyncRenewer

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

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: ClientT) -> ClientT:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
