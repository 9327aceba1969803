"""FastAPI: hold a lock while a request runs, or answer 409 (or 423) at once.

    alocks = redlease.AsyncLocks(LOCK_URL)
    order_lock = lock_dependency(alocks, "order:{user_id}")

    @app.post("/orders/{user_id}", dependencies=[order_lock])
    async def create_order(user_id: int) -> dict[str, str]: ...

The key's fields are filled from the request's path and query parameters of the same
name (FastAPI validates them as required ``str`` parameters). The lock is taken before the
endpoint runs and released when it returns (or raises), before the response is sent: see
:func:`lock_dependency` for why and how that depends on the FastAPI version.
"""

from __future__ import annotations

import inspect
import keyword
import logging
import string
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import Depends, HTTPException

from redlease.aio.lock import AsyncLocks
from redlease.core.lease import Lease, ReleaseOutcome
from redlease.errors import InvalidArgument, InvalidName, LockTimeout, ServerUnavailable

__all__ = ["lock_dependency"]

logger = logging.getLogger("redlease")
DEPENDENCY_SCOPES = "scope" in inspect.signature(Depends).parameters
"""Whether this FastAPI has ``Depends(scope=...)`` (0.121 and later)."""


def lock_dependency(
    locks: AsyncLocks,
    key: str,
    *,
    status_code: int = 409,
    timeout: float = 0,
    ttl: float | None = None,
    renew: bool | None = None,
    scope: Literal["function", "request"] = "function",
    retry_after: int | None = None,
) -> Any:
    """A ``Depends`` marker: the request runs under the lock named by ``key``, or is refused.

    Use it in ``dependencies=[...]``, or as ``lease: Annotated[Lease, marker]`` to get the
    :class:`~redlease.Lease` (``lease.fence`` for fenced writes). ``key`` is a template such
    as ``"order:{user_id}"``; each field must be a path or query parameter of the route.

    When the lock is held elsewhere for ``timeout`` seconds (default 0: one try), the
    request ends with ``status_code`` (409 Conflict, or 423 Locked) and the JSON body
    ``{"detail": {"error": "locked", "lock": <name>, "message": ...}}``; ``retry_after``
    adds a ``Retry-After`` header. Other errors (a lock server that cannot be reached)
    propagate. ``ttl`` and ``renew`` are as for :meth:`AsyncLocks.lock` (default: a 30 s
    lease renewed while held).

    When it is released: FastAPI runs a yield dependency's exit code after the response
    has been sent (``scope="request"``, the default since 0.118) or as soon as the endpoint
    returns (``scope="function"``, 0.121 and later). This marker asks for ``"function"``:
    the work is over when the endpoint returns, and a client that retries right after the
    response must not find the lock still held. Pass ``scope="request"`` to hold it while
    a ``StreamingResponse`` streams. On FastAPI before 0.121 there is no choice and the
    version's own timing applies. A lease lost during the request is logged as a warning
    and the response stands: the endpoint has already done its work.
    """
    if status_code not in (409, 423):
        raise InvalidArgument(f"status_code must be 409 or 423, got {status_code!r}")
    if scope not in ("function", "request"):
        raise InvalidArgument(f"scope must be 'function' or 'request', got {scope!r}")
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}

    async def hold_lock(**params: str) -> AsyncIterator[Lease]:
        name = key.format_map(params)
        try:
            lock = locks.lock(name, ttl=ttl, renew=renew, timeout=timeout, owner=object())
        except InvalidName as exc:  # the request's values made it: the client's mistake
            detail = {"error": "invalid lock name", "lock": None, "message": str(exc)}
            raise HTTPException(422, detail=detail) from exc
        try:
            lease = await lock.acquire()
        except LockTimeout as exc:
            detail = {
                "error": "locked",
                "lock": name,
                "message": f"{name!r} is in use by another request; try again later",
            }
            raise HTTPException(status_code, detail=detail, headers=headers) from exc
        try:
            yield lease
        finally:
            try:
                outcome = await lock.release()
            except ServerUnavailable as exc:  # the work is done: the response stands
                logger.warning("could not release %r after its request (%s); it goes on", name, exc)
            else:
                if outcome is ReleaseOutcome.EXPIRED or lease.lost:
                    logger.warning(
                        "lease on %r ended while its request ran: %s", name, lease.lost_reason
                    )

    hold_lock.__signature__ = _parameters(key)  # type: ignore[attr-defined]
    hold_lock.__name__ = hold_lock.__qualname__ = f"lock_{_identifier(key)}"
    if DEPENDENCY_SCOPES:
        return Depends(hold_lock, scope=scope)
    return Depends(hold_lock)


def _parameters(key: str) -> inspect.Signature:
    """One required ``str`` parameter per field of the template: FastAPI fills them."""
    if not isinstance(key, str) or not key:
        raise InvalidArgument(f"lock name template must be a non-empty str, got {key!r}")
    fields: list[str] = []
    for _, field, _, _ in string.Formatter().parse(key):
        if field is None:
            continue
        if not field.isidentifier() or keyword.iskeyword(field):  # no .attr, [index], 0
            raise InvalidArgument(
                f"lock name template {key!r}: field {field!r} must name a path or query "
                "parameter (its value is a str: no .attribute or [index])"
            )
        if field not in fields:
            fields.append(field)
    try:  # a nested field, a format spec or a conversion str does not take fails here
        key.format_map(dict.fromkeys(fields, "x"))
    except (KeyError, ValueError, IndexError) as error:
        raise InvalidArgument(
            f"lock name template {key!r} cannot be filled from str parameters: {error}"
        ) from None
    return inspect.Signature(
        [
            inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, annotation=str)
            for field in fields
        ]
    )


def _identifier(key: str) -> str:
    return "".join(char if char.isalnum() else "_" for char in key).strip("_") or "lock"
