"""Enqueue's two steps and dequeue's check, over a ``Core``: the service
runs them back to back for one caller, the server's coalescer checks each
caller with the first and stores several callers' items with one call of
the second."""

from __future__ import annotations

from collections.abc import Sequence

from pinlater.descriptor import JobDescriptor
from pinlater.engine.core import Core
from pinlater.engine.unique import store_unique
from pinlater.errors import EnqueueOutcomeUnknown, EnqueueRejected, InvalidRequest, NoHealthyShards
from pinlater.models import Enqueued, Job
from pinlater.observe import tracing
from pinlater.queue_config import QueueConfig
from pinlater.stores.base import EnqueueItem, ShardBusy, ShardOutcomeUnknown, ShardUnavailable, ShardWriteRefused
from pinlater.validation import check_batch, check_job, check_limit


def enqueue_items(core: Core, queue: str, jobs: Sequence[Job], config: QueueConfig | None = None) -> list[EnqueueItem]:
    """The jobs checked against the queue's config and made the shard's
    items; raises for bad input. A job that brings no trace of its own gets
    the current span's, when tracing is on."""
    config = config or core.configs.get(queue)
    trace = tracing.traceparent() if tracing.ON else None
    check_batch(len(jobs), core.settings.max_jobs_per_call, "jobs", EnqueueRejected)
    for job in jobs:
        check_job(config, job, core.settings.max_body_bytes)
    default_attempts = config.retry.attempts_allowed
    return [
        EnqueueItem(
            body=bytes(job.body),
            priority=job.priority,
            run_after_ms=job.run_after_ms,
            attempts_allowed=job.attempts_allowed or default_attempts,
            custom_status=job.custom_status,
            trace=job.trace or trace,
            key=job.key,
            unique=job.unique,
        )
        for job in jobs
    ]


def store_items(core: Core, queue: str, items: Sequence[EnqueueItem]) -> Enqueued:
    """Stores the items on one healthy shard in one call, all or nothing;
    their descriptors in order. A shard that is unavailable, refuses to
    write or has no free connection passes the items to the next one.
    Items with unique keys go to their keys' shards instead
    (``pinlater.engine.unique``)."""
    for item in items:
        if item.unique:
            return store_unique(core, queue, items, _store_plain)
    return Enqueued(_store_plain(core, queue, items))


def _store_plain(core: Core, queue: str, items: Sequence[EnqueueItem]) -> list[str]:
    last_error: Exception | None = None
    for backend in core.shards.require_healthy():
        try:
            ids = core.shards.call(backend, "enqueue", queue, lambda b: b.enqueue(queue, items))
        except ShardOutcomeUnknown as exc:
            # Sent, then silence: the items may be stored there. Sending them
            # to the next shard could store them twice.
            raise EnqueueOutcomeUnknown(
                f"enqueue to {queue} not retried on another shard: shard {backend.shard_id} went silent after "
                f"it was sent, so its {len(items)} job(s) may or may not be stored ({exc})") from exc
        except (ShardUnavailable, ShardWriteRefused, ShardBusy) as exc:
            # Refused or reset before the script ran, refused by the shard
            # (nothing written) or no connection to send it on: the next
            # shard. The shard set has taken the first two out of rotation.
            last_error = exc
            core.shards.warn(backend.shard_id, "enqueue to %s went on without shard %s: %s",
                             queue, backend.shard_id, exc)
            continue
        return [
            str(JobDescriptor(queue, backend.shard_id, item.priority, local_id))
            for item, local_id in zip(items, ids, strict=True)
        ]
    raise NoHealthyShards(f"no shard accepted the enqueue: {last_error}")


def check_dequeue(core: Core, queue: str, limit: int, coverage: float = 1.0) -> QueueConfig:
    """A dequeue's arguments checked (the queue exists); its queue's config."""
    config = core.configs.get(queue)
    check_limit(limit)
    if not 0.0 < coverage <= 1.0:
        raise InvalidRequest(f"coverage must be in (0, 1], got {coverage!r}")
    return config
