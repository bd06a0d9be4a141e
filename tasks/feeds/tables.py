"""The feed's HBase table.

The following feed (Pinterest's HBase feed paper): one row per user, wide:
family "feed", one column per pin, qualifier = reverse creation time + pin
id, empty value; cell timestamps are the time of the action that wrote them.
Its writers keep several versions of one column alive at once and delete
single versions, so the family keeps every version: with VERSIONS=1 a flush
drops the older versions a delete of the newest one should uncover. Keys are
nearly all shared prefix (the row, then a time), so FAST_DIFF shrinks the
table several times; 16 KB blocks hold about one user's feed, so the cache
holds and evicts whole feeds (docs/hbase.md has the measurements).
Its rows are capped inside compactions by ``FEED_TRIM_OBSERVER``
(docs/feeds.md); the cap here is the default of PINLATER_FEED_CAP, which
``feed_table`` sets.
"""

from __future__ import annotations

from tasks.appdata.ids import ObjectType, make_id
from tasks.feeds.settings import FeedSettings
from tasks.hbase.cells import ALL_VERSIONS
from tasks.hbase.tables import FEED_TRIM_OBSERVER, TRIM_CAP_ATTRIBUTE, Family, TableDef

DEFAULT_FEED_CAP = 1000

FOLLOWING_FEED = TableDef(
    "following_feed",
    (Family("feed", max_versions=ALL_VERSIONS, data_block_encoding="FAST_DIFF", block_size=16 * 1024),),
    coprocessor=FEED_TRIM_OBSERVER,
    values=((TRIM_CAP_ATTRIBUTE, str(DEFAULT_FEED_CAP)),),
    # A region per shard of the default shard map's four: a shard's users
    # are one range of rows (the shard is an id's top bits). The keys are
    # ``cells.row_key``'s, written out: that module reads this one.
    splits=tuple(b"%019d" % make_id(shard, ObjectType.USER, 1) for shard in (1, 2, 3)),
)


def feed_table(cap: int) -> TableDef:
    """The feed table's definition with ``cap`` as its compaction-time cap."""
    if type(cap) is not int or cap < 1:
        raise ValueError(f"feed cap must be an int >= 1, got {cap!r}")
    return FOLLOWING_FEED.with_values(**{TRIM_CAP_ATTRIBUTE: str(cap)})


def defined_tables() -> tuple[TableDef, ...]:
    """The app's tables as configured: the feed's with ``PINLATER_FEED_CAP``
    (its manifest's ``tables``)."""
    return (feed_table(FeedSettings.from_env().cap),)
