"""Fan-out on the real servers: a pin reaches every follower of its pinner
and of its board, at the version of each follow, on both clusters, and no
one else; a follow made after the pin gets it only while the follow still
brings it."""

from __future__ import annotations

from tasks.appdata import graph
from tasks.appdata.store import AppData
from tasks.feeds.fanout import HUGE_PRIORITY, NORMAL_PRIORITY, FanoutJob, FanoutStep, fanout_page
from tasks.feeds.writes import WriteBody
from tasks.hbase import ClusterPair
from tests.feeds.helpers import apply_all, feed, feed_versions, feeds, pin, tick, user


def run_fanout(store: AppData, job: FanoutJob, **kwargs: int) -> tuple[list[WriteBody], list[FanoutStep]]:
    """Every page, as chained jobs would run them (each job through JSON)."""
    writes: list[WriteBody] = []
    steps: list[FanoutStep] = []
    next_job: FanoutJob | None = job
    while next_job is not None:
        step = fanout_page(store, FanoutJob.from_json(next_job.to_json()), **kwargs)
        steps.append(step)
        writes.extend(step.writes)
        next_job = step.next_job
        assert len(steps) < 50, "fan-out does not end"
    return writes, steps


def test_pin_reaches_followers_of_pinner_and_board_once(appdata: AppData, pair: ClusterPair) -> None:
    pinner = user(appdata, "pinner")
    board = graph.create_board(appdata, pinner, {"name": "shoes"}).id
    of_pinner = [user(appdata, f"fp{i}") for i in range(3)]
    of_board = [user(appdata, f"fb{i}") for i in range(2)]
    of_both = [user(appdata, f"both{i}") for i in range(2)]
    bystander = user(appdata, "bystander")
    graph.follow_user(appdata, bystander, user(appdata, "someone else"), at_ms=tick())
    for u in of_pinner + of_both:
        graph.follow_user(appdata, u, pinner, at_ms=tick())
    for u in of_board + of_both:
        graph.follow_board(appdata, u, board, at_ms=tick())
    created = tick()
    p = pin(appdata, pinner, board, created)

    writes, steps = run_fanout(appdata, FanoutJob(p.id, pinner, board, created, page_size=2))
    # 5 pinner followers in pages of 2 (3 pages), then 4 board followers (2 pages).
    assert len(steps) == 5 and all(len(step.writes) == 2 for step in steps)
    assert {w.cluster for w in writes} == {"primary", "standby"}
    assert all(w.op == "put" for w in writes)
    reached = [user for w in writes if w.cluster == "primary" for user, _version in w.rows]
    assert sorted(reached) == sorted(of_pinner + of_board + 2 * of_both)  # both phases reach the "both" users
    # Each row at the time of the follow that brings the pin.
    for w in writes:
        for u, version in w.rows:
            assert version == graph.follow_time(appdata, u, w.followee)

    apply_all(pair, appdata, writes)
    apply_all(pair, appdata, writes)  # a retried job: same cells, same versions
    for u in of_pinner + of_board + of_both:
        assert feeds(pair, u) == [p.id], u
    for u in of_both:  # one version per follow
        assert feed_versions(pair, u) == {p.id: {graph.follow_time(appdata, u, pinner),
                                                 graph.follow_time(appdata, u, board)}}
    assert feeds(pair, bystander) == [] and feeds(pair, pinner) == []


def test_a_late_fanout_reaches_later_follows_only_while_they_bring_the_pin(
    appdata: AppData, pair: ClusterPair
) -> None:
    """A fan-out that runs after later follows: a follow made at or after
    the pin brings it only while it is among the account's 2 newest pins of
    that moment (a follow brings the newest ``recent`` and what comes after)."""
    pinner = user(appdata, "pinner")
    board = graph.create_board(appdata, pinner, {"name": "b"}).id
    early = user(appdata, "early")
    graph.follow_user(appdata, early, pinner, at_ms=tick())
    created = tick()
    p = pin(appdata, pinner, board, created)
    right_after = user(appdata, "right after")
    graph.follow_user(appdata, right_after, pinner, at_ms=tick())  # p is the newest pin then
    pin(appdata, pinner, board, tick())
    one_later = user(appdata, "one later")
    graph.follow_user(appdata, one_later, pinner, at_ms=tick())  # p is the 2nd newest then
    pin(appdata, pinner, board, tick())
    too_late = user(appdata, "too late")
    graph.follow_user(appdata, too_late, pinner, at_ms=tick())  # p is the 3rd newest then

    writes, _ = run_fanout(appdata, FanoutJob(p.id, pinner, board, created), recent=2)
    reached = {user for w in writes if w.cluster == "primary" for user, _version in w.rows}
    assert reached == {early, right_after, one_later}


def test_priority_follows_the_follower_count(appdata: AppData, pair: ClusterPair) -> None:
    pinner = user(appdata, "popular")
    board = graph.create_board(appdata, pinner, {"name": "quiet board"}).id
    fans = [user(appdata, f"fan{i}") for i in range(4)]
    for u in fans:
        graph.follow_user(appdata, u, pinner, at_ms=tick())
    graph.follow_board(appdata, fans[0], board, at_ms=tick())
    created = tick()
    p = pin(appdata, pinner, board, created)
    _, steps = run_fanout(appdata, FanoutJob(p.id, pinner, board, created, page_size=3), huge_followers=3)
    # Pinner phase (4 > 3 followers): pages at 3; the board phase (1 follower) at 1.
    assert [s.priority for s in steps] == [HUGE_PRIORITY, HUGE_PRIORITY, NORMAL_PRIORITY]
    assert steps[0].next_job is not None and steps[0].next_job.priority == HUGE_PRIORITY
    assert steps[1].next_job is not None and steps[1].next_job.phase == "board"


def test_fanout_without_followers_writes_nothing(appdata: AppData, pair: ClusterPair) -> None:
    pinner = user(appdata, "lonely")
    board = graph.create_board(appdata, pinner, {"name": "nobody"}).id
    created = tick()
    p = pin(appdata, pinner, board, created)
    writes, steps = run_fanout(appdata, FanoutJob(p.id, pinner, board, created))
    assert writes == [] and len(steps) == 2 and feed(pair, "primary", pinner) == []
