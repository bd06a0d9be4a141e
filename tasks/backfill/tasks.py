# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Celery ships without complete type hints; its calls are untyped.)
"""The backfill task: a thin Celery shell on the ``backfill`` queue. It
parses a page job, runs it (``tasks.backfill.pages.run_page``), publishes
the next page of the same shard with the page's idempotency key, and ACKs
by returning. A body no retry can fix is refused (FAILED at once); an
outage of MySQL, HBase or the job service is a retry on the queue's policy.

Workers import this module because the app's manifest names it
(``tasks.backfill.app``).
"""

from __future__ import annotations

import logging

from celery import shared_task

from tasks.backfill import queue
from tasks.backfill.kinds import UnknownKind
from tasks.backfill.pages import InvalidPageJob, PageJob, PageStep, run_key, run_page
from tasks.backfill.runtime import runtime
from tasks.shell import run_job, task_options
from workers.task import PinLaterTask

log = logging.getLogger(__name__)

_INVALID = (InvalidPageJob, UnknownKind)


@shared_task(
    name="backfill.page",
    **task_options(queue.QUEUE, queue.create_options()),
)
def page(self: PinLaterTask, body: str | bytes) -> int:
    """One page of a run; the cells it wrote."""

    def work() -> PageStep:
        rt = runtime()
        step = run_page(rt.ctx, rt.records, PageJob.from_json(body))
        if step.next_job is not None:
            page.apply_async(args=[step.next_job.to_json()], idempotency_key=step.next_key,
                             fairness_key=run_key(step.next_job))
        return step

    step = run_job(self, work, _INVALID)
    if step.finished_run:
        log.info("backfill run finished with its last page")
    return step.cells
