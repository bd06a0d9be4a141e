"""Coalescing in a server process: concurrent enqueues, dequeues and ACKs
of one queue go to the shards together, as one call (group commit by
natural batching, ``pinlater.engine.groupcommit``).

Many clients sending batches of one cost a shard call each; while one is
in flight, the calls of the same kind that arrive wait, and then go as one
batched call. The first call of a quiet queue goes at once. Each caller
gets exactly what it would have got alone:

* **Enqueue** (key: the queue). Each caller's jobs are checked first
  (``pinlater.engine.writes.enqueue_items``), so bad input fails only its caller;
  the batch is stored on one shard in one call, all or nothing, and each
  caller gets the descriptors of its own jobs, in order. A shard error
  fails every caller of the batch with that error, as it would have alone.
  A batch holds at most ``max_jobs_per_call`` jobs. Enqueues with an
  idempotency key run alone.
* **Dequeue** (key: queue, source, coverage; not dry runs). A claim
  carries the caller's source, so only calls that differ in nothing but
  the count are merged: one dequeue for the sum of the counts (the rate
  limit applies to that total), whose jobs, in priority order, are split
  in arrival order, no caller getting more than it asked for. Their jobs
  share the merged call's claim, as the jobs of one call do; a job that
  runs again is claimed anew, so a late ACK of its earlier run is stale. A waiting
  caller never gives up before its share is handed over (see
  ``pinlater.engine.groupcommit``), so no job is claimed for a caller that has
  gone: the jobs of a caller whose connection dropped are in its reply,
  lost as a lost reply of a call made alone, and re-run after the claim
  timeout.
* **ACK** (key: the queue). ACKs carry their claim, or their caller's
  source, item by item, so callers of different sources merge: each caller's ACKs are checked
  and routed first (``pinlater.engine.settle.prepare_acks``), then applied with one
  call per shard for all of them (``pinlater.engine.settle.settle_acks``), and each caller
  gets its own acked, stale and unapplied descriptors. ACKs riding on a
  dequeue go this way first, then the dequeue.

``PINLATER_SERVER_COALESCE=0`` (``Settings.server_coalesce``) turns it off.
ACKs are merged only with ``PINLATER_SERVER_COALESCE_ACKS=1``: measured
with 12 clients on one server process, merging cut the server's CPU per
enqueue by 58% on MySQL and 17% on Redis, but merged ACKs cost 2.8x the
CPU per dequeue+ACK on MySQL (most likely the merged guarded UPDATE's
row locks meeting concurrent claims; not confirmed) for no clear gain on
Redis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from pinlater.client_api import Call, PinLaterClient, declared
from pinlater.engine.groupcommit import GroupCommit
from pinlater.engine.settle import PreparedAcks, Share, prepare_acks, settle_acks
from pinlater.engine.writes import check_dequeue, enqueue_items, store_items
from pinlater.models import AckResult, DequeuedJob, Enqueued
from pinlater.service import JobService
from pinlater.stores.base import EnqueueItem
from pinlater.validation import MAX_LIMIT, check_source

V = TypeVar("V")


def _split(values: Sequence[V], counts: Sequence[int]) -> list[list[V]]:
    """``values`` cut into consecutive runs of ``counts`` (the last runs
    shorter, or empty, when ``values`` runs out)."""
    out: list[list[V]] = []
    start = 0
    for n in counts:
        out.append(list(values[start : start + n]))
        start += n
    return out


class Coalescer:
    """``enqueue``, ``dequeue`` and ``ack`` as ``JobService`` has them,
    merging concurrent calls (see the module doc); the server's handler
    calls these instead of the service's. Its batches are made from the
    service's core with the steps the service itself runs."""

    def __init__(self, service: JobService, *, acks: bool | None = None) -> None:
        """``acks`` (default: the ``server_coalesce_acks`` setting): merge
        ACKs too; without, each caller's ACKs go alone."""
        self.service = service
        self.core = service.core
        self.merge_acks = service.settings.server_coalesce_acks if acks is None else acks
        per_call = service.settings.max_jobs_per_call
        self.enqueues: GroupCommit[str, list[EnqueueItem], list[str]] = GroupCommit(self._enqueue_batch, per_call)
        self.dequeues: GroupCommit[tuple[str, str, float], int, list[DequeuedJob]] = GroupCommit(
            self._dequeue_batch, MAX_LIMIT
        )
        self.acks: GroupCommit[str, PreparedAcks, Share] = GroupCommit(self._ack_batch, per_call)

    # -- enqueue -----------------------------------------------------------------------
    @declared(PinLaterClient.enqueue)
    def enqueue(self, a: Call) -> Enqueued:
        # Unique jobs and batches' run alone too: a merged call's duplicates would have to
        # be split back per caller, and they go to their keys' shards anyway.
        if a.idempotency_key is not None or a.batch is not None or not a.jobs or any(job.unique for job in a.jobs):
            return self.service.enqueue(a.queue, a.jobs, idempotency_key=a.idempotency_key, batch=a.batch)
        items = enqueue_items(self.core, a.queue, a.jobs)
        return Enqueued(self.enqueues.submit(a.queue, items, len(items)))

    def _enqueue_batch(self, queue: str, batches: list[list[EnqueueItem]]) -> list[list[str]]:
        items = batches[0] if len(batches) == 1 else [item for items in batches for item in items]
        descriptors: list[str] = store_items(self.core, queue, items)
        return _split(descriptors, [len(b) for b in batches])

    # -- dequeue -----------------------------------------------------------------------
    @declared(PinLaterClient.dequeue)
    def dequeue(self, a: Call) -> list[DequeuedJob]:
        queue, limit, coverage = a.queue, a.limit, a.coverage
        source = check_source(a.source or self.service.source)
        if a.succeeded or a.failed:
            self.ack(queue, succeeded=a.succeeded, failed=a.failed, source=source)
        if a.dry_run:
            return self.service.dequeue(queue, limit, source=source, dry_run=True, coverage=coverage)
        check_dequeue(self.core, queue, limit, coverage)
        return self.dequeues.submit((queue, source, coverage), limit, limit)

    def _dequeue_batch(self, key: tuple[str, str, float], limits: list[int]) -> list[list[DequeuedJob]]:
        queue, source, coverage = key
        jobs = self.service.dequeue(queue, sum(limits), source=source, coverage=coverage)
        return _split(jobs, limits)

    # -- ack ---------------------------------------------------------------------------
    @declared(PinLaterClient.ack)
    def ack(self, a: Call) -> AckResult:
        if not self.merge_acks:
            return self.service.ack(a.queue, succeeded=a.succeeded, failed=a.failed, source=a.source)
        prepared = prepare_acks(self.core, a.queue, a.succeeded, a.failed, a.source or self.service.source)
        if not prepared.count:
            return AckResult()
        return self.acks.submit(a.queue, prepared, prepared.count).result_of_acks()

    def _ack_batch(self, queue: str, batch: list[PreparedAcks]) -> list[Share]:
        return settle_acks(self.core, batch)
