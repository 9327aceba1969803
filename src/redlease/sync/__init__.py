"""The sync (threading) flavour, generated from :mod:`redlease.aio` by ``tools/unasync.py``
(the list is its ``GENERATED``); only ``_flavor.py``, what threads do differently, is its own."""
