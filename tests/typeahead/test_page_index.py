"""The search page over the real contacts index (both HBase clusters, the
app data on MariaDB): contacts followed and mutual, kept in sync by the
plain sync functions, shown in the order and with the sources the endpoint
answers, as you type."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tasks.appdata import graph
from tasks.appdata.store import AppData, now_ms
from tasks.hbase import ClusterPair
from tasks.typeahead import sync
from tasks.typeahead.http import TypeaheadServer
from tasks.typeahead.index import ContactsIndex
from tests.typeahead.helpers import users
from tests.typeahead.pages import open_page, type_and_wait


def follow(store: AppData, pair: ClusterPair, a: int, b: int) -> None:
    at = now_ms()
    graph.follow_user(store, a, b, at_ms=at)
    for cluster in pair:
        sync.follow_changed(store, cluster, a, b, at)


@pytest.fixture
def indexed_server(pair: ClusterPair) -> Iterator[TypeaheadServer]:
    server = TypeaheadServer(ContactsIndex(pair).lookup, "127.0.0.1", 0, request_timeout_s=10.0).start()
    yield server
    server.stop()


def test_typing_shows_the_index_answer(
    appdata: AppData, pair: ClusterPair, indexed_server: TypeaheadServer, browser_context: Any
) -> None:
    owner, *others = users(appdata, "Page Owner", "John Smith", "John Michael Smith", "Smith John", "Johnny Smithers",
                           "Jo March", "Jane Doe")
    for other in others:
        follow(appdata, pair, owner, other)
    follow(appdata, pair, others[1], owner)  # John Michael Smith: mutual
    with open_page(browser_context, indexed_server, owner) as page:
        rows = type_and_wait(page, indexed_server, owner, "jo")
        assert {name for name, _, _ in rows} == {"John Smith", "John Michael Smith", "Smith John", "Johnny Smithers",
                                                  "Jo March"}
        rows = type_and_wait(page, indexed_server, owner, "john s")
        assert rows[0] == ("John Michael Smith", "mutual", "also in: following, followers")
        # In order with prefixes (0.54) edges out reordered with one exact token (0.535).
        assert [name for name, _, _ in rows] == ["John Michael Smith", "John Smith", "Johnny Smithers", "Smith John"]
