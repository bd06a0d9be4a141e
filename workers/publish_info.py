"""The descriptor of the job a publish just made, for the thread that
published it: Celery's ``apply_async`` returns an AsyncResult with the
task id, and ``PinLaterTask.apply_async`` adds the job's descriptor to it
(and whether the publish found its unique key held)."""

from __future__ import annotations

import threading
from typing import Any

from workers import bulk

_local = threading.local()


def remember_descriptor(descriptor: str, duplicate: bool = False) -> None:
    """``duplicate``: the job is one that held the publish's unique key."""
    _local.descriptor = descriptor
    _local.duplicate = duplicate


def take_descriptor() -> str | None:
    """The descriptor remembered last, once; a publish calls it first, so
    that nothing an earlier publish left is taken for its own."""
    descriptor: str | None = getattr(_local, "descriptor", None)
    _local.descriptor = None
    bulk.take_last()
    return descriptor


def stamp(result: Any) -> None:
    """The AsyncResult of a publish gets the job's ``descriptor`` and
    ``duplicate`` (True: the publish's unique key was held, by that job),
    unless no publish was remembered since the last ``take_descriptor``
    (an outer ``apply_async`` after an app's ``send_task`` has stamped it).
    A publish waiting in a bulk scope gets them when the scope ends."""
    waiting = bulk.take_last()
    if waiting is not None:
        waiting.results.append(result)
        result.descriptor, result.duplicate = None, False
        return
    descriptor = take_descriptor()
    if descriptor is not None or not hasattr(result, "descriptor"):
        result.descriptor = descriptor
        result.duplicate = bool(getattr(_local, "duplicate", False))
    _local.duplicate = False
