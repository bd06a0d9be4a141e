# mypy: disable-error-code="no-untyped-call"
# (Celery ships without complete type hints; its calls are untyped.)
"""Cancelling Celery tasks' PinLater jobs, with their results told.

    from workers.cancel import cancel
    outcome = cancel([result, ...])     # what apply_async / delay returned
    result.get()                        # TaskRevokedError, not a wait for ever

The job service's cancel (``JobService.cancel``, ``pinlater cancel``, the
dashboard) ends a PENDING job FAILED ``[cancelled]``: no worker receives
its message, so none stores a result for it, and a task that keeps results
would leave its ``AsyncResult`` PENDING for good. ``cancel`` here is the
same cancel, and then it stores REVOKED (reason ``cancelled``) for each of
those jobs whose task keeps results, as Celery's worker stores a task it
skipped. A RUNNING task is told as any cancel tells it
(``workers.task.JobCancelled``); what it stores then is its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from celery import Celery, current_app

from pinlater.models import CancelResult
from workers.client import shared_client
from workers.message_format import decode
from workers.settings import TransportSettings

log = logging.getLogger(__name__)

# Descriptors per call to the job service: under any PINLATER_MAX_JOBS_PER_CALL
# an operator would set.
CHUNK = 100


def store_revoked(app: Celery, headers: dict[str, Any], reason: str) -> None:
    """A task that never ran stored as REVOKED with ``reason``, as Celery's
    worker stores one it skipped: if the task, or its publish, keeps results."""
    task = app.tasks.get(headers["task"])
    if task is None:
        return
    ignore = headers.get("ignore_result")
    if not (task.ignore_result if ignore is None else ignore) or task.store_errors_even_if_ignored:
        task.backend.mark_as_revoked(headers["id"], reason)


def cancel(results: Iterable[Any], app: Celery | None = None) -> CancelResult:
    """Cancels the jobs of ``results`` (each what a publish of a
    ``PinLaterTask`` returned, with ``descriptor``, or a descriptor), as
    ``JobService.cancel`` does, queue by queue, and stores REVOKED for the
    PENDING ones whose tasks keep results. ``app``: the Celery app whose
    broker and result backend they use (default: the results' own, else
    the current app)."""
    by_queue: dict[str, list[str]] = {}
    for result in results:
        descriptor = result if isinstance(result, str) else getattr(result, "descriptor", None)
        if not isinstance(descriptor, str) or ":" not in descriptor:
            raise TypeError(f"cancel takes the results of PinLater publishes or job descriptors, got {result!r:.80}")
        by_queue.setdefault(descriptor.split(":", 1)[0], []).append(descriptor)
        app = app or getattr(result, "app", None)
    app = app or current_app
    client = shared_client(TransportSettings.from_options(app.conf.broker_transport_options).pinlater)
    outcome = CancelResult()
    for queue, descriptors in by_queue.items():
        for i in range(0, len(descriptors), CHUNK):
            done = client.cancel(queue, descriptors[i:i + CHUNK])
            outcome.cancelled += done.cancelled
            outcome.interrupted += done.interrupted
            outcome.finished += done.finished
            outcome.unknown += done.unknown
            outcome.unapplied.update(done.unapplied)
            if done.cancelled:
                _revoke_results(app, client, done.cancelled)
    return outcome


def _revoke_results(app: Celery, client: Any, descriptors: list[str]) -> None:
    """REVOKED for the Celery tasks of these cancelled PENDING jobs."""
    for descriptor, info in client.lookup(descriptors, include_body=True).items():
        stored = decode(info.body) if info.body else None
        if stored is None or not stored.celery:
            continue
        headers = stored.headers
        if not isinstance(headers.get("id"), str) or not isinstance(headers.get("task"), str):
            continue
        try:
            store_revoked(app, headers, "cancelled")
        except Exception as exc:  # noqa: BLE001 -- the job is cancelled either way; the result is told best effort
            log.warning("job %s was cancelled; its task's result could not be stored: %s: %s",
                        descriptor, type(exc).__name__, str(exc)[:200])
