"""What every task shell shares (``tasks.*.tasks``): the options of a
PinLater-backed Celery task, and running a job's work with a bad body
refused and an outage retried."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pinlater.errors import PinLaterError
from tasks.appdata.errors import AppDataStorageError, AppDataUnavailable, UnknownShard
from tasks.errors import TryLater
from tasks.hbase import HBaseError
from workers.task import PinLaterTask

log = logging.getLogger(__name__)
T = TypeVar("T")

# Conditions that end by themselves (a server comes back, the application
# finishes its write): the job is retried.
OUTAGES = (HBaseError, AppDataUnavailable, AppDataStorageError, PinLaterError, TryLater)


def task_options(queue: str, create: Mapping[str, Any], **more: Any) -> dict[str, Any]:
    """``shared_task`` options of a task on PinLater ``queue``, whose
    ``create_queue`` keywords are ``create`` (the app's one statement of
    the queue's config, so a queue a worker creates first is the queue the
    app's actions would create). ``more``: other PinLaterTask options."""
    options: dict[str, Any] = {"base": PinLaterTask, "bind": True, "pinlater_queue": queue}
    for name, value in create.items():
        if name not in _CREATE_OPTIONS:
            raise TypeError(f"task_options: {name!r} is not a queue option a task can carry")
        options["queue_retry_policy" if name == "retry" else name] = value
    return {**options, **more}


_CREATE_OPTIONS = frozenset({"retry", "priorities", "max_dequeue_rate", "max_running", "claim_timeout_ms"})


def run_job(task: PinLaterTask, work: Callable[[], T], invalid: tuple[type[Exception], ...]) -> T:
    """``work()``; a body no retry can fix (``invalid``, or an id on a shard
    the map does not have) is refused, an outage retried on the queue's policy."""
    refused: tuple[type[Exception], ...] = (*invalid, UnknownShard)
    try:
        return work()
    except refused as exc:
        task.refuse(str(exc))
    except OUTAGES as exc:
        log.info("%s: will retry: %s", task.name, exc)
        raise task.retry(exc=exc) from None
