# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Celery ships without complete type hints; its calls are untyped.)
"""The typeahead's tasks: thin Celery shells on PinLater queues
(``tasks.typeahead.queues``) over the index's updates, in the worker or
through the Contacts Service (``tasks.typeahead.updates``). Each job names
one cluster; the application enqueues one per cluster (``ContactActions``).

* ``typeahead.update``: a follow/unfollow or an import, set from MySQL
  now; or a page of an account's fix-up after a link or unlink, then the
  next page (keyed like a rename's);
* ``typeahead.rename``: one page of a renamed user's followers or
  followees, then the next page (keyed, so a replayed page never starts a
  second chain);
* ``typeahead.second``: one page of a second_degree recompute after a
  follow or unfollow, then the next page (keyed as a rename's).

Workers import this module because the app's manifest names it (``tasks.typeahead.app``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from celery import shared_task

from tasks.shell import run_job, task_options
from tasks.typeahead import queues
from tasks.typeahead.jobs import (
    InvalidTypeaheadJob,
    RenameJob,
    SecondJob,
    UpdateJob,
    account_fairness_key,
    owner_key,
)
from tasks.typeahead.runtime import runtime
from tasks.typeahead.sources import source_named
from workers.task import PinLaterTask

T = TypeVar("T")


def _options(queue: str) -> dict[str, Any]:
    return task_options(queue, queues.create_options(queue))


def _run(task: PinLaterTask, work: Callable[[], T]) -> T:
    return run_job(task, work, (InvalidTypeaheadJob,))


@shared_task(name="typeahead.update", **_options(queues.UPDATE))
def update(self: PinLaterTask, body: str | bytes) -> int:
    """A follow/unfollow, an import or an account page on one cluster; the cells changed."""

    def work() -> int:
        job = UpdateJob.from_json(body)
        rt = runtime()
        f = job.fields
        if job.op == "follow":
            return rt.updates.follow_changed(job.cluster, f["follower_id"], f["followee_id"], f["at_ms"])
        if job.op == "source":
            return rt.updates.source_changed(job.cluster, f["user_id"], source_named(f["source"]))
        step = rt.updates.account_page(job)
        if step.next_job is not None:
            then = step.next_job
            update.apply_async(args=[then.to_json()], idempotency_key=account_key(rt.store.shard_map.database_prefix,
                                                                                   then),
                               fairness_key=account_fairness_key(then.fields["account"]))
        return step.entries

    return _run(self, work)


def account_key(prefix: str, job: UpdateJob) -> str:
    after = job.after
    return f"{prefix}account:{job.cluster}:{job.fields['change']}:{'' if after is None else f'{after[0]}:{after[1]}'}"


def rename_key(prefix: str, job: RenameJob) -> str:
    users = "" if job.users is None else ":users"
    return f"{prefix}rename:{job.cluster}:{job.user_id}:{job.name_at}:{job.phase}:{job.cursor or ''}{users}"


@shared_task(name="typeahead.rename", **_options(queues.RENAME))
def rename(self: PinLaterTask, body: str | bytes) -> int:
    """One page of a rename on one cluster: its users' job and the next page's
    (keyed, so a replayed page starts neither twice); or a users' job, and
    the second_degree chains of those of them whose followers' lists show
    the name."""

    def work() -> int:
        job = RenameJob.from_json(body)
        rt = runtime()
        step = rt.updates.rename_page(job)
        prefix = rt.store.shard_map.database_prefix
        for then in (step.users_job, step.next_job):
            if then is not None:
                rename.apply_async(args=[then.to_json()], idempotency_key=rename_key(prefix, then),
                                   fairness_key=owner_key(then.user_id))
        for actor in step.second_actors:
            chain = SecondJob.renaming(job.cluster, actor, job.user_id, job.name_at)
            second.apply_async(args=[chain.to_json()], idempotency_key=second_key(prefix, chain),
                               fairness_key=owner_key(actor))
        return step.entries

    return _run(self, work)


def second_key(prefix: str, job: SecondJob) -> str:
    users = "" if job.users is None else ":users"
    return f"{prefix}second:{job.cluster}:{job.user_id}:{job.change}:{job.cursor or ''}{users}"


@shared_task(name="typeahead.second", **_options(queues.SECOND))
def second(self: PinLaterTask, body: str | bytes) -> int:
    """One page of a second_degree recompute on one cluster: its users' job
    and the next page's (keyed, so a replayed page starts neither twice)."""

    def work() -> int:
        job = SecondJob.from_json(body)
        rt = runtime()
        step = rt.updates.second_page(job)
        prefix = rt.store.shard_map.database_prefix
        for then in (step.users_job, step.next_job):
            if then is not None:
                second.apply_async(args=[then.to_json()], idempotency_key=second_key(prefix, then),
                                   fairness_key=owner_key(then.user_id))
        return step.entries

    return _run(self, work)
