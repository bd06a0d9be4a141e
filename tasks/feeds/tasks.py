# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Celery ships without complete type hints; its calls are untyped.)
"""The feed tasks: thin Celery shells on PinLater queues, one task type per
queue (``tasks.feeds.queues``). Each parses its JSON body (bytes when the job
was enqueued raw by application code, text when a task published it),
calls a plain function of ``tasks.feeds``, and publishes what comes next:
one write job per cluster (a fan-out page makes its own puts where it can,
``tasks.feeds.direct``), the next page of a chained job, trims. The
writes and publishes happen before the task returns, and the ACK after
it, so a worker killed in between runs the page again; every write is
idempotent (same cells at the same timestamp), so a replay changes nothing.

* A body that cannot be parsed fails at once (``refuse``): FAILED, no
  retries, the reason in the job's custom status.
* An outage (HBase, MySQL, the job service) is a retry on the queue's
  policy: an expected condition, logged in one line, not as an error.

Workers import this module because the app's manifest names it (``tasks.feeds.app``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from typing import Any, TypeVar

from celery import shared_task

from pinlater.observe import tracing
from tasks.feeds import queues
from tasks.feeds.fanout import FanoutJob, InvalidFanoutJob, fanout_key, fanout_page
from tasks.feeds.follow import FollowAction, InvalidFollowAction, follow_writes
from tasks.feeds.runtime import FeedRuntime, runtime
from tasks.feeds.settings import FeedSettings
from tasks.feeds.trim import InvalidTrimJob, SweepJob, TrimJob, apply_trim, over, sweep_page
from tasks.feeds.writes import CLUSTERS, InvalidWriteBody, WriteBody, apply_write
from tasks.hbase import PRIMARY, STANDBY, HBaseError
from tasks.shell import run_job, task_options
from workers.task import PinLaterTask

log = logging.getLogger(__name__)
T = TypeVar("T")

# Bodies no retry can fix.
_INVALID = (InvalidFanoutJob, InvalidFollowAction, InvalidWriteBody, InvalidTrimJob)
_SETTINGS = FeedSettings.from_env()


def _options(queue: str) -> dict[str, Any]:
    return task_options(queue, queues.create_options(queue))


def _run(task: PinLaterTask, work: Callable[[], T]) -> T:
    return run_job(task, work, _INVALID)


def publish_writes(writes: list[WriteBody], priority: int, key: str | None = None,
                   fairness_key: str | None = None) -> None:
    """One write job per cluster. With ``key`` (what made the writes), a
    replay of the job that made them publishes none again; with
    ``fairness_key``, the writes take turns with other keys' in their queue."""
    for body in writes:
        WRITE_TASKS[body.cluster].apply_async(
            args=[body.to_json()], priority=priority,
            idempotency_key=None if key is None else f"{key}:{body.cluster}", fairness_key=fairness_key,
        )


def _key(rt: FeedRuntime, what: str) -> str:
    """An idempotency key, in the namespace of this app data (ids are unique
    within it; a test or demo database made again reuses them)."""
    return f"{rt.store.shard_map.database_prefix}{what}"


def _page_key(rt: FeedRuntime, job: FanoutJob) -> str:
    return _key(rt, f"fanout:{job.pin_id}:{job.created_at_ms}:{job.phase}:{job.cursor or ''}")


@shared_task(name="feeds.fanout", **_options(queues.FANOUT))
def fanout(self: PinLaterTask, body: str | bytes) -> int:
    """One page of a pin's followers: the next page, a put per cluster (by
    the page itself where it can, ``tasks.feeds.direct``, else a write
    job), trims for sampled rows well over the cap."""

    def work() -> int:
        job = FanoutJob.from_json(body)
        tracing.set_attributes({"feeds.pin_id": job.pin_id, "feeds.phase": job.phase})
        rt = runtime()
        step = fanout_page(rt.store, job, huge_followers=rt.settings.huge_followers, recent=rt.settings.recent_pins)
        # Keyed by page: a page run again (its worker died before the ACK)
        # publishes neither its successor nor its writes twice, so a crash
        # does not start a second chain down the rest of the followers. The
        # successor goes first: the next page runs while this one writes.
        if step.next_job is not None:
            fanout.apply_async(args=[step.next_job.to_json()], priority=step.priority,
                               idempotency_key=_page_key(rt, step.next_job), fairness_key=fanout_key(job))
        # What the page could not write itself is queued. The writes keep the
        # page's fairness key: a slow cluster's backlog of one pinner's
        # writes does not hold back every other pinner's.
        left = rt.direct.write(rt.ready, rt.store, self.pinlater_client, step.writes)
        publish_writes(left, step.priority, _page_key(rt, job), fanout_key(job))
        if step.writes:
            _trim_if_long(rt, job, [user for user, _version in step.writes[0].rows])
        return len(step.writes[0].rows) if step.writes else 0

    return _run(self, work)


