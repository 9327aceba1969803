"""Integrations with frameworks: each lives in its own module, imported on demand.

* :mod:`redlease.integrations.celery`: ``@singleton``, a task that runs at most once at
  a time per key (skip, wait or raise on conflict), its lease renewed while it runs.
* :mod:`redlease.integrations.fastapi`: ``lock_dependency``, a dependency that holds a
  lock for a request and answers 409 (or 423) when another request holds it.

Importing this package imports neither framework; install the ``celery`` or ``fastapi``
extra for the module you use. Django needs no module: see ``docs/integrations.md``.
"""

from __future__ import annotations
