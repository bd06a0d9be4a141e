"""Fan-out on the real servers: a pin reaches every follower of its pinner
and of its board exactly once, on both clusters, and no one else."""

from __future__ import annotations

from tasks.appdata import graph
from tasks.appdata.store import AppData
from tasks.feeds.fanout import HUGE_PRIORITY, NORMAL_PRIORITY, FanoutJob, FanoutStep, fanout_page
from tasks.feeds.writes import WriteBody
from tasks.hbase import ClusterPair
from tests.feeds.helpers import apply_all, feed, feeds, pin, tick, user


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
    assert all(w.op == "put" and w.timestamp == created for w in writes)
    reached = [r for w in writes if w.cluster == "primary" for r in w.rows]
    assert sorted(reached) == sorted(of_pinner + of_board + 2 * of_both)  # both phases reach the "both" users

    apply_all(pair, writes)
    apply_all(pair, writes)  # a retried job: same cells, same timestamp
    for u in of_pinner + of_board + of_both:
        assert feeds(pair, u) == [p.id], u
    assert feeds(pair, bystander) == [] and feeds(pair, pinner) == []


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