def _trim_if_long(rt: FeedRuntime, job: FanoutJob, followers: list[int]) -> None:
    """On clusters whose compactions do not trim the feed (no coprocessor):
    checks a few of the page's rows (the same ones on a replay) and enqueues
    trims of those well over the cap. A feed that keeps growing is in many
    pages, so it is found soon; the sweep finds the rest. Where compactions
    trim, nothing is read or enqueued. A failed check is skipped: it must not
    hold up the fan-out."""
    sample = min(rt.settings.trim_sample, len(followers))
    if not sample:
        return
    try:
        clusters = [cluster for cluster in CLUSTERS if not rt.trimmed_by_compaction(cluster)]
        if not clusters:
            return
        chosen = random.Random(f"{job.pin_id}:{job.phase}:{job.cursor}").sample(followers, sample)
        pair = rt.ready(clusters[0])
        long_rows = [user for user in chosen if over(pair, clusters[0], user, rt.settings.trim_threshold)]
    except HBaseError as exc:
        log.info("feeds.fanout: feed length check skipped: %s", exc)
        return
    for user in long_rows:
        for cluster in clusters:
            trim.apply_async(args=[TrimJob(user, cluster, rt.settings.cap).to_json()])


@shared_task(name="feeds.follow", **_options(queues.FOLLOW))
def follow(self: PinLaterTask, body: str | bytes) -> int:
    """A follow or unfollow: the followee's recent pins put into (or deleted
    from) the follower's row at the action's time, one write per cluster."""

    def work() -> int:
        rt = runtime()
        action = FollowAction.from_json(body)
        writes = follow_writes(rt.store, action, recent=rt.settings.recent_pins, cap=rt.settings.cap)
        key = _key(rt, f"follow:{action.follower_id}:{action.followee_id}:{action.action}:{action.at_ms}")
        publish_writes(writes, 1, key)
        return writes[0].cells() if writes else 0

    return _run(self, work)


def _write(task: PinLaterTask, cluster: str, body: str | bytes) -> int:
    def work() -> int:
        write = WriteBody.from_json(body)
        if write.cluster != cluster:
            raise InvalidWriteBody(f"write body for the {write.cluster} cluster on the {cluster} queue")
        rt = runtime()
        return apply_write(rt.ready(cluster), rt.store, write)

    return _run(task, work)


@shared_task(name="feeds.write_primary", **_options(queues.WRITE_PRIMARY))
def write_primary(self: PinLaterTask, body: str | bytes) -> int:
    """One batched put or retraction on the primary."""
    return _write(self, PRIMARY, body)


@shared_task(name="feeds.write_standby", **_options(queues.WRITE_STANDBY))
def write_standby(self: PinLaterTask, body: str | bytes) -> int:
    """One batched put or retraction on the standby."""
    return _write(self, STANDBY, body)


WRITE_TASKS = {PRIMARY: write_primary, STANDBY: write_standby}


@shared_task(name="feeds.trim", **_options(queues.TRIM))
def trim(self: PinLaterTask, body: str | bytes) -> int:
    """Deletes one row's columns past the cap on one cluster; the cells deleted."""

    def work() -> int:
        job = TrimJob.from_json(body)
        return apply_trim(runtime().ready(job.cluster), job.cluster, job.user_id, job.cap)

    return _run(self, work)


@shared_task(
    name="feeds.trim_sweep",
    run_every_s=_SETTINGS.sweep_interval_s or None,
    run_every_args=("{}",),
    **_options(queues.TRIM_SWEEP),
)
def trim_sweep(self: PinLaterTask, body: str | bytes) -> int:
    """One page of a sweep: trims for the long rows found, then the next
    page. ``{}`` (what ``celery beat`` sends) starts a sweep per cluster."""

    def work() -> int:
        job = SweepJob.from_json(body)
        rt = runtime()
        cap = job.cap if job.cap is not None else rt.settings.cap
        if job.cluster is None:
            for cluster in CLUSTERS:
                trim_sweep.apply_async(args=[SweepJob(cluster, None, cap).to_json()])
            return 0
        if rt.trimmed_by_compaction(job.cluster):
            log.info("feeds.trim_sweep: %s trims the feed in its compactions; no sweep there", job.cluster)
            return 0
        pair = rt.ready(job.cluster)
        page = sweep_page(pair, job.cluster, job.cursor, cap, rows=rt.settings.sweep_rows)
        for user in page.users:
            trim.apply_async(args=[TrimJob(user, job.cluster, cap).to_json()])
        if page.next_cursor is not None:
            trim_sweep.apply_async(args=[SweepJob(job.cluster, page.next_cursor, cap).to_json()])
        return len(page.users)

    return _run(self, work)
