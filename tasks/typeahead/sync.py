"""The work of the typeahead's jobs, as plain functions of the app data and
one cluster (the Celery tasks in ``tasks.typeahead.tasks`` are shells over
these; tests call them directly too).

Each names the places (owner, source, contact) an event may have changed
and settles them (``tasks.typeahead.writer.settle``): what they hold is
read from MySQL when the job runs, never from its body, so a job that runs
late, twice, or beside others leaves every place as the truth says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tasks.appdata import contacts, mappings
from tasks.appdata.accountcache import AccountCache
from tasks.appdata.store import AppData, now_ms
from tasks.appdata.tables import USER_FOLLOWED_BY_USER, USER_FOLLOWS_USER
from tasks.hbase import ClusterPool
from tasks.hbase.reads import get_rows
from tasks.typeahead import second, truth
from tasks.typeahead.entries import MEMBER_FAMILY, WIDE_TABLE, row_prefix
from tasks.typeahead.jobs import RenameJob, SecondJob, UpdateJob
from tasks.typeahead.sources import Schema, Source
from tasks.typeahead.truth import Place, Slot
from tasks.typeahead.writer import held_members, read_members, settle


def follow_changed(store: AppData, pool: ClusterPool, follower: int, followee: int, at_ms: int) -> int:
    """A follow or unfollow at ``at_ms``: the follower's following, the
    followee's followers and both mutuals."""
    return settle(store, pool, truth.follow_places(follower, followee), at_ms=at_ms)


def source_changed(store: AppData, pool: ClusterPool, owner: int, source: Source,
                   accounts: AccountCache | None = None) -> int:
    """``owner``'s import of ``source``: its contacts, and the contacts the
    cluster holds that it no longer has. ``accounts``: the id lookups of
    the first read of the truth (the check after writing asks MySQL)."""
    if source.schema is not Schema.WIDE:
        raise ValueError(f"imported source {source.name} must use the wide schema")
    row = row_prefix(owner, source)
    stored = get_rows(pool, WIDE_TABLE, [row], columns=[MEMBER_FAMILY.rstrip(b":")]).get(row, {})
    held = [(owner, source, column[len(MEMBER_FAMILY):].decode()) for column in stored]
    places = list(dict.fromkeys(truth.import_places(store, owner, source) + held))
    if accounts is None:
        return settle(store, pool, places)
    read_at = now_ms()
    want = truth.slots(store, places, resolve=accounts.resolve)
    return settle(store, pool, places, first=(read_at, want, read_members(pool, places)))


@dataclass(frozen=True, slots=True)
class AccountStep:
    entries: int
    next_job: UpdateJob | None  # the next page (None after the last)


def account_page(store: AppData, pool: ClusterPool, job: UpdateJob, page_size: int,
                 accounts: AccountCache | None = None) -> AccountStep:
    """A page of an account's fix-up after it was linked or unlinked: the
    contacts naming it in a page of the imports that did, settled from
    MySQL (never from ``accounts``, which forgets the account first), and
    the job of the next page."""
    account = job.fields["account"]
    if accounts is not None:
        accounts.forget([account])
    page = contacts.importers(store, account, after=job.after, limit=page_size)
    places = truth.account_places(store, account, page)
    entries = settle(store, pool, places) if places else 0
    return AccountStep(entries, job.next_page(page[-1]) if len(page) == page_size else None)


@dataclass(frozen=True, slots=True)
class RenameStep:
    entries: int
    users_job: RenameJob | None  # the page's users, to settle
    next_job: RenameJob | None  # the next page
    # Followers whose follows count the renamed user: their followers'
    # second_degree lists show its name, and are recomputed.
    second_actors: tuple[int, ...] = ()


