# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Celery ships without complete type hints; its calls are untyped.)
"""The backfill task: a thin Celery shell on the ``backfill`` queue. It
parses a page job, runs it (``tasks.backfill.pages.run_page``), publishes
the next page of the same shard with the page's idempotency key, into the
run's batch, and ACKs by returning; the batch's callback, the run's end,
comes to the same task (``tasks.backfill.pages.end_run``). A body no retry
can fix is refused (FAILED at once); an outage of MySQL, HBase or the job
service is a retry on the queue's policy.

Workers import this module because the app's manifest names it
(``tasks.backfill.app``).
"""

from __future__ import annotations

import logging

from celery import shared_task

from pinlater.errors import InvalidRequest
from tasks.backfill import queue
from tasks.backfill.kinds import UnknownKind
from tasks.backfill.pages import InvalidPageJob, PageJob, PageStep, RunEnd, end_run, parse_job, run_key, run_page
from tasks.backfill.runtime import runtime
from tasks.hbase.thrift2 import write_width
from tasks.shell import run_job, task_options
from workers.batches import join
from workers.client import queue_config
from workers.task import PinLaterTask

log = logging.getLogger(__name__)

_INVALID = (InvalidPageJob, UnknownKind)


@shared_task(
    name="backfill.page",
    **task_options(queue.QUEUE, queue.create_options()),
)
def page(self: PinLaterTask, body: str | bytes) -> int:
    """One page of a run (the cells it wrote), or the run's end (0)."""
    job = run_job(self, lambda: parse_job(body), _INVALID)
    if isinstance(job, RunEnd):
        state = run_job(self, lambda: end_run(runtime().records, job), _INVALID)
        log.info("backfill run %d ended: %s", job.run_id, state)
        return 0

    def work() -> PageStep:
        rt = runtime()
        with write_width(queue.page_write_width(queue_config(self.pinlater_client, queue.QUEUE))):
            step = run_page(rt.ctx, rt.records, job)
        if step.next_job is not None:
            publish_next(self, step.next_job, step.next_key)
        return step

    step = run_job(self, work, _INVALID)
    if step.finished_run:
        log.info("backfill run finished with its last page")
    return step.cells


def publish_next(task: PinLaterTask, job: PageJob, key: str | None) -> None:
    """The next page of a chain, into its run's batch if it has one."""
    following = page.s(job.to_json()).set(idempotency_key=key, fairness_key=run_key(job))
    if job.batch is None:
        following.apply_async()
        return
    try:
        join(following, job.batch).apply_async()
    except InvalidRequest:
        # The batch takes no more jobs: this job was cancelled with its run
        # (the heartbeat raises JobCancelled), or the run failed and an
        # operator put this page back: the chain goes on outside the batch.
        task.heartbeat()
        page.s(job.unbatched().to_json()).set(idempotency_key=key, fairness_key=run_key(job)).apply_async()
