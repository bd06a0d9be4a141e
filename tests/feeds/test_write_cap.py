"""The feed writes' concurrency cap: when the primary cluster slows down,
its writes wait in PENDING, and no more than the cap of them are RUNNING,
however many worker threads are free; once it is fast again they drain and
every feed is complete.

The workers reach the primary's Thrift servers through relays that add a
delay to every chunk each way (the test's workers only: other tests' use
of the cluster is untouched). A sampler reads the write queue's PENDING
and RUNNING counts all along."""

from __future__ import annotations

import threading
import time

import pytest

from tasks.feeds import queues
from tests.feeds.helpers import followed_pinner
from tests.feeds.test_outages import celebrity_with, new_pin, reached
from tests.feeds.world import FeedWorld
from tests.servers import HBASE_PRIMARY, HBASE_PRIMARY_THRIFT2
from tests.support.topology.relay import Relay
from tests.workers.harness import wait_until

CAP = 2
WORKERS, THREADS = 2, 4  # 8 threads, four times the cap
DELAY_S = 0.5  # each way, per chunk: a call takes at least a second


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


@pytest.mark.slow
@pytest.mark.feed_settings(page_size=100, trim_sample=0)  # the fan-out reads no feed
def test_a_slow_primary_holds_its_writes_in_pending_not_running(world: FeedWorld) -> None:
    # The apps' default: every write queue is capped.
    for name in (queues.WRITE_PRIMARY, queues.WRITE_STANDBY):
        assert world.service.queue_config(name, fresh=True).max_running == queues.WRITE_MAX_RUNNING
    # Lowered as an operator would, so that a test-sized pool of threads outnumbers it.
    world.service.set_concurrency(queues.WRITE_PRIMARY, CAP)
    celebrity, fans = celebrity_with(world, 2500, seed=31)
    samples: list[tuple[int, int]] = []  # (pending, running) of the primary's writes
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            counts = world.counts()[queues.WRITE_PRIMARY]
            samples.append((counts["pending"], counts["running"]))
            time.sleep(0.02)

    with Relay(_address(HBASE_PRIMARY), delay_s=DELAY_S) as thrift1, \
            Relay(_address(HBASE_PRIMARY_THRIFT2), delay_s=DELAY_S) as thrift2:
        relayed = {"PINLATER_HBASE_PRIMARY": "{}:{}".format(*thrift1.address),
                   "PINLATER_HBASE_PRIMARY_THRIFT2": "{}:{}".format(*thrift2.address)}
        world.start_workers(WORKERS, THREADS, env=relayed)
        sampler = threading.Thread(target=sample, name="sampler", daemon=True)
        sampler.start()
        try:
            pin = new_pin(world, celebrity)
            # 25 pages of followers: the fan-out (MariaDB) outruns the slow writes.
            wait_until(lambda: world.service.count(queues.FANOUT, "succeeded") >= 26, 90, 0.1, "the fan-out's pages")
            held = max(samples)[0]
            thrift1.set(delay_s=0.0)
            thrift2.set(delay_s=0.0)
            counts = world.settle(120, "the writes after the slowdown")
        finally:
            stop.set()
            sampler.join(5)
    running = [r for _, r in samples]
    print(f"\nprimary writes while slow: up to {held} PENDING, {max(running)} RUNNING ({len(samples)} samples)")
    assert max(running) <= CAP, f"{max(running)} writes RUNNING at once, over the cap of {CAP}"
    assert max(running) == CAP, f"the cap was never reached ({max(running)}): the workers did not ask for more"
    assert held >= 15, f"at most {held} writes waited in PENDING while the primary was slow: {samples[-10:]}"
    assert world.failed_jobs() == {}
    assert counts[queues.WRITE_PRIMARY]["succeeded"] >= 25
    for cluster in ("primary", "standby"):
        assert reached(world, cluster, pin) == dict.fromkeys(fans, 1), cluster


@pytest.mark.slow
@pytest.mark.feed_settings(page_size=100, trim_sample=0)
def test_a_small_accounts_pin_is_not_held_behind_a_celebritys_write_backlog(world: FeedWorld) -> None:
    """The fan-out's writes carry their pinner's fairness key: while a slow
    primary works through a celebrity's 30 writes, a small account's pin
    published after them reaches its followers' feeds within a few turns."""
    world.service.set_concurrency(queues.WRITE_PRIMARY, CAP)
    celebrity, fans = celebrity_with(world, 3000, seed=32)
    small, board, readers = followed_pinner(world.store, 3)
    with Relay(_address(HBASE_PRIMARY), delay_s=DELAY_S) as thrift1, \
            Relay(_address(HBASE_PRIMARY_THRIFT2), delay_s=DELAY_S) as thrift2:
        world.start_workers(1, THREADS, env={"PINLATER_HBASE_PRIMARY": "{}:{}".format(*thrift1.address),
                                             "PINLATER_HBASE_PRIMARY_THRIFT2": "{}:{}".format(*thrift2.address)})
        big = new_pin(world, celebrity)
        wait_until(lambda: world.service.count(queues.FANOUT, "succeeded") >= 31, 90, 0.1, "the celebrity's pages")
        small_pin = world.actions.create_pin(small, board, {"title": "small news"})
        wait_until(lambda: reached(world, "primary", small_pin) == dict.fromkeys(readers, 1), 60, 0.1,
                   "the small account's pin on the primary")
        backlog = world.counts()[queues.WRITE_PRIMARY]
        thrift1.set(delay_s=0.0)
        thrift2.set(delay_s=0.0)
        world.settle(120, "the writes after the slowdown")
    print(f"\nthe small pin was on its readers' primary feeds with {backlog['pending']} of the celebrity's "
          f"30 writes still pending and {backlog['running']} running")
    # In arrival order it would have waited for all 30.
    assert backlog["pending"] >= 15, backlog
    keys = {job.key for job in world.service.scan(queues.WRITE_PRIMARY, "succeeded", limit=1000).jobs}
    assert keys == {f"pinner:{celebrity}", f"pinner:{small}"}
    assert world.failed_jobs() == {}
    for cluster in ("primary", "standby"):
        assert reached(world, cluster, big) == dict.fromkeys(fans, 1), cluster
        assert reached(world, cluster, small_pin) == dict.fromkeys(readers, 1), cluster
