"""Trimming by the tasks, on clusters whose feed table lacks the trimming
coprocessor (an HBase without the project's jar): a fan-out that samples a
row well over the cap enqueues its trim, and the periodic sweep (started
here by hand, as ``celery beat`` would) caps every feed, including those
grown by follows, keeping the newest pins on both clusters."""

from __future__ import annotations

import pytest

from tasks.appdata import graph
from tasks.feeds import queues
from tasks.feeds.writes import CLUSTERS
from tests.feeds.helpers import feed, feeds, followed_pinner, pin, tick, trimming, user
from tests.feeds.world import FeedWorld

CAP = 20
SLACK = 5
BATCH = 10  # pins created between two settles


@pytest.mark.feed_settings(cap=CAP, trim_slack=SLACK, trim_sample=1000, recent_pins=40, page_size=100)
def test_fanout_trims_and_the_sweep_caps_every_feed_keeping_the_newest(world: FeedWorld) -> None:
    pinner, board, readers = followed_pinner(world.store, 5)
    with trimming(world.pair, CAP):
        jobs_trim_every_feed(world, pinner, board, readers)


def jobs_trim_every_feed(world: FeedWorld, pinner: int, board: int, readers: list[int]) -> None:
    store, actions = world.store, world.actions
    world.start_workers()

    created = []
    for _ in range(4):  # a fan-out checks rows as its page's writes left them
        for _ in range(BATCH):
            created.append(actions.create_pin(pinner, board, {"title": "p"}, created_at_ms=tick()))
        world.settle(60)
    newest = [p.id for p in reversed(created)]
    # Sampled during fan-out: each feed went over cap + slack and was trimmed
    # back to the cap, on each cluster by a trim of its own. Trims and writes
    # have queues of their own, so a batch's writes may land after its trims,
    # on a trimmed row or on one its checks saw within the slack: never more
    # than a batch. Untrimmed, a feed has 40.
    assert world.service.count(queues.TRIM, "succeeded") > 0
    for reader in readers:
        for cluster in CLUSTERS:
            got = feed(world.pair, cluster, reader)
            assert CAP <= len(got) <= CAP + SLACK + BATCH < len(created), (cluster, len(got))
            assert got == newest[: len(got)], cluster

    # A follow adds 40 older pins of another account to a new follower: only the sweep sees it.
    other = user(store, "other")
    other_board = graph.create_board(store, other, {"name": "o"}).id
    older = [pin(store, other, other_board, 1_600_000_000_000 + i) for i in range(40)]
    follower = user(store, "follower")
    actions.follow(follower, other)
    world.settle(30)
    assert len(feeds(world.pair, follower)) == 40

    actions.start_sweep()
    counts = world.settle(60)
    assert counts[queues.TRIM_SWEEP]["succeeded"] >= 3  # the start, then a page per cluster
    for reader in readers:
        assert feeds(world.pair, reader) == newest[:CAP]
    assert feeds(world.pair, follower) == [p.id for p in reversed(older)][:CAP]
    assert world.failed_jobs() == {}
    # A later pin is not hidden by the trims' deletes.
    late = actions.create_pin(pinner, board, {"title": "late"})
    world.settle(30)
    assert feed(world.pair, "primary", readers[0])[0] == late.id
