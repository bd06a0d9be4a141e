"""Actions in one millisecond, on real MySQL and HBase: the index ends as
the last action says."""

from __future__ import annotations

import pytest

from tasks.appdata import contacts
from tasks.appdata.store import AppData, now_ms
from tasks.hbase import ClusterPair
from tasks.typeahead import sync
from tasks.typeahead.index import ContactsIndex
from tasks.typeahead.sources import ADDRESS_BOOK
from tests.typeahead.helpers import differences, found, users


@pytest.fixture
def index(pair: ClusterPair) -> ContactsIndex:
    return ContactsIndex(pair)


def test_two_imports_in_one_millisecond_index_the_second(
    appdata: AppData, pair: ClusterPair, index: ContactsIndex
) -> None:
    (me,) = users(appdata, "Same Ms Importer")
    at = now_ms()
    first = contacts.put_source(appdata, me, "address_book", [{"name": "Carl Old", "email": "carl@example.com"}],
                                at_ms=at)
    second = contacts.put_source(appdata, me, "address_book", [{"name": "Cora New", "email": "cora@example.com"}],
                                 at_ms=at)
    assert (first.updated_at_ms, second.updated_at_ms) == (at, at + 1)
    for cluster in pair:
        sync.source_changed(appdata, cluster, me, ADDRESS_BOOK)
    assert found(index, me, "c") == [("Cora New", "address_book")]
    assert differences(appdata, pair, [me]) == {"primary": 0, "standby": 0}
