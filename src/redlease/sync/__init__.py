"""The sync (threading) flavour. ``lock.py``, ``renewer.py`` and ``scripts.py`` are generated
from :mod:`redlease.aio` by ``tools/unasync.py``; ``_flavor.py`` and ``notify.py`` are its own."""
