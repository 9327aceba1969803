"""The sans-I/O core: every decision, no sockets.

Lock flows are generators that yield :mod:`operations <redlease.core.ops>` and receive
their results; the sync and asyncio drivers only carry the operations out.
"""
