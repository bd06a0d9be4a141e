"""Follow and unfollow on the real servers: a follow's cells carry its time
as their version, an unfollow retracts that version, so the order the jobs
run in does not matter; a re-follow shows the pins again; a pin reached
through another follow stays. The case of the report that made the rule:
a follow's job that runs after its unfollow's, and after new pins."""

from __future__ import annotations

from tasks.appdata import graph
from tasks.appdata.ids import ObjectType, split_id
from tasks.appdata.store import AppData
from tasks.feeds.cells import TABLE, column, row_key
from tasks.feeds.follow import FollowAction, FollowStillThere, follow_writes
from tasks.feeds.writes import WriteBody, gone_edges
from tasks.hbase import ClusterPair, put_versions
from tests.feeds.helpers import apply_all, feed_versions, feeds, pin, tick, user
from tests.servers import hbase_compact


def _is_board(followee: int) -> bool:
    return split_id(followee).type is ObjectType.BOARD


def follow(store: AppData, follower: int, followee: int) -> list[WriteBody]:
    """The follow in MySQL, and its job's writes (computed now)."""
    at = tick()
    (graph.follow_board if _is_board(followee) else graph.follow_user)(store, follower, followee, at_ms=at)
    return follow_writes(store, FollowAction(follower, followee, "follow", at), recent=3)


def unfollow(store: AppData, follower: int, followee: int) -> list[WriteBody]:
    """The unfollow in MySQL, and its job's writes (as the application
    enqueues it: with the time of the follow it undoes)."""
    since = graph.follow_time(store, follower, followee)
    assert since is not None
    (graph.unfollow_board if _is_board(followee) else graph.unfollow_user)(store, follower, followee)
    return follow_writes(store, FollowAction(follower, followee, "unfollow", tick(), follow_at=since), recent=3)


def board(store: AppData, owner: int) -> int:
    return graph.create_board(store, owner, {"name": "b"}).id


def test_follow_and_unfollow_in_either_order_end_the_same(appdata: AppData, pair: ClusterPair) -> None:
    followee = user(appdata, "followee")
    on = board(appdata, followee)
    pins = [pin(appdata, followee, on, tick()) for _ in range(4)]
    in_order, reversed_, reference = user(appdata, "a"), user(appdata, "b"), user(appdata, "c")

    puts = follow(appdata, in_order, followee)
    apply_all(pair, appdata, puts)
    assert feeds(pair, in_order) == [p.id for p in reversed(pins)][:3]
    retraction = unfollow(appdata, in_order, followee)
    assert len(puts) == len(retraction) == 2  # one body per cluster
    apply_all(pair, appdata, retraction)
    # The other way round: the follow's writes run after the unfollow's (masked by its retraction).
    puts = follow(appdata, reversed_, followee)
    retraction = unfollow(appdata, reversed_, followee)
    apply_all(pair, appdata, retraction)
    apply_all(pair, appdata, puts)
    assert feeds(pair, in_order) == feeds(pair, reversed_) == []

    # Follow, unfollow, re-follow: the re-follow has a later time, and shows the pins again.
    apply_all(pair, appdata, follow(appdata, reversed_, followee))
    assert feeds(pair, reversed_) == [p.id for p in reversed(pins)][:3]
    apply_all(pair, appdata, follow(appdata, reference, followee))
    assert feeds(pair, reference) == feeds(pair, reversed_)


def test_a_late_follow_job_after_its_unfollow_and_new_pins_adds_nothing(appdata: AppData, pair: ClusterPair) -> None:
    """Follow, unfollow a moment later, the unfollow's job runs, the
    followee pins, then the follow's job runs: the feed stays empty (it used
    to get the new pins at the follow's time, which nothing retracted)."""
    followee, follower = user(appdata, "followee"), user(appdata, "follower")
    on = board(appdata, followee)
    pin(appdata, followee, on, tick())
    at = tick()
    graph.follow_user(appdata, follower, followee, at_ms=at)
    late_follow = FollowAction(follower, followee, "follow", at)
    apply_all(pair, appdata, unfollow(appdata, follower, followee))
    pin(appdata, followee, on, tick())
    pin(appdata, followee, on, tick())
    assert follow_writes(appdata, late_follow, recent=3) == []  # the follow is gone: nothing to put
    assert feeds(pair, follower) == []


def test_a_put_computed_before_the_unfollow_and_applied_after_it_is_retracted(
    appdata: AppData, pair: ClusterPair
) -> None:
    """The follow's job ran in time, its write jobs did not: the write's own
    check of the follow takes them back out, whatever the markers say."""
    followee, follower = user(appdata, "followee"), user(appdata, "follower")
    on = board(appdata, followee)
    made = pin(appdata, followee, on, tick())
    puts = follow(appdata, follower, followee)
    graph.unfollow_user(appdata, follower, followee)  # the unfollow's retraction has not run yet
    apply_all(pair, appdata, puts)
    assert feeds(pair, follower) == []
    # A follow since, at a later time, is untouched by that retraction.
    apply_all(pair, appdata, follow(appdata, follower, followee))
    assert feeds(pair, follower) == [made.id]


