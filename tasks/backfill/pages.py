"""One page of a run, as a plain function (the Celery shell is
``tasks.backfill.tasks``).

A page job (``{"run": id, "shard": s, "page": k}``) skips its work when the
page is done already (a replay after its worker died between the work and
the ACK); otherwise it records the start, reads the page's user ids, has
the kind write their cells, and records the page done. Either way it names
the next page of the same shard (one chain per shard, so shards run in
parallel) with an idempotency key per (run, shard, page): a replayed page
never starts a second chain. The page that completes the run marks it
finished (a guarded UPDATE).
"""

from __future__ import annotations

from dataclasses import dataclass

from tasks import bodies
from tasks.appdata import objects
from tasks.appdata.ids import ObjectType
from tasks.backfill import kinds
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.plan import local_range
from tasks.backfill.records import Records, Run, UnknownRun


class InvalidPageJob(ValueError):
    """A page job no retry can fix (not a page of a known run)."""


@dataclass(frozen=True, slots=True)
class PageJob:
    run_id: int
    shard: int
    page: int

    def __post_init__(self) -> None:
        for name, value, low in (("run", self.run_id, 1), ("shard", self.shard, 0), ("page", self.page, 1)):
            if type(value) is not int or value < low:
                raise InvalidPageJob(f"backfill page: {name} must be an int >= {low}, got {value!r}")

    def to_json(self) -> str:
        return bodies.dump({"run": self.run_id, "shard": self.shard, "page": self.page})

    @classmethod
    def from_json(cls, text: str | bytes) -> PageJob:
        data = bodies.load(text, "backfill page", ("run", "shard", "page"), (), InvalidPageJob)
        return cls(data["run"], data["shard"], data["page"])


def page_key(store_prefix: str, run: Run, job: PageJob) -> str:
    """The idempotency key of a page's job. The run's creation time is in it
    because run ids start again in app-data databases made again (tests,
    the demo) while the job service still remembers the old keys."""
    return f"{store_prefix}backfill:{run.id}:{run.created_at_ms}:{job.shard}:{job.page}"


def run_key(job: PageJob) -> str:
    """A page's fairness key: its run's, so that runs going at once (and
    the shards of one run) take turns instead of the first run's pages
    holding back the second's."""
    return f"backfill:{job.run_id}"


@dataclass(frozen=True, slots=True)
class PageStep:
    cells: int  # written by this call (0 when skipped)
    skipped: bool  # the page was done already
    next_job: PageJob | None
    next_key: str | None
    finished_run: bool  # this call marked the run finished


def run_page(ctx: BackfillContext, records: Records, job: PageJob) -> PageStep:
    try:
        run = records.get_run(job.run_id)
    except UnknownRun as exc:
        raise InvalidPageJob(f"backfill page: {exc}") from None
    if not run.plan.has(job.shard, job.page):
        raise InvalidPageJob(f"backfill page: run {run.id} has no page {job.page} on shard {job.shard}")
    kind = kinds.get(run.kind)
    cells, skipped = 0, records.page_done(run.id, job.shard, job.page)
    if not skipped:
        records.start_page(run.id, job.shard, job.page)
        first, last = local_range(job.page, run.plan.page_size)
        users = objects.ids_in_local_range(ctx.store, ObjectType.USER, job.shard, first, last)
        cells = kind.backfill(ctx, run.cluster, users) if users else 0
        records.finish_page(run.id, job.shard, job.page, len(users), cells)
    following = run.plan.next_page(job.shard, job.page)
    next_job = None if following is None else PageJob(run.id, job.shard, following)
    prefix = ctx.store.shard_map.database_prefix
    finished = False
    # Pages of a chain finish in order, so the run can only be complete at
    # the end of a chain: only then count the pages done.
    if following is None and run.state != "finished" and records.counts(run.id).pages_done >= run.total_pages:
        finished = records.finish_run(run.id)
    return PageStep(cells, skipped, next_job, None if next_job is None else page_key(prefix, run, next_job), finished)
