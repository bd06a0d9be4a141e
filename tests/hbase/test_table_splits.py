"""A table definition's split keys reach HBase's createTable; the feed's and
the typeahead's tables define none (docs/hbase.md says why)."""

from __future__ import annotations

from tasks.feeds.tables import FOLLOWING_FEED, feed_table
from tasks.hbase.tables import Family, TableDef
from tasks.typeahead.tables import TYPEAHEAD_TALL, TYPEAHEAD_WIDE


def test_the_apps_tables_are_created_in_one_region() -> None:
    assert FOLLOWING_FEED.splits == feed_table(50).splits == ()
    assert TYPEAHEAD_WIDE.splits == TYPEAHEAD_TALL.splits == ()


def test_a_definition_keeps_its_split_keys() -> None:
    table = TableDef("t", (Family("f"),), splits=(b"1", b"2"))
    assert table.splits == (b"1", b"2") and table.with_values(a="b").splits == (b"1", b"2")
