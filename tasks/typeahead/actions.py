"""What application code calls when a user's contacts change: MySQL is
written first (the truth), then a typeahead job per cluster is enqueued
through any PinLater client (in-process or Thrift). With ``feeds``, a
follow also goes through ``FeedActions`` (its feed job too).

    actions = ContactActions(store, client, feeds=FeedActions(store, client))
    actions.follow(user, other_user)
    actions.rename(user, "Ann Lee")
    actions.connect_source(user, "address_book", [{"name": "Bo", "email": "bo@example.com"}])
    actions.link_account("email:bo@example.com", bo)  # Bo's entries in every address book: Bo's user

An action whose enqueue failed raises after MySQL changed: the caller
retries it (a job enqueued twice writes the same cells).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from pinlater.client_api import PinLaterClient
from pinlater.models import Job
from tasks.appdata import contacts, graph
from tasks.appdata.store import AppData, now_ms
from tasks.feeds.actions import FeedActions
from tasks.typeahead import queues
from tasks.typeahead.jobs import CLUSTERS, RenameJob, SecondJob, UpdateJob, account_fairness_key, owner_key
from tasks.typeahead.sources import IMPORTED, UnknownSource, source_named
from tasks.typeahead.tasks import rename_key, second_key


class ContactActions:
    def __init__(self, store: AppData, client: PinLaterClient, *, feeds: FeedActions | None = None) -> None:
        self.store = store
        self.client = client
        self.feeds = feeds
        self._queues_ready = False

    def ensure_queues(self) -> None:
        for name in queues.ALL:
            self.client.create_queue(name, **queues.create_options(name))
        self._queues_ready = True

    def _enqueue(self, queue: str, bodies: Sequence[str], fairness: str) -> list[str]:
        """The jobs, under the fairness key ``fairness`` (``owner_key`` of
        the user whose index they change, ``account_fairness_key``), so
        that one burst (a big import, a celebrity's follows) takes turns
        with everyone else's updates."""
        if not self._queues_ready:
            self.ensure_queues()
        return [self.client.enqueue(queue, [Job(body.encode(), key=fairness)])[0] for body in bodies]

    # -- the follow graph -----------------------------------------------------------
    def follow(self, follower_id: int, followee_id: int, *, at_ms: int | None = None) -> bool:
        """``follower_id`` follows the user ``followee_id``; True if new."""
        at = now_ms() if at_ms is None else at_ms
        if self.feeds is not None:
            added = self.feeds.follow(follower_id, followee_id, at_ms=at)
        else:
            added = graph.follow_user(self.store, follower_id, followee_id, at_ms=at)
        self.enqueue_follow(follower_id, followee_id, at)
        return added

    def unfollow(self, follower_id: int, followee_id: int, *, at_ms: int | None = None) -> bool:
        # From the follower's clock: after their follow, before any later one
        # (a removal at this time never masks a follow that comes after it),
        # and past the followee's clock and both names, so after every
        # version of the entries it removes (a mutual one has the followee's
        # follow time too).
        at = graph.unfollow_clock(self.store, follower_id, followee_id, at_ms)
        if self.feeds is not None:
            removed = self.feeds.unfollow(follower_id, followee_id, at_ms=at)
        else:
            removed = graph.unfollow_user(self.store, follower_id, followee_id)
        self.enqueue_follow(follower_id, followee_id, at)
        return removed

    def enqueue_follow(self, follower_id: int, followee_id: int, at_ms: int) -> list[str]:
        """Only the index jobs of a follow or unfollow (the graph already
        changed): its places, then the follower's second_degree contacts
        and its followers' (a chain per cluster)."""
        jobs = [UpdateJob.follow(c, follower_id, followee_id, at_ms).to_json() for c in CLUSTERS]
        ids = self._enqueue(queues.UPDATE, jobs, owner_key(follower_id))
        prefix = self.store.shard_map.database_prefix
        for job in (SecondJob.started(c, follower_id, at_ms) for c in CLUSTERS):
            ids += self.client.enqueue(queues.SECOND, [Job(job.to_json().encode(), key=owner_key(follower_id))],
                                       idempotency_key=second_key(prefix, job))
        return ids

    # -- names ----------------------------------------------------------------------
    def rename(self, user_id: int, name: str, *, at_ms: int | None = None) -> tuple[str, str, int]:
        """Sets the user's name, then starts the chained rename jobs that
        rewrite it in every index holding the user; ``(old, new, name_at)``."""
        old, new, name_at = graph.rename_user(self.store, user_id, name, at_ms=at_ms)
        self.enqueue_rename(user_id, name_at)
        return old, new, name_at

    def enqueue_rename(self, user_id: int, name_at: int) -> list[str]:
        jobs = [RenameJob(c, user_id, name_at) for c in CLUSTERS]
        prefix = self.store.shard_map.database_prefix
        if not self._queues_ready:
            self.ensure_queues()
        return [
            self.client.enqueue(queues.RENAME, [Job(j.to_json().encode(), key=owner_key(user_id))],
                                idempotency_key=rename_key(prefix, j))[0]
            for j in jobs
        ]

    # -- imported sources -----------------------------------------------------------
    def connect_source(
        self, user_id: int, source: str, contact_list: object, *, at_ms: int | None = None
    ) -> contacts.SourceImport:
        """Stores an import (connecting or refreshing ``source``), then its index jobs."""
        if source_named(source) not in IMPORTED:
            raise UnknownSource(f"{source!r} is not an imported source; those are {[s.name for s in IMPORTED]}")
        imp = contacts.put_source(self.store, user_id, source, contact_list, at_ms=at_ms)
        self._enqueue(queues.UPDATE, [UpdateJob.source(c, user_id, source).to_json() for c in CLUSTERS],
                      owner_key(user_id))
        return imp

    # -- external accounts ----------------------------------------------------------
    def link_account(self, account: str, user_id: int) -> list[str]:
        """``account`` ("email:ann@example.com", "social:12345") is
        ``user_id``'s from now on; then the jobs that give every imported
        contact naming it that user (a page of importers a job)."""
        contacts.link_account(self.store, account, user_id)
        return self.enqueue_account(account)

    def unlink_account(self, account: str) -> bool:
        """``account`` is nobody's any more (its contacts lose their user);
        False if it was not linked (the jobs run either way: a retried
        unlink must still fix the entries)."""
        removed = contacts.unlink_account(self.store, account)
        self.enqueue_account(account)
        return removed

    def enqueue_account(self, account: str) -> list[str]:
        """Only the fix-up jobs of a link or unlink (MySQL already changed)."""
        change = uuid.uuid4().hex
        jobs = [UpdateJob.account(c, account, change).to_json() for c in CLUSTERS]
        return self._enqueue(queues.UPDATE, jobs, account_fairness_key(account))
