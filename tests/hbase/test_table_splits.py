"""The feed's and the typeahead's tables start a region at each shard's
first user, in the keys their writers make."""

from __future__ import annotations

import bisect

from tasks.appdata.ids import ObjectType, make_id
from tasks.feeds.cells import row_key
from tasks.feeds.tables import FOLLOWING_FEED, feed_table
from tasks.typeahead.entries import owner_key
from tasks.typeahead.tables import TYPEAHEAD_TALL, TYPEAHEAD_WIDE


def test_splits_are_the_writers_keys_of_each_shards_first_user() -> None:
    firsts = [make_id(shard, ObjectType.USER, 1) for shard in (1, 2, 3)]
    assert FOLLOWING_FEED.splits == tuple(row_key(user) for user in firsts)
    assert feed_table(50).splits == FOLLOWING_FEED.splits
    assert TYPEAHEAD_WIDE.splits == TYPEAHEAD_TALL.splits == tuple(owner_key(user) for user in firsts)


def test_a_shards_users_share_one_region() -> None:
    for splits, key in ((FOLLOWING_FEED.splits, row_key), (TYPEAHEAD_WIDE.splits, owner_key)):
        assert list(splits) == sorted(splits)
        for shard in range(4):
            users = [make_id(shard, kind, local) for kind in (ObjectType.USER, ObjectType.PIN)
                     for local in (1, 2, 10**6, 2**36 - 1)]
            assert {bisect.bisect_right(splits, key(user)) for user in users} == {shard}
