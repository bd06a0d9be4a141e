"""Mapping tables: add/remove/exists/count, stable cursor walks, most recent
N, and the follow graph with its reverse rows."""

from __future__ import annotations

import random

import pytest

from tasks.appdata import graph, mappings, objects
from tasks.appdata.ids import InvalidId, ObjectType
from tasks.appdata.mappings import Cursor
from tasks.appdata.sql import Digest
from tasks.appdata.store import AppData
from tasks.appdata.tables import (
    BOARD_FOLLOWED_BY_USER,
    USER_FOLLOWED_BY_USER,
    USER_FOLLOWS_USER,
)

T0 = 1_750_000_000_000


def _users(appdata: AppData, n: int) -> list[int]:
    ids: list[int] = []
    for shard in range(4):
        ids += objects.create_many(appdata, ObjectType.USER, shard, [(T0, {"i": i}) for i in range(n // 4 + 1)])
    random.Random(n).shuffle(ids)
    return ids[:n]


def test_add_remove_exists_count(appdata: AppData) -> None:
    a, b, c = _users(appdata, 3)
    assert mappings.add(appdata, USER_FOLLOWS_USER, a, b, 5)
    assert not mappings.add(appdata, USER_FOLLOWS_USER, a, b, 9)  # there: keeps sequence 5
    assert mappings.page(appdata, USER_FOLLOWS_USER, a, limit=10).edges == [mappings.Edge(b, 5)]
    assert mappings.exists(appdata, USER_FOLLOWS_USER, a, b)
    assert not mappings.exists(appdata, USER_FOLLOWS_USER, b, a)  # one direction only
    assert mappings.add_many(appdata, USER_FOLLOWS_USER, [(a, c, 6), (a, b, 7)]) == 1
    assert mappings.count(appdata, USER_FOLLOWS_USER, a) == 2
    assert mappings.existing(appdata, USER_FOLLOWS_USER, a, [c, b, a]) == {b, c}
    assert mappings.remove(appdata, USER_FOLLOWS_USER, a, b)
    assert not mappings.remove(appdata, USER_FOLLOWS_USER, a, b)
    assert mappings.count(appdata, USER_FOLLOWS_USER, a) == 1
    board = graph.create_board(appdata, a, {})
    with pytest.raises(InvalidId):
        mappings.add(appdata, USER_FOLLOWS_USER, a, board.id, 1)  # a board is not a user
    with pytest.raises(ValueError):
        mappings.page(appdata, USER_FOLLOWS_USER, a, limit=0)
    with pytest.raises(ValueError):
        mappings.page(appdata, USER_FOLLOWS_USER, a, limit=5, cursor="12;x")
    # Numbers past the columns' ranges are no row's: refused before the store sees them.
    for past in (f"{1 << 63}:1", f"{-(1 << 63) - 1}:1", f"1:{1 << 64}"):
        with pytest.raises(ValueError, match="out of range"):
            mappings.page(appdata, USER_FOLLOWS_USER, a, limit=5, cursor=past)
    assert Cursor.decode(f"{(1 << 63) - 1}:{(1 << 64) - 1}") == Cursor((1 << 63) - 1, (1 << 64) - 1)


def test_walk_is_stable_while_follows_change(appdata: AppData) -> None:
    """Page through a board's followers (as chained fan-out jobs do, the
    cursor travelling as text) while followers leave, come back and join:
    each follower present at the start and not removed before being reached
    is seen exactly once; nobody is seen twice."""
    owner, *followers = _users(appdata, 401)
    board = graph.create_board(appdata, owner, {"name": "popular"})
    rng = random.Random(7)
    # Many follows in the same millisecond: ties are broken by follower id.
    for i, user in enumerate(followers):
        graph.follow_board(appdata, user, board.id, at_ms=T0 + i // 10)
    initial = set(followers)

    seen: list[int] = []
    removed_unseen: set[int] = set()
    cursor: str | None = None
    newcomers = _users(appdata, 40)
    now = T0 + 10_000
    for page_number in range(1000):
        page = graph.followers_of_board(appdata, board.id, limit=37, cursor=cursor)
        seen += page.ids
        if page.next is None:
            break
        cursor = page.next.encode()
        # Mid-walk: 5 not-yet-seen followers leave, 3 seen ones leave and come back, 4 newcomers join.
        unseen = sorted(initial - set(seen) - removed_unseen)
        for user in rng.sample(unseen, min(5, len(unseen))):
            assert graph.unfollow_board(appdata, user, board.id)
            removed_unseen.add(user)
        for user in rng.sample(seen, 3):
            if graph.unfollow_board(appdata, user, board.id):
                now += 1
                graph.follow_board(appdata, user, board.id, at_ms=now)
        for user in newcomers[4 * (page_number % 10) : 4 * (page_number % 10) + 4]:
            now += 1
            graph.follow_board(appdata, user, board.id, at_ms=now)
    assert len(seen) == len(set(seen)), "a follower was seen twice"
    assert set(seen) == initial - removed_unseen
    assert removed_unseen  # the walk really was disturbed


def test_walk_pages_in_newest_first_order_with_equal_sequences(appdata: AppData) -> None:
    owner, *followers = _users(appdata, 101)
    mappings.add_many(appdata, USER_FOLLOWED_BY_USER, [(owner, f, T0) for f in followers])
    walked = list(mappings.walk(appdata, USER_FOLLOWED_BY_USER, owner, page_size=7))
    assert [e.to_id for e in walked] == sorted(followers, reverse=True)
    first = graph.followers_of_user(appdata, owner, limit=99)
    assert first.next == Cursor(T0, first.ids[-1])
    last = graph.followers_of_user(appdata, owner, limit=99, cursor=first.next)
    assert len(last.ids) == 1 and last.next is None
    assert graph.follower_count(appdata, owner) == 100


def test_most_recent_pins_of_user_and_board(appdata: AppData) -> None:
    pinner = graph.create_user(appdata, {}, shard=0)
    boards = [graph.create_board(appdata, pinner.id, {"n": n}) for n in range(2)]
    times = list(range(T0, T0 + 60_000, 1000))
    random.Random(3).shuffle(times)  # created out of order
    pins = {t: graph.create_pin(appdata, pinner.id, boards[i % 2].id, {}, created_at_ms=t) for i, t in enumerate(times)}
    newest = sorted(pins, reverse=True)
    recent = graph.recent_pins_of_user(appdata, pinner.id, 10)
    assert [e.to_id for e in recent] == [pins[t].id for t in newest[:10]]
    assert [e.sequence for e in recent] == newest[:10]  # the feed column's time, without reading pins
    on_board = [t for t in newest if pins[t].data["board_id"] == boards[1].id]
    assert [e.to_id for e in graph.recent_pins_of_board(appdata, boards[1].id, 5)] == [pins[t].id for t in on_board[:5]]
    assert len(graph.recent_pins_of_board(appdata, boards[0].id, 1000)) == 30


def test_follow_writes_both_directions_and_repair_fills_a_lost_reverse(appdata: AppData) -> None:
    u, p, q = _users(appdata, 3)
    board = graph.create_board(appdata, p, {})
    assert graph.follow_user(appdata, u, p, at_ms=T0)
    assert not graph.follow_user(appdata, u, p, at_ms=T0 + 5)  # again: nothing changes
    assert graph.follow_board(appdata, u, board.id)
    assert graph.follows_user(appdata, u, p) and graph.follows_board(appdata, u, board.id)
    assert not graph.follows_user(appdata, u, q)
    assert graph.followers_of_user(appdata, p, limit=10).edges == [mappings.Edge(u, T0)]
    assert graph.followers_of_board(appdata, board.id, limit=10).ids == [u]
    with pytest.raises(InvalidId):
        graph.follow_user(appdata, u, u)

    # A follow asked at a time not after the user's last follow gets the
    # time just past it (the follower's clock): no two follows of a user share one.
    board_at = graph.follow_time(appdata, u, board.id)
    assert board_at is not None and board_at > T0
    graph.follow_user(appdata, u, q, at_ms=T0 + 1)
    assert graph.follow_time(appdata, u, q) == board_at + 1
    # A reverse write lost (the process died between the two writes): repair re-adds it.
    mappings.remove(appdata, USER_FOLLOWED_BY_USER, q, u)
    assert graph.followers_of_user(appdata, q, limit=10).ids == []
    assert graph.repair_reverse(appdata, USER_FOLLOWS_USER, u) == 1
    assert graph.followers_of_user(appdata, q, limit=10).edges == [mappings.Edge(u, board_at + 1)]
    # A retried follow whose reverse row was lost completes it with the forward row's time.
    mappings.remove(appdata, USER_FOLLOWED_BY_USER, q, u)
    assert not graph.follow_user(appdata, u, q, at_ms=T0 + 99)
    assert graph.followers_of_user(appdata, q, limit=10).edges == [mappings.Edge(u, board_at + 1)]

    assert graph.unfollow_board(appdata, u, board.id)
    assert not graph.follows_board(appdata, u, board.id)
    assert mappings.count(appdata, BOARD_FOLLOWED_BY_USER, board.id) == 0
    assert graph.unfollow_user(appdata, u, p) and not graph.unfollow_user(appdata, u, p)
    assert graph.followers_of_user(appdata, p, limit=10).ids == []


def test_rows_up_to_a_sequence_newer_than_a_row_and_to_one_id(appdata: AppData) -> None:
    a, b, c, d = _users(appdata, 4)
    for to_id, seq in ((b, 10), (c, 20), (d, 20)):
        mappings.add(appdata, USER_FOLLOWS_USER, a, to_id, seq)
    high, low = max(c, d), min(c, d)
    # Newest first, at most the sequence given (rows at it included).
    assert mappings.up_to(appdata, USER_FOLLOWS_USER, a, 20, 5) == [
        mappings.Edge(high, 20), mappings.Edge(low, 20), mappings.Edge(b, 10)]
    assert mappings.up_to(appdata, USER_FOLLOWS_USER, a, 19, 5) == [mappings.Edge(b, 10)]
    assert mappings.up_to(appdata, USER_FOLLOWS_USER, a, 9, 5) == []
    # Just newer than a row, oldest first (ties by id, as the walk orders them).
    assert mappings.newer(appdata, USER_FOLLOWS_USER, a, Cursor(10, b), 5) == [
        mappings.Edge(low, 20), mappings.Edge(high, 20)]
    assert mappings.newer(appdata, USER_FOLLOWS_USER, a, Cursor(20, low), 1) == [mappings.Edge(high, 20)]
    # The rows from many ids (any shards) to one.
    mappings.add(appdata, USER_FOLLOWS_USER, c, b, 30)
    assert mappings.sequences_to(appdata, USER_FOLLOWS_USER, [a, c, d], b) == {a: 10, c: 30}


def test_the_follow_clock_hands_each_user_distinct_later_times(appdata: AppData) -> None:
    """From several threads at once, asked for the same time: every answer
    is distinct and later than the one before for that user; another
    user's clock is its own."""
    from concurrent.futures import ThreadPoolExecutor

    u, v = _users(appdata, 2)
    assert graph.follow_clock(appdata, u, T0) == T0  # the first: the time asked for
    with ThreadPoolExecutor(8) as pool:
        times = list(pool.map(lambda _i: graph.follow_clock(appdata, u, T0), range(40)))
    assert sorted(times) == list(range(T0 + 1, T0 + 41))
    assert graph.follow_clock(appdata, u, T0 + 1000) == T0 + 1000  # later than the last: as asked
    assert graph.follow_clock(appdata, v, T0) == T0


def test_sequences_of_pairs_finds_each_existing_pair_across_shards_in_few_queries(appdata: AppData) -> None:
    users = _users(appdata, 40)
    follows = {(a, b): 1_000 + i for i, (a, b) in enumerate(zip(users, users[1:] + users[:1], strict=True))}
    for (a, b), seq in follows.items():
        mappings.add(appdata, USER_FOLLOWS_USER, a, b, seq)
    absent = [(b, a) for a, b in list(follows)[:5]]  # the reverse pairs were never followed
    asked = list(follows) + absent + list(follows)[:3]  # duplicates are asked once
    queries = 0
    real_run = appdata.run

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal queries
        queries += 1
        return real_run(*args, **kwargs)  # type: ignore[arg-type]

    appdata.run = counting  # type: ignore[method-assign,assignment]
    try:
        assert mappings.sequences_of_pairs(appdata, USER_FOLLOWS_USER, asked) == follows
    finally:
        appdata.run = real_run  # type: ignore[method-assign]
    assert queries <= 4  # one per shard, not one per pair or per followee
    assert mappings.sequences_of_pairs(appdata, USER_FOLLOWS_USER, []) == {}
    with pytest.raises(ValueError):
        mappings.sequences_of_pairs(appdata, USER_FOLLOWS_USER, [(users[0], 12345)])  # not a user id


def test_a_pairs_placeholder_renders_one_row_constructor_per_pair() -> None:
    from tasks.appdata.sql import sql

    stmt = sql("map_sequences_of_pairs", database="appdata_s00001", table="user_follows_user", pairs=2)
    assert stmt.endswith("WHERE (from_id, to_id) IN ((%s, %s), (%s, %s))")
    with pytest.raises(ValueError, match="needs at least one pair"):
        sql("map_sequences_of_pairs", database="appdata_s00001", table="user_follows_user", pairs=0)


def test_unmapped_to_names_the_rows_gone_or_moved_and_reads_rows_only_for_a_shard_that_lost_some(
        appdata: AppData, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mappings, "PAIRS_MAX", 500)  # so that a shard's rows take two statements
    users = _users(appdata, 2_400)  # about 600 a shard: two chunks of 500 in each
    star = users.pop()
    for i, user in enumerate(users):
        mappings.add(appdata, USER_FOLLOWS_USER, user, star, 5_000 + i)
    asked = [(user, 5_000 + i) for i, user in enumerate(users)]
    unfollowed, refollowed = users[7], users[1_234]
    mappings.remove(appdata, USER_FOLLOWS_USER, unfollowed, star)
    mappings.remove(appdata, USER_FOLLOWS_USER, refollowed, star)
    mappings.add(appdata, USER_FOLLOWS_USER, refollowed, star, 99_999)  # followed again: another time
    never = users[0]
    asked += [(never, 1), asked[3]]  # a row never there; a duplicate asked once
    statements: list[str] = []
    real_run = appdata.run

    def recording(shard: int, work: object) -> object:
        statements.append(f"shard {shard}")
        return real_run(shard, work)  # type: ignore[arg-type]

    appdata.run = recording  # type: ignore[method-assign,assignment]
    try:
        missing = mappings.unmapped_to(appdata, USER_FOLLOWS_USER, asked, star)
    finally:
        appdata.run = real_run  # type: ignore[method-assign]
    assert missing == {(unfollowed, 5_007), (refollowed, 5_000 + 1_234), (never, 1)}
    # A count for each chunk of each shard; rows read again only for the
    # chunks that fell short (at most three here).
    chunks = sum(-(-n // 500) for n in _per_shard(appdata, [u for u, _s in dict.fromkeys(asked)]))
    assert chunks <= len(statements) <= chunks + 3
    assert mappings.unmapped_to(appdata, USER_FOLLOWS_USER, [], star) == set()
    with pytest.raises(ValueError):
        mappings.unmapped_to(appdata, USER_FOLLOWS_USER, [(users[0], 1)], 12345)  # not a user id
    bad_rows: list[tuple[object, object]] = [(users[0], 1.5), (users[0], 1 << 63), (users[0], True), (True, 1)]
    for bad in bad_rows:
        with pytest.raises(ValueError):
            mappings.unmapped_to(appdata, USER_FOLLOWS_USER, [bad], star)  # type: ignore[list-item]


def test_unmapped_to_counts_a_whole_page_in_one_statement_a_shard_and_compares_sequences_exactly(
        appdata: AppData) -> None:
    """The pairs travel as one JSON argument: the extremes of a 64-bit
    sequence, and one past 2^53 (where a double would round), compare exactly."""
    users = _users(appdata, 1_200)
    star = users.pop()
    extremes = [mappings.SEQUENCE_MIN, mappings.SEQUENCE_MAX, (1 << 53) + 1, -1, 0]
    for i, user in enumerate(users):
        mappings.add(appdata, USER_FOLLOWS_USER, user, star, extremes[i % len(extremes)])
    asked = [(user, extremes[i % len(extremes)]) for i, user in enumerate(users)]
    statements: list[int] = []
    real_run = appdata.run

    def recording(shard: int, work: object) -> object:
        statements.append(shard)
        return real_run(shard, work)  # type: ignore[arg-type]

    appdata.run = recording  # type: ignore[method-assign,assignment]
    try:
        assert mappings.unmapped_to(appdata, USER_FOLLOWS_USER, asked, star) == set()
        assert len(statements) == len(set(statements))  # one count a shard, no re-read
        off_by_one = [(user, sequence + (1 if sequence < mappings.SEQUENCE_MAX else -1)) for user, sequence in asked]
        assert mappings.unmapped_to(appdata, USER_FOLLOWS_USER, off_by_one, star) == set(off_by_one)
    finally:
        appdata.run = real_run  # type: ignore[method-assign]


def _per_shard(appdata: AppData, ids: list[int]) -> list[int]:
    from collections import Counter

    from tasks.appdata.ids import split_id

    return list(Counter(split_id(i).shard for i in ids).values())


def test_a_page_read_packed_equals_one_read_row_by_row_when_the_pack_is_cut(
        appdata: AppData, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.appdata import sql as sql_module

    owner, *followers = _users(appdata, 60)
    extremes = [mappings.SEQUENCE_MIN, -1, 0, T0, T0, mappings.SEQUENCE_MAX]  # ties too
    mappings.add_many(appdata, USER_FOLLOWED_BY_USER,
                      [(owner, f, extremes[i % len(extremes)]) for i, f in enumerate(followers)])
    expected = sorted(((extremes[i % len(extremes)], f) for i, f in enumerate(followers)), reverse=True)

    def pages(size: int) -> list[list[tuple[int, int]]]:
        out, cursor = [], None
        while True:
            page = graph.followers_of_user(appdata, owner, limit=size, cursor=cursor)
            out.append([(e.sequence, e.to_id) for e in page.edges])
            if page.next is None:
                return out
            cursor = page.next.encode()

    packed = pages(7)
    assert [row for page in packed for row in page] == expected and len(packed) == 9
    monkeypatch.setattr(sql_module, "PACKED_MAX_BYTES", 40)  # every page of more than one row is cut
    assert pages(7) == packed
    assert graph.followers_of_user(appdata, _users(appdata, 1)[0], limit=5).edges == []


def test_rows_from_many_unpacks_each_mapping_and_reads_a_cut_one_row_by_row(
        appdata: AppData, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.appdata import sql as sql_module

    users = _users(appdata, 700)
    busy, few, single, none = users[0], users[1], users[2], users[3]
    expected: dict[int, dict[int, int]] = {busy: {}, few: {}, single: {}}
    for i, to in enumerate(users[4:]):  # 696 rows: far longer than the small limit below
        mappings.add(appdata, USER_FOLLOWS_USER, busy, to, T0 + i)
        expected[busy][to] = T0 + i
    # Sequences falling as to_ids rise: the answer still lists each mapping in to_id order.
    for to, sequence in zip(users[10:13], ((1 << 63) - 1, -1, mappings.SEQUENCE_MIN), strict=True):
        mappings.add(appdata, USER_FOLLOWS_USER, few, to, sequence)
        expected[few][to] = sequence
    mappings.add(appdata, USER_FOLLOWS_USER, single, users[20], 12_345_678)
    expected[single][users[20]] = 12_345_678
    asked = [none, busy, few, single, busy]

    def read() -> dict[int, dict[int, int]]:
        got = mappings.rows_from_many(appdata, USER_FOLLOWS_USER, asked)
        assert all(list(rows) == sorted(rows) for rows in got.values())
        return got

    assert read() == expected
    # Cut: "to_id 12345678" one byte short still splits into two numbers; only
    # the length says it was cut, and the row-by-row read gives the truth.
    monkeypatch.setattr(sql_module, "PACKED_MAX_BYTES", len(f"{users[20]} 12345678") - 1)
    assert read() == expected
    monkeypatch.setattr(sql_module, "PACKED_MAX_BYTES", 100)
    assert read() == expected


def test_a_mappings_digest_is_the_one_its_read_gave_until_its_rows_change(
        appdata: AppData, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.appdata import sql as sql_module

    users = _users(appdata, 40)
    owners, others = users[:4], users[4:]
    for i, owner in enumerate(owners[:3]):
        for j, to in enumerate(others[: 5 + i]):
            mappings.add(appdata, USER_FOLLOWS_USER, owner, to, T0 + j)

    def read() -> dict[int, Digest]:
        digests: dict[int, Digest] = {}
        mappings.rows_from_many(appdata, USER_FOLLOWS_USER, owners, digests)
        return digests

    before = read()
    assert set(before) == set(owners[:3])  # an id without rows has no digest, read or asked
    assert mappings.digests_from_many(appdata, USER_FOLLOWS_USER, owners) == before
    # Each change moves its own id's digest and no other's.
    def moved_only(owner: int) -> None:
        nonlocal before
        now = mappings.digests_from_many(appdata, USER_FOLLOWS_USER, owners)
        assert now[owner] != before.get(owner)
        assert {k: v for k, v in now.items() if k != owner} == {k: v for k, v in before.items() if k != owner}
        assert read() == now
        before = now

    mappings.add(appdata, USER_FOLLOWS_USER, owners[0], others[30], T0)  # a new row
    moved_only(owners[0])
    mappings.remove(appdata, USER_FOLLOWS_USER, owners[1], others[2])  # a row gone
    moved_only(owners[1])
    mappings.remove(appdata, USER_FOLLOWS_USER, owners[2], others[0])  # gone and back, at a new sequence
    mappings.add(appdata, USER_FOLLOWS_USER, owners[2], others[0], T0 + 99)
    moved_only(owners[2])
    mappings.add(appdata, USER_FOLLOWS_USER, owners[3], others[0], T0)  # a first row
    moved_only(owners[3])
    # A mapping too long to pack is read row by row: its digest never
    # matches, so nothing is taken as unchanged from a text not read whole.
    monkeypatch.setattr(sql_module, "PACKED_MAX_BYTES", 40)
    rows = mappings.rows_from_many(appdata, USER_FOLLOWS_USER, owners)
    texts = {o: " ".join(f"{to} {seq}" for to, seq in rows[o].items()) for o in owners}
    cut = {o for o in owners if len(texts[o]) >= 40}
    assert cut and cut != set(owners)
    assert read() == {o: (before[o][0], "") if o in cut else before[o] for o in owners}
    assert all(mappings.digests_from_many(appdata, USER_FOLLOWS_USER, owners)[o] != (before[o][0], "") for o in cut)
