"""Helpers of the typeahead tests: users with chosen names, what a lookup
returns, in a form easy to compare, and graph changes synced to both
clusters as the tasks sync them."""

from __future__ import annotations

from tasks.appdata import graph
from tasks.appdata.store import AppData, now_ms
from tasks.hbase import PRIMARY, STANDBY, ClusterPair
from tasks.typeahead import sync, verify
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.jobs import RenameJob


def users(store: AppData, *names: str) -> list[int]:
    return [graph.create_user(store, {"name": name}).id for name in names]


def found(index: ContactsIndex, user: int, query: str, limit: int = 10) -> list[tuple[str, str]]:
    """``(name, source)`` of each result, in rank order."""
    return [(m.contact.name, m.source) for m in index.lookup(user, query, limit).matches]


def differences(store: AppData, pair: ClusterPair, owners: list[int]) -> dict[str, int]:
    return {cluster: len(verify.diff(store, pair[cluster], owners)) for cluster in (PRIMARY, STANDBY)}


def follow(store: AppData, pair: ClusterPair, a: int, b: int, at: int | None = None) -> int:
    at = at or now_ms()
    graph.follow_user(store, a, b, at_ms=at)
    for cluster in pair:
        sync.follow_changed(store, cluster, a, b, at)
    return at


def unfollow(store: AppData, pair: ClusterPair, a: int, b: int, at: int | None = None) -> int:
    at = at or now_ms()
    graph.unfollow_user(store, a, b)
    for cluster in pair:
        sync.follow_changed(store, cluster, a, b, at)
    return at


def rename(store: AppData, pair: ClusterPair, user: int, name: str, page: int = 2, at: int | None = None) -> int:
    """The user renamed (at ``at``, else now) and the rename's pages of
    ``page`` users run on both clusters; the name's ``name_at``."""
    name_at = graph.rename_user(store, user, name, at_ms=at)[2]
    for cluster in pair:
        todo: list[RenameJob] = [RenameJob(cluster.name, user, name_at)]
        while todo:
            step = sync.rename_page(store, cluster, todo.pop(), page)
            todo += [job for job in (step.users_job, step.next_job) if job is not None]
    return name_at