def rename_page(store: AppData, pool: ClusterPool, job: RenameJob, page_size: int,
                limits: second.Limits = second.DEFAULT_LIMITS) -> RenameStep:
    """A page job of a rename reads a page of the renamed user's followers
    (then followees) and names two jobs: its users', which settles the places
    holding the user in their indexes, with its current name; and the next
    page's (None after the last). A users' job settles its places; one of
    followers also names those whose followers' second_degree lists may
    show the user."""
    if job.users is not None:
        entries = settle(store, pool, truth.rename_places(job.user_id, job.users, job.phase))
        actors = second.rename_actors(store, job.user_id, job.users, limits) if job.phase == "followers" else []
        return RenameStep(entries, None, None, tuple(actors))
    table = USER_FOLLOWED_BY_USER if job.phase == "followers" else USER_FOLLOWS_USER
    page = mappings.page(store, table, job.user_id, limit=page_size, cursor=job.cursor)
    users_job = replace(job, users=tuple(page.ids)) if page.ids else None
    if page.next is not None:
        return RenameStep(0, users_job, replace(job, cursor=page.next.encode()))
    if job.phase == "followers":
        return RenameStep(0, users_job, replace(job, phase="following", cursor=None))
    return RenameStep(0, users_job, None)


@dataclass(frozen=True, slots=True)
class SecondStep:
    entries: int
    users_job: SecondJob | None  # the page's users, to recompute
    next_job: SecondJob | None  # the next page


def second_page(store: AppData, pool: ClusterPool, job: SecondJob, page_size: int, limits: second.Limits
                ) -> SecondStep:
    """A job of a second_degree chain after ``job.user_id`` followed or
    unfollowed someone (or someone it follows was renamed): the first
    recomputes the user's own list, then each reads a page of its
    followers and names two jobs, the page's users' (which recomputes
    theirs) and the next page's (None after the last)."""
    if job.users is not None:
        return SecondStep(second.settle(store, pool, job.users, limits), None, None)
    # A rename's chain skips the actor's own list: it follows the renamed user, so never lists them.
    own = job.cursor is None and job.renamed is None
    entries = second.settle(store, pool, [job.user_id], limits) if own else 0
    page = mappings.page(store, USER_FOLLOWED_BY_USER, job.user_id, limit=page_size, cursor=job.cursor)
    users_job = replace(job, users=tuple(page.ids)) if page.ids else None
    next_job = replace(job, cursor=page.next.encode()) if page.next is not None else None
    return SecondStep(entries, users_job, next_job)


def rebuild_second(store: AppData, pool: ClusterPool, owners: Sequence[int], limits: second.Limits) -> int:
    """The second_degree lists of ``owners`` (a backfill page, a repair)."""
    return second.settle(store, pool, owners, limits)


def rebuild(store: AppData, pool: ClusterPool, owners: Sequence[int], accounts: AccountCache | None = None) -> int:
    """Every place of ``owners`` settled (a backfill page): those the truth
    fills and those the cluster holds, so a page run again after its worker
    died also revisits what the first run wrote. The truth is read a whole
    owner at a time (a page's places are all of its owners' places): the
    read that names the places is step 1's truth too, and step 3 asks
    MySQL whether the owners' records are still those (``truth.unchanged``)
    rather than looking up each place, and reads them again (building
    their entries again only if what it read differs) when they are not.
    Likewise the one
    read of every member record the owners have on the cluster names the
    places it holds and is step 1's read of them. ``accounts``: the id
    lookups of that first read (every later one asks MySQL)."""
    def read(places: Sequence[Place]) -> dict[Place, Slot]:
        if last[0] is found and places == first_places and truth.unchanged(store, found.records):
            return first_slots
        # The whole page again, also for a later round's few places: the
        # same owners read the same records when nothing changed, and then
        # step 1's slots are the answer for step 1's places.
        records = truth.read_owners(store, owners)
        if records != last[0].records:
            last[0] = truth.truth_of(records)
        elif last[0] is found and places == first_places:
            return first_slots
        return last[0].slots(places)

    owners = list(dict.fromkeys(owners))  # an owner named twice is read and settled once
    read_at = now_ms()
    found = truth.owners_truth(store, owners, contacts.resolve_accounts if accounts is None else accounts.resolve)
    last = [found]  # the latest truth read: records equal to its make the same entries
    held = held_members(pool, owners)
    first_places = list(dict.fromkeys(found.places() + list(held)))
    first_slots = found.slots(first_places)
    return settle(store, pool, first_places, read_truth=read, first=(read_at, first_slots, held))
