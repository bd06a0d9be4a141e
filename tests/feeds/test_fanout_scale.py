"""A pin of an account with many followers (``tests.scale``: 20,000 in
``make test``, 100,000 in ``make soak``), fanned out by Celery
workers on PinLater into both HBase clusters: every follower of the pinner
or the board gets it exactly once, nobody else does, and no single job does
more than one page's work (pages of 1,000 followers, chained); with the
workers' and the pinner's clocks a second off the machine's."""

from __future__ import annotations

import random
import time

import pytest

from tasks.appdata import generate, graph
from tasks.appdata.generate import GraphSpec
from tasks.appdata.store import now_ms
from tasks.feeds import queues
from tasks.feeds.cells import qualifier
from tasks.feeds.fanout import HUGE_PRIORITY
from tests.feeds.helpers import all_followers, rows_with_column
from tests.feeds.world import FeedWorld, longest_run_ms
from tests.scale import FOLLOWERS
from tests.support.clocks import SKEW_MS

PAGE = 1000


@pytest.mark.slow
@pytest.mark.feed_settings(page_size=PAGE, huge_followers=FOLLOWERS // 2)
def test_a_pin_of_a_huge_account_reaches_each_follower_exactly_once(world: FeedWorld) -> None:
    store = world.store
    spec = GraphSpec(users=FOLLOWERS + 1_000, boards=500, pins=0, follows_per_user=0.2,
                     board_follows_per_user=0.05, celebrities=1, celebrity_followers=FOLLOWERS, seed=9)
    summary = generate.generate(store, spec)
    celebrity = summary.celebrity_ids[0]
    board = graph.create_board(store, celebrity, {"name": "new board"}).id
    # The board's followers: some also follow the celebrity (reached twice,
    # stored once), some do not.
    rng = random.Random(3)
    fans = set(all_followers(world.store, celebrity, "user"))
    others = [u for u in summary.user_ids if u not in fans and u != celebrity]
    for follower in rng.sample(sorted(fans), 300) + rng.sample(others, 200):
        graph.follow_board(store, follower, board)
    expected = set(all_followers(world.store, celebrity, "user")) | set(all_followers(world.store, board, "board"))
    assert len(expected) >= FOLLOWERS + 200
    # Two workers a second ahead of and behind the machine's clock, and the
    # pin from an application process a second behind it: its time is
    # before the board's newest follows, made just now on the machine's.
    world.start_workers(2, 1, skews_ms=(SKEW_MS, -SKEW_MS))

    started = time.monotonic()
    new = world.actions.create_pin(celebrity, board, {"title": f"to {FOLLOWERS:,} followers"},
                                   created_at_ms=now_ms() - SKEW_MS)
    counts = world.settle(300, f"the fan-out to {FOLLOWERS:,}")
    elapsed = time.monotonic() - started

    column = qualifier(new.created_at_ms, new.id)
    for cluster in ("primary", "standby"):
        reached = rows_with_column(world.pair, cluster, column)
        assert set(reached) == expected, f"{cluster}: {len(set(reached) - expected)} extra, " \
                                         f"{len(expected - set(reached))} missing"
        assert set(reached.values()) == {1}
    assert world.failed_jobs() == {}
    # Pages of 1,000: the celebrity's followers at the huge accounts' priority, then the board's.
    pinner_pages = graph.follower_count(store, celebrity) // PAGE + 1
    assert counts[queues.FANOUT]["succeeded"] == pinner_pages + 1
    assert world.service.count(queues.FANOUT, "succeeded", priority=HUGE_PRIORITY) == pinner_pages
    # No job did more than one page's work, however long the machine took
    # over it: the pages put their own cells, and any write job (a cluster
    # that was late for a page) came with at most a page of rows.
    for queue in queues.WRITE.values():
        rows = world.write_rows(queue)
        assert len(rows) <= pinner_pages + 1 and max(rows, default=0) <= PAGE, (queue, len(rows), max(rows, default=0))
    longest = {q: longest_run_ms(world.statuses(q)) for q in (queues.FANOUT, *queues.WRITE.values())}
    print(f"\nfan-out: {len(expected):,} feeds x 2 clusters in {elapsed:.1f} s; "
          f"longest job per queue (ms): {longest}")
    assert longest[queues.FANOUT] > 0  # every page's run was recorded in its status
