"""Times of actions made in one millisecond, on MariaDB: every "newer wins"
record of the app data takes a time past the one it replaces, so the action
made last wins; and a follow, unfollow or rename is later than every record
of the users whose index entries it changes (``tasks.appdata.graph``)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tasks.appdata import contacts, graph
from tasks.appdata.store import AppData

T0 = 1_750_000_000_000


def _users(appdata: AppData, n: int) -> list[int]:
    shards = sorted(appdata.shard_map.shards)
    return [graph.create_user(appdata, {"name": f"U{i}"}, shard=shards[i % len(shards)], created_at_ms=T0).id
            for i in range(n)]


def _book(name: str) -> list[dict[str, str]]:
    return [{"name": name, "email": f"{name.lower()}@example.com"}]


def _stored(appdata: AppData, user: int, source: str) -> contacts.SourceImport:
    (found,) = [i for i in contacts.sources_of(appdata, [user])[user] if i.source == source]
    return found


def test_two_imports_in_one_millisecond_keep_the_second(appdata: AppData) -> None:
    (me,) = _users(appdata, 1)
    first = contacts.put_source(appdata, me, "address_book", _book("Old"), at_ms=T0)
    second = contacts.put_source(appdata, me, "address_book", _book("New"), at_ms=T0)
    assert (first.updated_at_ms, second.updated_at_ms) == (T0, T0 + 1)
    assert _stored(appdata, me, "address_book") == second
    # One asking for an earlier time is still made last: it wins, just after.
    third = contacts.put_source(appdata, me, "address_book", _book("Third"), at_ms=T0 - 5)
    assert third.updated_at_ms == T0 + 2 and _stored(appdata, me, "address_book") == third
    # A later time is taken as asked; another source has a clock of its own.
    assert contacts.put_source(appdata, me, "address_book", [], at_ms=T0 + 100).updated_at_ms == T0 + 100
    assert contacts.put_source(appdata, me, "social", _book("Else"), at_ms=T0).updated_at_ms == T0


def test_imports_at_once_get_distinct_times_and_the_last_stays(appdata: AppData) -> None:
    (me,) = _users(appdata, 1)
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda i: contacts.put_source(appdata, me, "address_book", _book(f"N{i}"), at_ms=T0),
                             range(24)))
    assert sorted(i.updated_at_ms for i in made) == list(range(T0, T0 + 24))
    assert _stored(appdata, me, "address_book") == max(made, key=lambda i: i.updated_at_ms)


def test_a_follow_or_unfollow_is_past_both_users_clocks(appdata: AppData) -> None:
    ann, bob, cy, dee = _users(appdata, 4)
    graph.follow_user(appdata, bob, cy, at_ms=T0)
    graph.follow_user(appdata, bob, dee, at_ms=T0)  # Bob's clock: T0 + 1
    graph.follow_user(appdata, ann, bob, at_ms=T0)  # Ann's clock was behind his
    assert graph.follow_time(appdata, ann, bob) == T0 + 2
    assert graph.edge_clock(appdata, cy, ann, T0) == T0 + 3  # past Ann's follow
    board = graph.create_board(appdata, cy, {"name": "b"}, created_at_ms=T0).id
    assert graph.edge_clock(appdata, dee, board, T0) == T0  # a board has no clock: the follower's alone


def test_an_unfollow_is_past_both_users_names_which_no_clock_saw(appdata: AppData) -> None:
    shards = sorted(appdata.shard_map.shards)
    ann, bob = (graph.create_user(appdata, {"name": n}, shard=shards[i % len(shards)], created_at_ms=T0 + 500).id
                for i, n in enumerate(("Ann", "Bob")))
    graph.follow_user(appdata, ann, bob, at_ms=T0)  # by a process 500 ms behind the one that made them
    assert graph.follow_time(appdata, ann, bob) == T0
    assert graph.edge_clock(appdata, ann, bob, T0 + 1) == T0 + 1  # the clocks saw only the follow
    assert graph.unfollow_clock(appdata, ann, bob, T0 + 2) == T0 + 501  # past the names
    graph.rename_user(appdata, bob, "Rob", at_ms=T0 + 900)
    assert graph.unfollow_clock(appdata, ann, bob, T0) == T0 + 901  # past the new name
    board = graph.create_board(appdata, bob, {"name": "b"}, created_at_ms=T0 + 2000).id
    assert graph.unfollow_clock(appdata, ann, board, T0) == T0 + 902  # a board: past Ann's clock alone


def test_a_rename_is_past_every_follow_of_the_user_and_moves_their_clock(appdata: AppData) -> None:
    ann, bob, cy = _users(appdata, 3)
    for _ in range(3):
        graph.follow_clock(appdata, cy, T0)  # Cy's clock: T0 + 2
    graph.follow_user(appdata, cy, bob, at_ms=T0)  # at T0 + 3, on Cy's clock
    graph.follow_user(appdata, bob, ann, at_ms=T0)  # Bob's own clock: T0
    assert graph.rename_user(appdata, bob, "Rob", at_ms=T0) == ("U1", "Rob", T0 + 4)
    assert graph.clock_of(appdata, bob) == T0 + 4
    assert graph.rename_user(appdata, bob, "Bob", at_ms=T0)[2] == T0 + 5  # renames in one ms: ordered
    graph.follow_user(appdata, ann, bob, at_ms=T0)
    assert graph.follow_time(appdata, ann, bob) == T0 + 6  # a follow of Bob: past his name


def test_a_pin_is_past_the_newest_follow_of_its_pinner_and_of_its_board(appdata: AppData) -> None:
    """A follow at t brings the pins made up to t (the newest few) and every
    one made after: a pin made after the follow in the same millisecond
    must be made after it, or it could push an earlier pin out of the feed."""
    ann, bob, cy = _users(appdata, 3)
    board = graph.create_board(appdata, bob, {"name": "b"}, created_at_ms=T0).id
    other = graph.create_board(appdata, bob, {"name": "c"}, created_at_ms=T0).id
    assert graph.create_pin(appdata, bob, board, {}, created_at_ms=T0).created_at_ms == T0  # no follower yet
    graph.follow_user(appdata, ann, bob, at_ms=T0)
    after_follow = graph.follow_time(appdata, ann, bob)
    assert after_follow is not None and after_follow >= T0
    assert graph.create_pin(appdata, bob, board, {}, created_at_ms=T0).created_at_ms == after_follow + 1
    graph.follow_board(appdata, cy, other, at_ms=T0 + 50)
    assert graph.create_pin(appdata, bob, other, {}, created_at_ms=T0).created_at_ms == T0 + 51
    # A later time is taken as asked.
    assert graph.create_pin(appdata, bob, board, {}, created_at_ms=T0 + 100).created_at_ms == T0 + 100
