"""Trims on the real servers: a row capped at the cap keeps its newest
pins, the deletes mask cells written at any earlier time, and a sweep
finds the long rows."""

from __future__ import annotations

import uuid

from tasks.appdata.ids import ObjectType, make_id
from tasks.feeds.cells import qualifier
from tasks.feeds.trim import sweep_page, trim_writes
from tasks.feeds.writes import WriteBody, make_bodies
from tasks.hbase import ClusterPair
from tests.feeds.helpers import apply_all, feeds, tick

BASE = 1_650_000_000_000


def fresh_user() -> int:
    """A user id no other test writes to (these tests need no app data)."""
    return make_id(1, ObjectType.USER, uuid.uuid4().int % (2**36 - 2) + 1)


def fill(pair: ClusterPair, user: int, count: int) -> list[int]:
    """``count`` pins, fanned out at their creation times, plus the 3 oldest
    again as a follow would put them (at a later action time): the newest
    pin ids first."""
    pins = [(BASE + i * 1000, make_id(2, ObjectType.PIN, 10_000 + i)) for i in range(count)]
    for created, pin_id in pins:
        apply_all(pair, make_bodies("put", [user], [qualifier(created, pin_id)], created), via_json=False)
    apply_all(pair, make_bodies("put", [user], [qualifier(c, p) for c, p in pins[:3]], tick()), via_json=False)
    return [pin_id for _, pin_id in reversed(pins)]


def trim_both(pair: ClusterPair, user: int, cap: int, page: int) -> list[WriteBody]:
    bodies = [b for cluster in ("primary", "standby") for b in trim_writes(pair, cluster, user, cap, page=page)]
    apply_all(pair, bodies)
    return bodies


def test_trim_caps_the_row_and_keeps_the_newest(pair: ClusterPair) -> None:
    user = fresh_user()
    newest_first = fill(pair, user, 12)
    bodies = trim_both(pair, user, cap=5, page=3)  # 7 excess columns: pages of 3, 3, 1 per cluster
    assert [len(b.columns) for b in bodies if b.cluster == "primary"] == [3, 3, 1]
    assert all(b.op == "delete" and b.rows == (user,) for b in bodies)
    assert feeds(pair, user) == newest_first[:5]
    # The oldest three were re-put by a follow at a later time: the delete of
    # their page carries that time, so they are masked too.
    assert max(b.timestamp for b in bodies) > BASE + 12 * 1000
    # At the cap there is nothing to do.
    assert trim_writes(pair, "primary", user, 5) == []
    assert len(trim_writes(pair, "primary", user, 0, page=100)[0].columns) == 5


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
