"""The typeahead's HBase tables: the contacts index (docs/typeahead.md;
layout in ``tasks.typeahead.entries``).

Wide rows per (user, source) with token columns "c" and member records "m",
and tall rows per (user, source, token, contact) for huge sources. Member
records and tall token cells keep every version, for the same reason as the
feed. A lookup reads one user's wide rows (a few KB: 16 KB blocks) or up to
a hundred consecutive tall rows (64 KB blocks). The families lookups read are
prefetched when a store file opens: a compaction's new file is otherwise
read from disk by the lookups that follow it, a celebrity's most of all.
"""

from __future__ import annotations

from tasks.appdata.ids import ObjectType, make_id
from tasks.hbase.cells import ALL_VERSIONS
from tasks.hbase.tables import Family, TableDef

# A region per shard of the default shard map's four, as the feed's: a
# shard's owners are one range of rows. The keys are ``entries.owner_key``'s,
# written out: that module reads this one.
_SPLITS = tuple(make_id(shard, ObjectType.USER, 1).to_bytes(8, "big") for shard in (1, 2, 3))

TYPEAHEAD_WIDE = TableDef(
    "typeahead_wide",
    (Family("c", block_size=16 * 1024, prefetch_blocks_on_open=True),
     Family("m", max_versions=ALL_VERSIONS, block_size=16 * 1024)),
    splits=_SPLITS,
)
# Row per user: ``s:l`` its second_degree contacts with their names
# (``tasks.typeahead.second``); one version.
TYPEAHEAD_SECOND = TableDef("typeahead_second", (Family("s", block_size=16 * 1024, prefetch_blocks_on_open=True),),
                            splits=_SPLITS)
TYPEAHEAD_TALL = TableDef("typeahead_tall", (Family("c", max_versions=ALL_VERSIONS, prefetch_blocks_on_open=True),),
                          splits=_SPLITS)


def defined_tables() -> tuple[TableDef, ...]:
    """The app's tables (its manifest's ``tables``)."""
    return (TYPEAHEAD_WIDE, TYPEAHEAD_TALL, TYPEAHEAD_SECOND)
