"""The descriptor of the job a publish just made, for the thread that
published it: Celery's ``apply_async`` returns an AsyncResult with the
task id, and ``PinLaterTask.apply_async`` adds the job's descriptor to it."""

from __future__ import annotations

import threading

_local = threading.local()


def remember_descriptor(descriptor: str) -> None:
    _local.descriptor = descriptor


def take_descriptor() -> str | None:
    descriptor: str | None = getattr(_local, "descriptor", None)
    _local.descriptor = None
    return descriptor
