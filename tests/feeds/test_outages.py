"""Outages during fan-out, with Celery workers on PinLater: the standby
stopped (its writes wait in their own queue, the primary is complete at
once, and the standby converges to equal it after it restarts), the
standby's Thrift2 server stopped alone (the same, for writes), and a worker
killed with SIGKILL (its claims time out, the pages run again, every feed
ends complete and duplicate-free)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tasks.appdata import generate, graph
from tasks.appdata.generate import GraphSpec
from tasks.appdata.objects import AppObject
from tasks.feeds import queues
from tasks.feeds.cells import qualifier
from tests.feeds.helpers import feed, rows_with_column
from tests.feeds.world import FeedWorld
from tests.servers import REPO, services
from tests.support.waits import wait_until
from tests.workers.harness import children

# Stops an HBase cluster or a Thrift server other tests use.
pytestmark = pytest.mark.serial_hbase


def celebrity_with(world: FeedWorld, followers: int, seed: int) -> tuple[int, set[int]]:
    spec = GraphSpec(users=followers + 1, boards=10, pins=0, follows_per_user=0, board_follows_per_user=0,
                     celebrities=1, celebrity_followers=followers, seed=seed)
    summary = generate.generate(world.store, spec)
    celebrity = summary.celebrity_ids[0]
    fans: set[int] = set()
    cursor = None
    while True:
        page = graph.followers_of_user(world.store, celebrity, limit=10_000, cursor=cursor)
        fans.update(page.ids)
        if page.next is None:
            return celebrity, fans
        cursor = page.next


def new_pin(world: FeedWorld, pinner: int) -> AppObject:
    board = graph.create_board(world.store, pinner, {"name": "b"}).id
    return world.actions.create_pin(pinner, board, {"title": "news"})


def reached(world: FeedWorld, cluster: str, pin: AppObject) -> dict[int, int]:
    return dict(rows_with_column(world.pair, cluster, qualifier(pin.created_at_ms, pin.id)))


@pytest.mark.slow
@pytest.mark.feed_settings(page_size=1000)
def test_standby_stopped_during_a_10k_fanout_converges_after_it_returns(world: FeedWorld) -> None:
    celebrity, fans = celebrity_with(world, 10_000, seed=21)
    world.start_workers()
    services("stop-hbase", "standby")
    try:
        pin = new_pin(world, celebrity)
        # The primary completes while the standby is down (each page puts
        # its cells there itself: no primary write job).
        wait_until(lambda: world.service.count(queues.FANOUT, "succeeded") == 11, 60, 0.2, "the fan-out")
        assert reached(world, "primary", pin) == dict.fromkeys(fans, 1)
        assert world.counts()[queues.WRITE_PRIMARY]["succeeded"] == 0
        # The fan-out jobs ended after enqueueing the ten standby writes
        # (their direct puts failed, or were not tried after one did): none
        # of those ends while the standby is away (they retry, never failing;
        # the settle below finds all ten done). Ended jobs stay ended, so
        # these counts cannot miss a write between states, as readings of
        # pending and running can.
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            backlog = world.counts()[queues.WRITE_STANDBY]
            assert (backlog["succeeded"], backlog["failed"]) == (0, 0), backlog
            time.sleep(0.5)
    finally:
        services("start-hbase", "standby")
    counts = world.settle(120, "the standby's backlog")
    assert counts[queues.WRITE_STANDBY]["succeeded"] == 10
    assert world.failed_jobs() == {}
    assert reached(world, "standby", pin) == reached(world, "primary", pin) == dict.fromkeys(fans, 1)
    sample = sorted(fans)[::997]
    assert [feed(world.pair, "standby", u) for u in sample] == [feed(world.pair, "primary", u) for u in sample]
    statuses = world.statuses(queues.WRITE_STANDBY)
    assert any("[retry: HBaseUnavailable: hbase standby" in s for s in statuses), statuses[:3]


@pytest.mark.slow
@pytest.mark.feed_settings(page_size=250)
def test_a_worker_killed_during_fanout_leaves_every_feed_complete_and_duplicate_free(world: FeedWorld) -> None:
    celebrity, fans = celebrity_with(world, 20_000, seed=22)
    world.start_workers(2, 2)
    pin = new_pin(world, celebrity)
    # Kill the first worker (its main process and pool, with SIGKILL) mid-way.
    wait_until(lambda: world.service.count(queues.FANOUT, "succeeded") >= 10, 60, 0.05, "some pages")
    victim = world.procs.procs[world.workers[0]]
    pids = [victim.pid, *children(victim.pid)]
    done_before = world.service.count(queues.FANOUT, "succeeded")
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    victim.wait()
    assert done_before < 81, "the fan-out ended before the kill: nothing was tested"
    started = time.monotonic()
    counts = world.settle(120, "the fan-out after the kill")
    print(f"\nkilled {len(pids)} processes after {done_before} of 81 pages; the rest took "
          f"{time.monotonic() - started:.1f} s")
    assert world.failed_jobs() == {}
    # 80 pages of 250, then the empty board phase. Pages the dead worker was
    # running ran again, but their successors were published once (keyed),
    # so no second chain ran down the rest of the followers. (A kill between
    # a publish and the key's record can still cost one extra page.)
    assert 81 <= counts[queues.FANOUT]["succeeded"] <= 83, counts[queues.FANOUT]
    for cluster in ("primary", "standby"):
        assert reached(world, cluster, pin) == dict.fromkeys(fans, 1), cluster


def standby_statuses(world: FeedWorld) -> dict[str, list[str]]:
    return {state: world.statuses(queues.WRITE_STANDBY, state) for state in ("pending", "running", "failed")}


def stop_thrift2_alone(cluster: str) -> None:
    """SIGTERM one cluster's Thrift2 server, its master and Thrift1 server
    left running, and wait until it is gone."""
    var = Path(os.environ.get("PINLATER_VAR", REPO / ".var"))
    pid = int((var / "hbase" / cluster / "thrift2.pid").read_text().strip())
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not Path(f"/proc/{pid}").exists()
               or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2], 30, 0.2, "the Thrift2 server to exit")


@pytest.mark.slow
@pytest.mark.feed_settings(page_size=1000)
def test_a_thrift2_server_stopped_alone_is_its_cluster_down_for_writes_until_it_returns(world: FeedWorld) -> None:
    """Every write goes through Thrift2: with the standby's Thrift2 server
    stopped and its Thrift1 server up, the standby's writes wait in their
    queue; once `scripts/services up` starts the Thrift2 server again they
    drain by themselves and the standby equals the primary."""
    celebrity, fans = celebrity_with(world, 2_000, seed=23)
    world.start_workers()
    stop_thrift2_alone("standby")
    try:
        pin = new_pin(world, celebrity)
        wait_until(lambda: world.service.count(queues.FANOUT, "succeeded") == 3, 60, 0.2, "the fan-out")
        assert reached(world, "primary", pin) == dict.fromkeys(fans, 1)
        wait_until(lambda: any("[retry: HBaseUnavailable: hbase standby (127.0.0.1:19093)" in s
                               for s in world.statuses(queues.WRITE_STANDBY, "pending")), 90, 0.2,
                   lambda: f"a standby write waiting to retry; statuses: {standby_statuses(world)}")
        assert world.service.count(queues.WRITE_STANDBY, "succeeded") == 0
    finally:
        services("up")  # starts the missing Thrift2 server beside the running master
    counts = world.settle(120, "the standby's backlog")
    assert counts[queues.WRITE_STANDBY]["succeeded"] == 2
    assert world.failed_jobs() == {}
    assert reached(world, "standby", pin) == reached(world, "primary", pin) == dict.fromkeys(fans, 1)
