"""Errors cross process boundaries: a Celery result, a multiprocessing pool, pickle.

Each must come back as the same type, with the same message and fields, or a caller's
``except redlease.LeaseLost`` never fires.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

import redlease
from redlease.integrations.celery import AlreadyRunning

EXAMPLES = [
    redlease.LockTimeout("orders:7", 2.5, "a waiter ahead of it"),
    redlease.LockTimeout("orders:7", 0),
    redlease.LeaseLost("orders:7", "its key was deleted"),
    redlease.WrongKeyType("redlease:{a}", "hash", "lease string"),
    redlease.FenceRejected("stock:{s}", 7, 9, lock="sale", reused=False),
    redlease.FenceRejected("stock:{s}", 9, 9, lock="sale", reused=True),
    redlease.NotOwned("not yours"),
    redlease.InvalidArgument("ttl must be positive"),
    redlease.ServerUnavailable("no answer"),
    AlreadyRunning("tasks.report", "report", 0),
]


def fields(error: BaseException) -> dict[str, Any]:
    return {key: value for key, value in vars(error).items() if not key.startswith("_")}


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda error: type(error).__name__)
def test_an_error_survives_pickle(error: BaseException) -> None:
    again = pickle.loads(pickle.dumps(error))

    assert type(again) is type(error)
    assert str(again) == str(error)
    assert fields(again) == fields(error)


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda error: type(error).__name__)
def test_an_error_survives_a_celery_json_result(error: BaseException) -> None:
    celery = pytest.importorskip("celery")
    app = celery.Celery(backend="cache+memory://", set_as_current=False)
    app.conf.result_serializer = "json"
    app.conf.accept_content = ["json"]
    backend = app.backend

    again = backend.exception_to_python(backend.prepare_exception(error, "json"))

    assert type(again) is type(error)
    assert str(again) == str(error)
    assert fields(again) == fields(error)
