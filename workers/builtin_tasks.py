# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""Tasks every worker has: a no-op (benchmarks, health checks)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from workers.task import PinLaterTask


@shared_task(base=PinLaterTask, name="workers.noop", pinlater_queue="celery_noop")
def noop(*args: Any, **kwargs: Any) -> None:
    return None
