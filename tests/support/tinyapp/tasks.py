# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Celery ships without complete type hints; its calls are untyped.)
"""The tiny app's one task, on its one queue, configured by its manifest."""

from __future__ import annotations

from celery import shared_task

from tests.support.tinyapp.app import APP, QUEUE
from workers.task import PinLaterTask

_CONFIG = APP.queue(QUEUE)


@shared_task(name="tinyapp.note", base=PinLaterTask, bind=True, pinlater_queue=QUEUE,
             queue_retry_policy=_CONFIG.retry, claim_timeout_ms=_CONFIG.claim_timeout_ms)
def note(self: PinLaterTask, body: str | bytes) -> int:
    """Takes a note: its length."""
    return len(body)
