"""Trims on the real servers: a row capped at the cap keeps its newest
pins, the deletes mask every version of the trimmed columns written until
then, and a sweep finds the long rows."""

from __future__ import annotations

import uuid

from tasks.appdata.ids import ObjectType, make_id
from tasks.feeds.cells import TABLE, column, row_key
from tasks.feeds.trim import apply_trim, sweep_page, trim_deletes
from tasks.hbase import ClusterPair, put_versions
from tests.feeds.helpers import feeds, tick

BASE = 1_650_000_000_000


def fresh_user() -> int:
    """A user id no other test writes to (these tests need no app data)."""
    return make_id(1, ObjectType.USER, uuid.uuid4().int % (2**36 - 2) + 1)


def fill(pair: ClusterPair, user: int, count: int) -> list[int]:
    """``count`` pins put as one follow (version BASE) would, plus the 3
    oldest again under a second, later follow: the newest pin ids first."""
    pins = [(BASE + i * 1000, make_id(2, ObjectType.PIN, 10_000 + i)) for i in range(count)]
    later = tick()
    for pool in pair:
        put_versions(pool, TABLE, [(row_key(user), column(c, p), b"", BASE) for c, p in pins])
        put_versions(pool, TABLE, [(row_key(user), column(c, p), b"", later) for c, p in pins[:3]])
    return [pin_id for _, pin_id in reversed(pins)]


def test_trim_caps_the_row_and_keeps_the_newest(pair: ClusterPair) -> None:
    user = fresh_user()
    newest_first = fill(pair, user, 12)
    deletes = trim_deletes(pair, "primary", user, cap=5, page=3)  # 7 excess columns: pages of 3, 3, 1
    assert len(deletes) == 7 and all(kind == "upto" and row == row_key(user) for row, _c, _ts, kind in deletes)
    # Each page's columns up to its newest version: the page holding the
    # oldest three (also under the later follow) goes up to that follow's.
    assert sorted({ts for _r, _c, ts, _k in deletes}) == [BASE, max(ts for _r, _c, ts, _k in deletes)]
    assert max(ts for _r, _c, ts, _k in deletes) > BASE
    assert sum(apply_trim(pair, cluster, user, 5, page=3) for cluster in ("primary", "standby")) == 14
    assert feeds(pair, user) == newest_first[:5]
    # At the cap there is nothing to do.
    assert trim_deletes(pair, "primary", user, 5) == []
    assert len(trim_deletes(pair, "primary", user, 0, page=100)) == 5


def test_sweep_finds_rows_over_the_cap(pair: ClusterPair) -> None:
    long_rows = sorted(fresh_user() for _ in range(3))
    short_row = fresh_user()
    for u in long_rows:
        fill(pair, u, 6)
    fill(pair, short_row, 4)  # 4 columns: at the cap, not over
    found: list[int] = []
    cursor: str | None = None
    pages = 0
    while True:
        page = sweep_page(pair, "standby", cursor, cap=4, rows=2)
        found.extend(page.users)
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
        assert pages < 1000
    assert set(long_rows) <= set(found) and short_row not in found
    assert found == sorted(found) and len(found) == len(set(found))
