"""Helpers of the typeahead tests: users with chosen names, and what a
lookup returns, in a form easy to compare."""

from __future__ import annotations

from tasks.appdata import graph
from tasks.appdata.store import AppData
from tasks.hbase import PRIMARY, STANDBY, ClusterPair
from tasks.typeahead import verify
from tasks.typeahead.index import ContactsIndex


def users(store: AppData, *names: str) -> list[int]:
    return [graph.create_user(store, {"name": name}).id for name in names]


def found(index: ContactsIndex, user: int, query: str, limit: int = 10) -> list[tuple[str, str]]:
    """``(name, source)`` of each result, in rank order."""
    return [(m.contact.name, m.source) for m in index.lookup(user, query, limit).matches]


def differences(store: AppData, pair: ClusterPair, owners: list[int]) -> dict[str, int]:
    return {cluster: len(verify.diff(store, pair[cluster], owners)) for cluster in (PRIMARY, STANDBY)}
