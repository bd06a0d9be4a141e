"""The feed tasks end to end: application actions enqueue JSON jobs on
PinLater, Celery worker processes run them, both HBase clusters get every
write. Each test runs on the in-process stores and, where it says so, also
through a ``pinlater server`` (the Thrift client) and on MySQL shards."""

from __future__ import annotations

import pytest

from tasks.appdata import graph
from tasks.appdata.store import AppData
from tasks.feeds import queues
from tests.feeds.helpers import feeds, user
from tests.feeds.world import FeedWorld, longest_run_ms

BACKENDS = ["redis", "redis+thrift", "mysql"]


def followers(store: AppData, account: int, count: int, name: str) -> list[int]:
    out = []
    for i in range(count):
        follower = user(store, f"{name}{i}")
        graph.follow_user(store, follower, account)
        out.append(follower)
    return out


@pytest.mark.parametrize("world", BACKENDS, indirect=True)
@pytest.mark.feed_settings(page_size=50)
def test_a_pin_reaches_every_follower_of_pinner_and_board_once(world: FeedWorld) -> None:
    store = world.store
    pinner = user(store, "pinner")
    board = graph.create_board(store, pinner, {"name": "b"}).id
    of_pinner = followers(store, pinner, 120, "fp")
    of_board = [user(store, f"fb{i}") for i in range(30)]
    both = of_pinner[:20]  # follow the pinner and the board: still one cell
    for follower in of_board + both:
        graph.follow_board(store, follower, board)
    bystander = user(store, "bystander")
    world.start_workers()

    new = world.actions.create_pin(pinner, board, {"title": "hello"})
    counts = world.settle(60)

    for follower in of_pinner + of_board:
        assert feeds(world.pair, follower) == [new.id], follower
    assert feeds(world.pair, bystander) == []
    assert feeds(world.pair, pinner) == []
    assert world.failed_jobs() == {}
    # 120 pinner followers in pages of 50 (3), 50 board followers (1 page).
    assert counts[queues.FANOUT]["succeeded"] == 4
    assert counts[queues.WRITE_PRIMARY]["succeeded"] == counts[queues.WRITE_STANDBY]["succeeded"] == 4
    assert 0 < longest_run_ms(world.statuses(queues.FANOUT)) < 5000
