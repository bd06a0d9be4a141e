"""Starting, pausing, resuming and measuring runs, through any PinLater
client (the in-process ``JobService`` or the Thrift client of
``PINLATER_SERVERS``: ``pinlater.connect``) and the app data.

A run is one kind on one cluster. Its plan is fixed at start: every
shard's pages up to its highest user local id then. Start records the run,
makes its batch (whose callback ends the run: ``tasks.backfill.pages``),
enqueues page 1 of each shard into it with its page's idempotency key, so
a start that is retried after a failed enqueue starts no chain twice, and
seals it. Cancel cancels the run's batch: its pages waiting never run, the
ones running are told to stop, and the run ends cancelled.

Pause and resume are the job service's, on the whole ``backfill`` queue: a
paused queue hands out no job, so every run stops after the pages in
flight, and resumes where its chains stand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pinlater.client_api import PinLaterClient
from pinlater.errors import QueueNotFound
from pinlater.models import CancelResult, Job
from tasks.appdata import objects
from tasks.appdata.ids import ObjectType
from tasks.appdata.store import AppData
from tasks.backfill import kinds
from tasks.backfill.pages import PageJob, RunEnd, page_key, run_batch, run_key
from tasks.backfill.plan import DEFAULT_PAGE_SIZE, Plan
from tasks.backfill.progress import Progress, progress
from tasks.backfill.queue import QUEUE, create_options
from tasks.backfill.records import CANCELLED, ENDED, RUNNING, Counts, Records, Run
from tasks.hbase import PRIMARY, STANDBY

CLUSTERS = {PRIMARY: (PRIMARY,), STANDBY: (STANDBY,), "both": (PRIMARY, STANDBY)}


def plan_for(store: AppData, page_size: int = DEFAULT_PAGE_SIZE) -> Plan:
    """Pages of every shard's users as they are now."""
    max_locals = {shard: objects.max_local_id(store, ObjectType.USER, shard) for shard in store.shard_map.shards}
    return Plan.from_max_locals(max_locals, page_size)


UNCHANGED: Any = object()  # ``max_running`` not given: the queue keeps its cap


def ensure_queue(client: PinLaterClient, rate: float | None = None, max_running: int | None = UNCHANGED) -> None:
    """Creates the queue with its defaults if missing (an existing one keeps
    its operators' config); ``rate`` then sets its rate limit, and
    ``max_running`` its cap (None: no cap)."""
    client.create_queue(QUEUE, **create_options())
    if rate is not None:
        client.set_rate(QUEUE, rate)
    if max_running is not UNCHANGED:
        client.set_concurrency(QUEUE, max_running)


def start(
    store: AppData, client: PinLaterClient, kind: str, clusters: Sequence[str], *,
    page_size: int = DEFAULT_PAGE_SIZE, rate: float | None = None, max_running: int | None = UNCHANGED,
) -> list[Run]:
    """A run per cluster, each with its first pages enqueued."""
    name = kinds.get(kind).name  # an unknown kind fails before anything is written
    for cluster in clusters:
        if cluster not in (PRIMARY, STANDBY):
            raise ValueError(f"cluster must be primary or standby, got {cluster!r}")
    ensure_queue(client, rate, max_running)
    records = Records(store)
    plan = plan_for(store, page_size)
    runs = []
    prefix = store.shard_map.database_prefix
    for cluster in clusters:
        run = records.create_run(name, cluster, plan)
        if run.state == RUNNING:
            batch = client.create_batch(QUEUE, Job(RunEnd(run.id).to_json().encode()), batch=run_batch(prefix, run),
                                        description=f"backfill run {run.id}: {name} on {cluster}")
            for shard in plan.first_pages():
                job = PageJob(run.id, shard, 1, batch)
                client.enqueue(QUEUE, [Job(job.to_json().encode(), key=run_key(job))],
                               idempotency_key=page_key(prefix, run, job), batch=batch)
            client.seal_batch(batch)
        runs.append(run)
    return runs


def cancel(store: AppData, client: PinLaterClient, run_id: int) -> tuple[Run, CancelResult | None]:
    """Cancels a running run: its batch's jobs that have not ended (pages
    waiting are FAILED and never run; pages running are told to stop, and
    the next page they would add joins nothing), then the run is marked
    cancelled. A run that has ended is left as it is (no result). A run
    begun before runs had batches cannot be cancelled this way: pause the
    queue and delete its jobs."""
    records = Records(store)
    run = records.get_run(run_id)
    if run.state in ENDED:
        return run, None
    result = client.cancel_batch(run_batch(store.shard_map.database_prefix, run))
    records.end_run(run.id, CANCELLED)
    return records.get_run(run.id), result


def pause(client: PinLaterClient) -> None:
    ensure_queue(client)
    client.pause(QUEUE)


def resume(client: PinLaterClient) -> None:
    ensure_queue(client)
    client.resume(QUEUE)


def queue_paused(client: PinLaterClient) -> bool:
    try:
        return client.queue_config(QUEUE, fresh=True).paused
    except QueueNotFound:
        return False


def run_progress(records: Records, run: Run, paused: bool) -> Progress:
    return progress_of(run, records.counts(run.id), paused)


def progress_of(run: Run, counts: Counts, paused: bool) -> Progress:
    return progress(
        pages_done=counts.pages_done, total_pages=run.total_pages, users_done=counts.users_done,
        cells=counts.cells, recent_pages=counts.recent_pages, recent_users=counts.recent_users,
        started_ms=run.created_at_ms, now_ms=counts.now_ms, ended=run.state if run.state in ENDED else None,
        paused=paused,
    )
