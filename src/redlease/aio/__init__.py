"""The asyncio flavour. This package is the source: :mod:`redlease.sync` is generated from it."""
