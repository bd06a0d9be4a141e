"""The feed writes' concurrency cap: when the primary cluster is slow, its
writes wait in PENDING, and no more than the cap of them are RUNNING,
however many worker threads are free; once it is fast again they drain and
every feed is complete. And the fan-out's writes carry their pinner's
fairness key, so a celebrity's backlog there does not hold back a small
account's pin.

The workers reach the primary's Thrift servers through relays that add a
delay to every chunk each way (the test's workers only: other tests' use
of the cluster is untouched). The primary's write queue is paused while a
fan-out fills it, so that each test starts from a known backlog however
fast the machine runs the fan-out; then it is resumed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tasks.feeds import queues
from tests.feeds.helpers import followed_pinner
from tests.feeds.test_outages import celebrity_with, new_pin, reached
from tests.feeds.world import FeedWorld
from tests.servers import HBASE_PRIMARY, HBASE_PRIMARY_THRIFT2
from tests.support.topology.relay import Relay
from tests.support.waits import wait_until

CAP = 2
WORKERS, THREADS = 2, 4  # 8 threads, four times the cap
DELAY_S = 0.5  # each way, per chunk: a call takes at least a second
PAGES = 25


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


@contextmanager
def slow_primary(world: FeedWorld, workers: int) -> Iterator[None]:
    """``workers`` workers whose primary is slow while the block runs; then
    fast again, and the queues drained."""
    with Relay(_address(HBASE_PRIMARY), delay_s=DELAY_S) as thrift1, \
            Relay(_address(HBASE_PRIMARY_THRIFT2), delay_s=DELAY_S) as thrift2:
        world.start_workers(workers, THREADS, env={"PINLATER_HBASE_PRIMARY": "{}:{}".format(*thrift1.address),
                                                   "PINLATER_HBASE_PRIMARY_THRIFT2": "{}:{}".format(*thrift2.address)})
        yield
        thrift1.set(delay_s=0.0)
        thrift2.set(delay_s=0.0)
        world.settle(120, "the writes after the slowdown")


def backlog_of(world: FeedWorld, writes: int) -> None:
    """Waits until the paused primary queue holds ``writes`` writes."""
    wait_until(lambda: world.service.count(queues.WRITE_PRIMARY, "pending") >= writes, 90, 0.1,
               f"{writes} primary writes waiting")


@pytest.mark.slow
@pytest.mark.feed_settings(page_size=100, trim_sample=0)  # the fan-out reads no feed
def test_a_slow_primary_holds_its_writes_in_pending_not_running(world: FeedWorld) -> None:
    # The apps' default: every write queue is capped.
    for name in (queues.WRITE_PRIMARY, queues.WRITE_STANDBY):
        assert world.service.queue_config(name, fresh=True).max_running == queues.WRITE_MAX_RUNNING
    # Lowered as an operator would, so that a test-sized pool of threads outnumbers it.
    world.service.set_concurrency(queues.WRITE_PRIMARY, CAP)
    world.service.pause(queues.WRITE_PRIMARY)
    celebrity, fans = celebrity_with(world, PAGES * 100, seed=31)
    samples: list[tuple[int, int]] = []  # (pending, running) of the primary's writes
    with slow_primary(world, WORKERS):
        pin = new_pin(world, celebrity)
        backlog_of(world, PAGES)
        world.service.resume(queues.WRITE_PRIMARY)
        # Three seconds of a slow primary with 8 threads free: without the
        # cap the workers would claim every write at once.
        until = time.monotonic() + 3.0
        while time.monotonic() < until:
            counts = world.counts()[queues.WRITE_PRIMARY]
            samples.append((counts["pending"], counts["running"]))
            time.sleep(0.02)
    running = [r for _, r in samples]
    held = samples[-1][0]
    print(f"\nprimary writes while slow: at most {max(running)} RUNNING, {held} still PENDING after 3 s "
          f"({len(samples)} samples)")
    assert max(running) <= CAP, f"{max(running)} writes RUNNING at once, over the cap of {CAP}"
    assert max(running) == CAP, f"the cap was never reached ({max(running)}): the workers did not ask for more"
    assert held >= PAGES - 3 * 2 * CAP, f"only {held} writes waited in PENDING after 3 s: {samples[-5:]}"
    assert world.failed_jobs() == {}
    assert world.counts()[queues.WRITE_PRIMARY]["succeeded"] == PAGES
    for cluster in ("primary", "standby"):
        assert reached(world, cluster, pin) == dict.fromkeys(fans, 1), cluster


@pytest.mark.slow
@pytest.mark.feed_settings(page_size=100, trim_sample=0)
def test_a_small_accounts_pin_is_not_held_behind_a_celebritys_write_backlog(world: FeedWorld) -> None:
    """While a slow primary works through a celebrity's 30 writes, a small
    account's pin published after them reaches its readers' feeds within a
    few turns: in arrival order it would come after all 30."""
    world.service.set_concurrency(queues.WRITE_PRIMARY, CAP)
    world.service.pause(queues.WRITE_PRIMARY)
    celebrity, fans = celebrity_with(world, 3000, seed=32)
    small, board, readers = followed_pinner(world.store, 3)
    with slow_primary(world, 1):
        big = new_pin(world, celebrity)
        backlog_of(world, 30)
        small_pin = world.actions.create_pin(small, board, {"title": "small news"})
        backlog_of(world, 31)
        world.service.resume(queues.WRITE_PRIMARY)
        wait_until(lambda: reached(world, "primary", small_pin) == dict.fromkeys(readers, 1), 60, 0.1,
                   "the small account's pin on the primary")
        backlog = world.counts()[queues.WRITE_PRIMARY]
    print(f"\nthe small pin was on its readers' primary feeds with {backlog['pending']} of the celebrity's "
          f"30 writes still pending and {backlog['running']} running")
    assert backlog["pending"] >= 20, backlog
    keys = {job.key for job in world.service.scan(queues.WRITE_PRIMARY, "succeeded", limit=1000).jobs}
    assert keys == {f"pinner:{celebrity}", f"pinner:{small}"}
    assert world.failed_jobs() == {}
    for cluster in ("primary", "standby"):
        assert reached(world, cluster, big) == dict.fromkeys(fans, 1), cluster
        assert reached(world, cluster, small_pin) == dict.fromkeys(readers, 1), cluster
