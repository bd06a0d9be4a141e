"""Follow and unfollow on the real servers: the action's time as the cell
timestamp makes the order the jobs run in irrelevant, a re-follow shows
the pins again, and an unfollow keeps the pins still reachable another way."""

from __future__ import annotations

from tasks.appdata import graph
from tasks.appdata.store import AppData
from tasks.feeds.follow import FollowAction, follow_writes
from tasks.hbase import ClusterPair
from tests.feeds.helpers import apply_all, feeds, pin, tick, user


def test_follow_and_unfollow_in_either_order_end_the_same(appdata: AppData, pair: ClusterPair) -> None:
    followee = user(appdata, "followee")
    board = graph.create_board(appdata, followee, {"name": "b"}).id
    pins = [pin(appdata, followee, board, tick()) for _ in range(4)]
    in_order, reversed_, reference = user(appdata, "a"), user(appdata, "b"), user(appdata, "c")

    for follower in (in_order, reversed_):
        t1 = tick()
        graph.follow_user(appdata, follower, followee, at_ms=t1)
        follow = follow_writes(appdata, FollowAction(follower, followee, "follow", t1), recent=3)
        t2 = tick()
        graph.unfollow_user(appdata, follower, followee)
        unfollow = follow_writes(appdata, FollowAction(follower, followee, "unfollow", t2), recent=3)
        assert len(follow) == len(unfollow) == 2  # one body per cluster
        if follower == in_order:
            apply_all(pair, follow)
            assert feeds(pair, follower) == [p.id for p in reversed(pins)][:3]
            apply_all(pair, unfollow)
        else:
            apply_all(pair, unfollow)
            apply_all(pair, follow)  # the follow's job ran late: masked by the delete at t2 > t1
    assert feeds(pair, in_order) == feeds(pair, reversed_) == []

    # Follow, unfollow, re-follow: the re-follow at t3 > t2 shows the pins again.
    t3 = tick()
    graph.follow_user(appdata, reversed_, followee, at_ms=t3)
    apply_all(pair, follow_writes(appdata, FollowAction(reversed_, followee, "follow", t3), recent=3))
    assert feeds(pair, reversed_) == [p.id for p in reversed(pins)][:3]
    # A follower who never unfollowed sees the same.
    t4 = tick()
    graph.follow_user(appdata, reference, followee, at_ms=t4)
    apply_all(pair, follow_writes(appdata, FollowAction(reference, followee, "follow", t4), recent=3))
    assert feeds(pair, reference) == feeds(pair, reversed_)


def test_board_unfollow_keeps_pins_of_users_still_followed(appdata: AppData, pair: ClusterPair) -> None:
    owner, guest = user(appdata, "owner"), user(appdata, "guest")
    board = graph.create_board(appdata, owner, {"name": "group board"}).id
    by_owner = pin(appdata, owner, board, tick())
    by_guest = pin(appdata, guest, board, tick())
    follower = user(appdata, "follower")

    t1 = tick()
    graph.follow_board(appdata, follower, board, at_ms=t1)
    apply_all(pair, follow_writes(appdata, FollowAction(follower, board, "follow", t1)))
    t2 = tick()
    graph.follow_user(appdata, follower, guest, at_ms=t2)
    apply_all(pair, follow_writes(appdata, FollowAction(follower, guest, "follow", t2)))
    assert feeds(pair, follower) == [by_guest.id, by_owner.id]

    t3 = tick()
    graph.unfollow_board(appdata, follower, board)
    unfollow = follow_writes(appdata, FollowAction(follower, board, "unfollow", t3))
    assert {c for body in unfollow for c in body.columns} == {
        c for body in follow_writes(appdata, FollowAction(follower, owner, "unfollow", t3)) for c in body.columns
    }  # only the owner's pin is deleted
    apply_all(pair, unfollow)
    assert feeds(pair, follower) == [by_guest.id]


def test_user_unfollow_keeps_pins_on_boards_still_followed(appdata: AppData, pair: ClusterPair) -> None:
    pinner = user(appdata, "pinner")
    kept_board = graph.create_board(appdata, pinner, {"name": "followed"}).id
    other_board = graph.create_board(appdata, pinner, {"name": "not followed"}).id
    kept = pin(appdata, pinner, kept_board, tick())
    dropped = pin(appdata, pinner, other_board, tick())
    follower = user(appdata, "follower")

    t1 = tick()
    graph.follow_user(appdata, follower, pinner, at_ms=t1)
    graph.follow_board(appdata, follower, kept_board, at_ms=t1)
    apply_all(pair, follow_writes(appdata, FollowAction(follower, pinner, "follow", t1)))
    apply_all(pair, follow_writes(appdata, FollowAction(follower, kept_board, "follow", t1)))
    assert feeds(pair, follower) == [dropped.id, kept.id]

    t2 = tick()
    graph.unfollow_user(appdata, follower, pinner)
    apply_all(pair, follow_writes(appdata, FollowAction(follower, pinner, "unfollow", t2)))
    assert feeds(pair, follower) == [kept.id]


def test_follow_of_an_account_without_pins_writes_nothing(appdata: AppData) -> None:
    follower, empty = user(appdata, "f"), user(appdata, "no pins")
    assert follow_writes(appdata, FollowAction(follower, empty, "follow", tick())) == []
    assert follow_writes(appdata, FollowAction(follower, empty, "unfollow", tick())) == []
