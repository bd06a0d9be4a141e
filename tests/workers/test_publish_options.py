"""A publish's scheduling options with a wrong kind of value or one out of
range: one error naming the option, raised before anything is published,
by ``apply_async`` and ``delay_many`` alike (Celery itself raises a bare
TypeError or OverflowError from deep inside, or publishes a priority of
"high" and a queue named 5)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from celery import Celery

from pinlater.service import JobService
from tests.workers.celery_tasks import qname
from workers.options import check_publish_options

BAD: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"countdown": "soon"}, TypeError, "countdown must be a number of seconds, got 'soon'"),
    ({"countdown": True}, TypeError, "countdown must be a number of seconds, got True"),
    ({"countdown": float("nan")}, ValueError, "countdown must be a number of seconds of at most"),
    ({"countdown": 1e300}, ValueError, "countdown must be a number of seconds of at most"),
    ({"expires": float("inf")}, ValueError, "expires must be a number of seconds of at most"),
    ({"expires": "x"}, ValueError, "expires must be a datetime or an ISO 8601 text, got 'x'"),
    ({"eta": "tomorrow"}, ValueError, "eta must be a datetime or an ISO 8601 text, got 'tomorrow'"),
    ({"eta": 5}, TypeError, "eta must be a datetime or an ISO 8601 text, got 5"),
    ({"priority": -5}, ValueError, "priority must be from 0 to 255, got -5"),
    ({"priority": 300}, ValueError, "priority must be from 0 to 255, got 300"),
    ({"priority": "high"}, TypeError, "priority must be a whole number from 0 to 255, got 'high'"),
    ({"priority": 1.5}, TypeError, "priority must be a whole number from 0 to 255, got 1.5"),
    ({"queue": 5}, TypeError, "queue must be a queue's name or a kombu Queue, got 5"),
    ({"headers": "x"}, TypeError, "headers must be a dict, got 'x'"),
]
WHEN = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)  # fixed: test ids must be the same in every xdist worker
GOOD: list[dict[str, Any]] = [
    {"countdown": -5}, {"countdown": 2.5}, {"expires": 60}, {"expires": -1},
    {"expires": WHEN}, {"eta": "2030-01-02T03:04:05+00:00"}, {"eta": WHEN},
    {"priority": 0}, {"priority": 255}, {"queue": "q"}, {"headers": {}}, {"countdown": None, "priority": None},
]


@pytest.mark.parametrize(("options", "error", "message"), BAD, ids=[str(o) for o, _, _ in BAD])
def test_a_bad_option_is_named(options: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error) as info:
        check_publish_options(options)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


@pytest.mark.parametrize("options", GOOD, ids=[str(o) for o in GOOD])
def test_what_celery_takes_is_taken(options: dict[str, Any]) -> None:
    check_publish_options(options)


@pytest.mark.parametrize("backend", ["redis", "redis+thrift"], indirect=True)
def test_a_bad_option_publishes_nothing(app: Celery, service: JobService) -> None:
    task = app.tasks["tests.w_unique_of"]
    account = int(uuid.uuid4().int % 10**9)
    assert task.apply_async((account, "x"), countdown=1, priority=0).descriptor  # well formed: one job
    for i, (options, error, message) in enumerate(BAD, start=1):
        with pytest.raises(error, match="^" + message.split(",")[0]):
            task.apply_async((account + 3 * i, "x"), **options)  # each its own unique key
        with pytest.raises(error, match="^" + message.split(",")[0]):
            task.delay_many([(account + 3 * i + 1, "x"), (account + 3 * i + 2, "y")], **options)
    queue = qname("w_unique_of")
    assert service.count(queue, "pending") + service.count(queue, "pending", future=True) == 1
