"""The work of the typeahead's jobs, as plain functions of the app data and
one cluster (the Celery tasks in ``tasks.typeahead.tasks`` are shells over
these; tests call them directly too).

Every function reads the truth in MySQL when it runs, not from its job
body, so jobs run late, twice or out of order still write the newest
state; the versions (``tasks.typeahead.truth``) make an older write lose.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tasks.appdata import mappings
from tasks.appdata.store import AppData
from tasks.appdata.tables import USER_FOLLOWED_BY_USER, USER_FOLLOWS_USER
from tasks.hbase import ClusterPool
from tasks.hbase.reads import get_rows
from tasks.typeahead import truth
from tasks.typeahead.entries import MEMBER_FAMILY, WIDE_TABLE, row_prefix
from tasks.typeahead.jobs import RenameJob
from tasks.typeahead.sources import Schema, Source
from tasks.typeahead.writer import Removal, apply, put_entries


def follow_changed(store: AppData, pool: ClusterPool, follower: int, followee: int, at_ms: int) -> int:
    """A follow or unfollow at ``at_ms``: the follower's following, the
    followee's followers and both mutuals set to what MySQL says now."""
    slots = truth.follow_slots(store, follower, followee, at_ms)
    sets = [s.entry for s in slots if s.entry is not None]
    removals = [Removal(s.owner, s.source, s.key, s.gone_at, s.tokens) for s in slots if s.entry is None]
    return apply(pool, sets, removals)


def source_changed(store: AppData, pool: ClusterPool, owner: int, source: Source) -> int:
    """``owner``'s import of ``source`` put in the index: its contacts set,
    contacts no longer in it removed, all at the import's time."""
    if source.schema is not Schema.WIDE:
        raise ValueError(f"imported source {source.name} must use the wide schema")
    entries, at = truth.import_of(store, owner, source)
    if at is None:
        return 0
    row = row_prefix(owner, source)
    stored = get_rows(pool, WIDE_TABLE, [row], columns=[MEMBER_FAMILY.rstrip(b":")]).get(row, {})
    kept = {e.key for e in entries}
    gone = {column[len(MEMBER_FAMILY):].decode() for column in stored} - kept
    return apply(pool, entries, [Removal(owner, source, key, at) for key in sorted(gone)])


@dataclass(frozen=True, slots=True)
class RenameStep:
    entries: int
    next_job: RenameJob | None


def rename_page(store: AppData, pool: ClusterPool, job: RenameJob, page_size: int) -> RenameStep:
    """One page of a renamed user's followers (then followees): the user's
    entries in their indexes rewritten with its current name, old tokens
    deleted. The next page's job, or None after the last."""
    table = USER_FOLLOWED_BY_USER if job.phase == "followers" else USER_FOLLOWS_USER
    page = mappings.page(store, table, job.user_id, limit=page_size, cursor=job.cursor)
    entries = truth.rename_entries(store, job.user_id, page.edges, job.phase)
    written = apply(pool, entries) if entries else 0
    if page.next is not None:
        return RenameStep(written, RenameJob(job.cluster, job.user_id, job.name_at, job.phase, page.next.encode()))
    if job.phase == "followers":
        return RenameStep(written, RenameJob(job.cluster, job.user_id, job.name_at, "following", None))
    return RenameStep(written, None)


def rebuild(store: AppData, pool: ClusterPool, owners: Sequence[int]) -> int:
    """Every entry of ``owners`` put from the truth (a backfill page). Blind
    puts: stale cells are the verify pass's to find."""
    entries = truth.entries_of_owners(store, owners)
    return put_entries(pool, [e for owner in owners for e in entries[owner]])
