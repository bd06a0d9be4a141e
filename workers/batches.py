"""Batches under Celery: a group of signatures published as the jobs of
one PinLater batch, and a callback signature that runs once every one of
them has ended, succeeded or failed (``pinlater.engine.batches`` says how
the job service keeps that exactly once, whatever dies).

    from workers.batches import publish_batch
    published = publish_batch([sync.s(user) for user in users], report.s(), description="nightly sync")

The callback runs with the keyword argument ``pinlater_batch``: a dict of
the batch's ``batch`` id, ``total``, ``succeeded`` and ``failed``. A task
of the batch may add jobs to it while it runs, before it returns (the next
page): ``join(next_page.s(...), batch).apply_async()``, with the batch's id
as ``publish_batch`` returned it (pass it to the task as an argument).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pinlater.models import BatchStatus, new_batch_id

# The keyword argument a batch's callback gets (its batch's counts).
BATCH_KWARG = "pinlater_batch"


@dataclass(frozen=True)
class PublishedBatch:
    """What ``publish_batch`` made: the batch's id, its jobs' results (each
    with ``descriptor``) and its callback's."""

    batch: str
    results: list[Any]
    callback: Any


def batch_counts(status: BatchStatus) -> dict[str, Any]:
    return {"batch": status.batch, "total": status.total, "succeeded": status.succeeded, "failed": status.failed}


def join(signature: Any, batch: str) -> Any:
    """``signature`` made to publish its job into ``batch`` (from a running
    job of the batch, before that job ends)."""
    headers = dict(signature.options.get("headers") or {})
    headers["pinlater_batch"] = batch
    return signature.clone(headers=headers)


def publish_batch(signatures: Iterable[Any], callback: Any, *, description: str = "") -> PublishedBatch:
    """Publishes ``callback`` as a new batch's callback (stored now, run once
    the batch has ended), then each signature as a job of the batch, then
    seals it. The signatures' tasks must be on PinLater queues."""
    batch = new_batch_id(callback.type.pinlater_queue)
    headers = dict(callback.options.get("headers") or {})
    headers.update({"pinlater_batch_callback": batch, "pinlater_batch_description": description})
    kwargs = {**callback.kwargs, BATCH_KWARG: batch}
    callback_result = callback.clone(kwargs=kwargs, headers=headers).apply_async()
    results = [join(signature, batch).apply_async() for signature in signatures]
    client = callback.type.pinlater_client
    client.seal_batch(batch)
    return PublishedBatch(batch, results, callback_result)
