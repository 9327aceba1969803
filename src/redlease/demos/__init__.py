"""The demos of ``redlease demo``: four problems a lock solves, one module each.

To add a demo, write a module that builds a :class:`~redlease.demos.base.Demo` and list
it in :data:`DEMOS`; ``redlease demo <name>`` then offers it with its own options.
"""

from __future__ import annotations

from redlease.demos import cache_rebuild, flash_sale, one_order, watchdog
from redlease.demos.base import Demo

__all__ = ["DEMOS", "Demo"]

DEMOS: tuple[Demo, ...] = (flash_sale.DEMO, cache_rebuild.DEMO, one_order.DEMO, watchdog.DEMO)
