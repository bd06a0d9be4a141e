"""One page of a run, as a plain function (the Celery shell is
``tasks.backfill.tasks``).

A page job (``{"run": id, "shard": s, "page": k}``) skips its work when the
page is done already (a replay after its worker died between the work and
the ACK); otherwise it records the start, reads the page's user ids, has
the kind write their cells, and records the page done. Either way it names
the next page of the same shard (one chain per shard, so shards run in
parallel) with an idempotency key per (run, shard, page): a replayed page
never starts a second chain.

A run's pages are the jobs of one PinLater batch (``run_batch``): each
page adds the next one to it before its own job ends, and the batch's
callback, the run's end (``RunEnd``), runs once every page job has ended,
however they ended: the run is finished if every page is done, else
failed (a page refused, deleted, or out of retries). Cancelling the batch
cancels the run, and a page of a cancelled run does nothing.

A chain goes on outside the batch when its batch has ended: a failed
run's page that an operator put back (``pinlater retry-failed``). Such
pages, and those of runs begun before runs had batches, carry no batch:
the last page of a chain that completes their run marks it finished.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pinlater.errors import InvalidRequest
from pinlater.validation import check_batch_id
from tasks import bodies
from tasks.appdata import objects
from tasks.appdata.ids import ObjectType
from tasks.backfill import kinds
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.plan import local_range
from tasks.backfill.queue import QUEUE
from tasks.backfill.records import CANCELLED, FAILED, FINISHED, RUNNING, Records, Run, UnknownRun


class InvalidPageJob(ValueError):
    """A page job no retry can fix (not a page of a known run)."""


@dataclass(frozen=True, slots=True)
class PageJob:
    run_id: int
    shard: int
    page: int
    batch: str | None = None  # the run's batch (None: a run begun before runs had batches)

    def __post_init__(self) -> None:
        for name, value, low in (("run", self.run_id, 1), ("shard", self.shard, 0), ("page", self.page, 1)):
            if type(value) is not int or value < low:
                raise InvalidPageJob(f"backfill page: {name} must be an int >= {low}, got {value!r}")
        _check_batch(self.batch)

    def to_json(self) -> str:
        data: dict[str, object] = {"run": self.run_id, "shard": self.shard, "page": self.page}
        if self.batch is not None:
            data["batch"] = self.batch
        return bodies.dump(data)

    def following(self, page: int) -> PageJob:
        """The page ``page`` of the same run, shard and batch."""
        return PageJob(self.run_id, self.shard, page, self.batch)

    def unbatched(self) -> PageJob:
        """The same page outside its run's batch (the batch has ended)."""
        return PageJob(self.run_id, self.shard, self.page)


@dataclass(frozen=True, slots=True)
class RunEnd:
    """The callback of a run's batch: every page job of the run has ended."""

    run_id: int

    def __post_init__(self) -> None:
        if type(self.run_id) is not int or self.run_id < 1:
            raise InvalidPageJob(f"backfill run end: run must be an int >= 1, got {self.run_id!r}")

    def to_json(self) -> str:
        return bodies.dump({"run": self.run_id, "end": True})


def _check_batch(batch: object) -> None:
    if batch is None:
        return
    try:
        if not isinstance(batch, str) or not batch.startswith(f"{QUEUE}.b"):
            raise ValueError(f"not a batch of the {QUEUE} queue")
        check_batch_id(batch)
    except (ValueError, InvalidRequest) as exc:
        raise InvalidPageJob(f"backfill page: bad batch {str(batch)[:80]!r}: {exc}") from None


def parse_job(text: str | bytes) -> PageJob | RunEnd:
    """A backfill job's body: a page, or its run's end."""
    data = bodies.load(text, "backfill job", ("run",), ("shard", "page", "batch", "end"), InvalidPageJob)
    if "end" in data:
        if data["end"] is not True or set(data) != {"run", "end"}:
            raise InvalidPageJob('backfill run end: expected {"run": id, "end": true} and nothing else')
        return RunEnd(data["run"])
    missing = {"shard", "page"} - set(data)
    if missing:
        raise InvalidPageJob(f"backfill page: missing {sorted(missing)}")
    return PageJob(data["run"], data["shard"], data["page"], data.get("batch"))


def run_batch(store_prefix: str, run: Run) -> str:
    """The id of the batch of ``run``'s page jobs: made from the run, so
    whoever knows the run knows its batch (a cancel), and the same app
    data's run ids made again (tests, the demo) name new batches."""
    digest = hashlib.blake2b(f"{store_prefix}backfill:{run.id}:{run.created_at_ms}".encode(), digest_size=12)
    return f"{QUEUE}.b{digest.hexdigest()}"


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
    if run.state == CANCELLED:
        return PageStep(0, True, None, None, False)
    kind = kinds.get(run.kind)
    cells, skipped = 0, records.page_done(run.id, job.shard, job.page)
    if not skipped:
        records.start_page(run.id, job.shard, job.page)
        first, last = local_range(job.page, run.plan.page_size)
        users = objects.ids_in_local_range(ctx.store, ObjectType.USER, job.shard, first, last)
        cells = kind.backfill(ctx, run.cluster, users) if users else 0
        records.finish_page(run.id, job.shard, job.page, len(users), cells)
    following = run.plan.next_page(job.shard, job.page)
    next_job = None if following is None else job.following(following)
    prefix = ctx.store.shard_map.database_prefix
    finished = False
    # A run with a batch ends by its callback (end_run). Before batches:
    # pages of a chain finish in order, so the run can only be complete at
    # the end of a chain: only then count the pages done.
    if (job.batch is None and following is None and run.state in (RUNNING, FAILED)
            and records.counts(run.id).pages_done >= run.total_pages):
        finished = records.end_run(run.id, FINISHED, was_failed=True)
    return PageStep(cells, skipped, next_job, None if next_job is None else page_key(prefix, run, next_job), finished)


def end_run(records: Records, end: RunEnd) -> str:
    """Every page job of the run has ended: finished if every page is done,
    else failed. The run's state after (a run cancelled or ended already
    keeps its state)."""
    try:
        run = records.get_run(end.run_id)
    except UnknownRun as exc:
        raise InvalidPageJob(f"backfill run end: {exc}") from None
    if run.state == RUNNING:
        state = FINISHED if records.counts(run.id).pages_done >= run.total_pages else FAILED
        records.end_run(run.id, state)
    return records.get_run(run.id).state
