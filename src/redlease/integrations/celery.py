"""Celery tasks that run at most once at a time per key.

    locks = redlease.Locks(redis.Redis.from_url(LOCK_URL))

    @app.task
    @singleton(locks, "report:{customer_id}")
    def build_report(customer_id: int) -> str: ...

Put ``@singleton`` *below* ``@app.task``: it wraps the function the worker runs. The key is
a ``str.format`` template over the task's parameters. While a run holds the lock, the
client's renewal worker keeps the lease alive, however long the task takes; if the worker
process dies, the lock frees itself ``ttl`` seconds later.

This guards *runs*, not the queue: duplicates are still enqueued, and each one decides
when a worker picks it up. The module does not import Celery; any callable can use it.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Literal, TypeVar

from redlease.core.base import check_timeout
from redlease.core.lease import Lease
from redlease.core.templates import KeyTemplate
from redlease.errors import InvalidArgument, LockTimeout
from redlease.sync.lock import Locks

__all__ = ["AlreadyRunning", "OnConflict", "current_lease", "singleton"]

F = TypeVar("F", bound=Callable[..., Any])
OnConflict = Literal["skip", "wait", "raise"]
logger = logging.getLogger("redlease")

_ON_CONFLICT = ("skip", "wait", "raise")
_running: ContextVar[Lease | None] = ContextVar("redlease_singleton_lease", default=None)


class AlreadyRunning(LockTimeout):
    """Another run of a singleton task holds its lock; this run did nothing.

    Raised with ``on_conflict="raise"``, and with ``"wait"`` when ``timeout`` ran out.
    ``task`` names the task, ``name`` the lock, ``timeout`` how long this run waited. It
    is a :class:`~redlease.LockTimeout` (so a ``TimeoutError``), and it survives Celery's
    result serialization: ``AsyncResult.get()`` raises it again in the caller.
    """

    def __init__(self, task: str, name: str, timeout: float | None = 0) -> None:
        super().__init__(name, timeout)
        self.task = task
        self.args = (task, name, timeout)  # what Celery and pickle rebuild it from

    def __str__(self) -> str:
        if self.timeout:
            advice = "give it a longer timeout, or on_conflict='skip' to drop this run"
            waited = f" after waiting {self.timeout:g} s"
        else:
            advice = "use on_conflict='wait' to run after it or 'skip' to drop this run"
            waited = ""
        return (
            f"task {self.task!r} is already running: lock {self.name!r} is held by another "
            f"run{waited}; {advice}"
        )


def current_lease() -> Lease | None:
    """The lease of the singleton run in progress in this thread (``None`` outside one).

    Pass ``current_lease().fence`` with the task's writes so a resource can refuse those of
    a run that lost its lease (see :class:`redlease.RedisGuard`).
    """
    return _running.get()


def singleton(
    locks: Locks,
    key: str | None = None,
    *,
    on_conflict: OnConflict = "skip",
    timeout: float | None = None,
    ttl: float | None = None,
    renew: bool = True,
) -> Callable[[F], F]:
    """Make a task (any function) run at most once at a time per lock name.

    ``key`` is a template over the function's parameters, e.g. ``"report:{customer_id}"``;
    without it one run of the task at a time, whatever its arguments
    (``"celery:<module>.<function>"``). ``on_conflict`` says what a run does when another
    run holds the lock:

    * ``"skip"`` (default): return ``None`` without running; logged at INFO on ``redlease``;
    * ``"raise"``: raise :class:`AlreadyRunning`;
    * ``"wait"``: wait for the lock, then run; :class:`AlreadyRunning` if ``timeout`` ends.

    ``timeout`` is how long to wait for the lock: by default 0 (one try) for ``"skip"`` and
    ``"raise"``, forever for ``"wait"``; ``"skip"`` or ``"raise"`` with a timeout wait that
    long first. ``ttl`` (default 30 s) is how long the lock outlives a run whose process
    died; while the run lives the lease is renewed, unless ``renew=False`` (the lease then
    ends after ``ttl`` and a longer run fails with :class:`~redlease.LeaseLost`).

    Each run is its own owner (not the worker thread), so a nested call with the same key
    conflicts like any other caller.
    """
    if on_conflict not in _ON_CONFLICT:
        raise InvalidArgument(
            f"on_conflict must be one of {', '.join(map(repr, _ON_CONFLICT))}, got {on_conflict!r}"
        )
    default_wait = -1.0 if on_conflict == "wait" else 0.0
    wait = default_wait if timeout is None else check_timeout(timeout)

    def decorate(function: F) -> F:
        if _is_a_task(function):
            raise InvalidArgument(
                "@singleton got a Celery task; put it below @app.task, next to the function"
            )
        task = f"{function.__module__}.{function.__qualname__}"
        template = KeyTemplate(key if key is not None else f"celery:{task}", function)

        @functools.wraps(function)
        def run_alone(*args: Any, **kwargs: Any) -> Any:
            name = template.render(args, kwargs)
            lock = locks.lock(name, ttl=ttl, renew=renew, timeout=wait, owner=object())
            try:
                lease = lock.acquire()
            except LockTimeout:
                if on_conflict == "skip":
                    logger.info("skipped a run of %s: lock %r is held by another run", task, name)
                    return None
                raise AlreadyRunning(task, name, max(wait, 0)) from None
            context = _running.set(lease)
            try:
                result = function(*args, **kwargs)
            except BaseException:
                _running.reset(context)
                lock.__exit__(*sys.exc_info())
                raise
            _running.reset(context)
            lock.__exit__(None, None, None)  # raises LeaseLost if the lease ended meanwhile
            return result

        # Celery checks ``delay()`` arguments against this, without following __wrapped__.
        run_alone.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
        return run_alone  # type: ignore[return-value]

    return decorate


def _is_a_task(function: object) -> bool:
    """A Celery task, or the proxy ``@app.task`` returns before its app is finalized (looked
    at by type: an attribute of the proxy would finalize the app, or raise if it may not)."""
    if type(function).__module__.split(".")[0] == "celery":
        return True
    return hasattr(function, "delay") and hasattr(function, "run")