def test_a_put_that_lands_after_a_compaction_dropped_its_retraction_is_retracted_again(
    appdata: AppData, pair: ClusterPair
) -> None:
    """HBase drops delete markers at a major compaction: a put of a follow
    since undone that arrives after it would show again. The write's check
    of the follow retracts it once more."""
    followee, follower = user(appdata, "followee"), user(appdata, "follower")
    made = pin(appdata, followee, board(appdata, followee), tick())
    puts = follow(appdata, follower, followee)
    apply_all(pair, appdata, unfollow(appdata, follower, followee))
    since = puts[0].rows[0][1]
    for pool in pair:
        hbase_compact(pool.name, pool.table_name(TABLE))
    # What the check guards against: the same cells put straight after the compaction show.
    for pool in pair:
        put_versions(pool, TABLE, [(row_key(follower), column(made.created_at_ms, made.id), b"", since)])
    assert feeds(pair, follower) == [made.id]
    for pool in pair:
        hbase_compact(pool.name, pool.table_name(TABLE))
    apply_all(pair, appdata, puts)  # the follow's write job, very late: its check retracts it again
    assert feeds(pair, follower) == []


def test_an_unfollow_job_before_the_unfollow_is_in_mysql_waits(appdata: AppData) -> None:
    followee, follower = user(appdata, "followee"), user(appdata, "follower")
    follow(appdata, follower, followee)
    since = graph.follow_time(appdata, follower, followee)
    assert since is not None
    early = FollowAction(follower, followee, "unfollow", tick(), follow_at=since)
    try:
        follow_writes(appdata, early)
    except FollowStillThere as exc:
        assert "still follows" in str(exc)
    else:
        raise AssertionError("an unfollow's job ran while the follow was in MySQL")


def test_board_unfollow_keeps_pins_of_users_still_followed(appdata: AppData, pair: ClusterPair) -> None:
    owner, guest = user(appdata, "owner"), user(appdata, "guest")
    group = board(appdata, owner)
    by_owner = pin(appdata, owner, group, tick())
    by_guest = pin(appdata, guest, group, tick())
    follower = user(appdata, "follower")

    apply_all(pair, appdata, follow(appdata, follower, group))
    apply_all(pair, appdata, follow(appdata, follower, guest))
    assert feeds(pair, follower) == [by_guest.id, by_owner.id]
    board_at, guest_at = graph.follow_time(appdata, follower, group), graph.follow_time(appdata, follower, guest)
    assert feed_versions(pair, follower)[by_guest.id] == {board_at, guest_at}  # one version per follow

    apply_all(pair, appdata, unfollow(appdata, follower, group))
    assert feeds(pair, follower) == [by_guest.id]
    assert feed_versions(pair, follower) == {by_guest.id: {guest_at}}


def test_user_unfollow_keeps_pins_on_boards_still_followed(appdata: AppData, pair: ClusterPair) -> None:
    pinner = user(appdata, "pinner")
    kept_board, other_board = board(appdata, pinner), board(appdata, pinner)
    kept = pin(appdata, pinner, kept_board, tick())
    dropped = pin(appdata, pinner, other_board, tick())
    follower = user(appdata, "follower")

    apply_all(pair, appdata, follow(appdata, follower, pinner))
    apply_all(pair, appdata, follow(appdata, follower, kept_board))
    assert feeds(pair, follower) == [dropped.id, kept.id]

    apply_all(pair, appdata, unfollow(appdata, follower, pinner))
    assert feeds(pair, follower) == [kept.id]


def test_a_follow_brings_the_pins_before_it_and_those_after_it(appdata: AppData, pair: ClusterPair) -> None:
    """Run late, a follow's job still brings the 3 newest pins of when the
    follow happened, and the pins made since (which fan-out brings too)."""
    followee, follower = user(appdata, "followee"), user(appdata, "follower")
    on = board(appdata, followee)
    before = [pin(appdata, followee, on, tick()) for _ in range(5)]
    at = tick()
    graph.follow_board(appdata, follower, on, at_ms=at)
    after = [pin(appdata, followee, on, tick()) for _ in range(4)]
    apply_all(pair, appdata, follow_writes(appdata, FollowAction(follower, on, "follow", at), recent=3))
    assert feeds(pair, follower) == [p.id for p in reversed(before[2:] + after)]


def test_follow_of_an_account_without_pins_writes_nothing(appdata: AppData) -> None:
    follower, empty = user(appdata, "f"), user(appdata, "no pins")
    assert follow(appdata, follower, empty) == []
    # The unfollow still retracts the follow's version: pins may be on their way.
    assert [body.op for body in unfollow(appdata, follower, empty)] == ["retract", "retract"]


def test_the_fence_finds_the_follows_gone_for_one_followee_or_many(appdata: AppData) -> None:
    """A fan-out page's check (one followee, many users) and a backfill
    page's (many followees per user) read MySQL differently and agree."""
    followee, other = user(appdata, "followee"), user(appdata, "other")
    on = board(appdata, other)
    fans = [user(appdata, f"fan{i}") for i in range(3)]
    for fan in fans:
        follow(appdata, fan, followee)
    follow(appdata, fans[0], on)
    times = {(fan, f): at for fan in fans for f in (followee, on)
             if (at := graph.follow_time(appdata, fan, f)) is not None}
    unfollow(appdata, fans[1], followee)
    page = [(fan, followee, times[(fan, followee)]) for fan in fans]
    assert gone_edges(appdata, page) == [(fans[1], times[(fans[1], followee)])]
    one_user = [(fans[0], followee, times[(fans[0], followee)]), (fans[0], on, times[(fans[0], on)]),
                (fans[0], followee, 12345)]  # a follow time that never was
    assert gone_edges(appdata, one_user) == [(fans[0], 12345)]
