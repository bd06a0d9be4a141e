"""Wake-ups: a process sends at most one per queue and window, without
waiting for the reply, and replaces a connection the server dropped; a
worker whose slow poll is far away still runs every job published in a
window at once (it claims again when the window is over)."""

from __future__ import annotations

import time
import uuid

import pytest
import redis
from celery import Celery

from pinlater import JobState
from pinlater.service import JobService
from tests.support.waits import wait_until
from tests.workers.celery_tasks import qname
from tests.workers.harness import Processes, wait_for_workers
from workers import waker as waker_module
from workers.settings import DEFAULT_BUS_URL
from workers.waker import Waker


def _received(pubsub: redis.client.PubSub, wait_s: float) -> int:
    count = 0
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.05)
        if message is not None and message["type"] == "message":
            count += 1
    return count


def test_one_wakeup_per_window_and_a_dropped_connection_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    # A long window, so that scheduling delays on a busy machine cannot split it.
    monkeypatch.setattr(waker_module, "COALESCE_S", 0.5)
    bus = redis.Redis.from_url(DEFAULT_BUS_URL)
    channel, other = f"test-wake:{uuid.uuid4().hex}", f"test-wake:{uuid.uuid4().hex}"
    pubsub = bus.pubsub()
    pubsub.subscribe(channel, other)
    waker = Waker()
    try:
        wait_until(lambda: pubsub.get_message(timeout=0.1) is None, 2, what="subscription confirmations")
        for _ in range(5):
            waker.wake(bus, channel)
        waker.wake(bus, other)  # a window per queue
        assert _received(pubsub, 0.3) == 2

        time.sleep(0.5)
        waker.wake(bus, channel)
        assert _received(pubsub, 0.3) == 1

        # The server drops the sender's connection (an idle timeout, a
        # restart): the next wake-up goes out on a new one.
        sender = waker._senders[id(bus)][1]
        host, port = sender._conn._sock.getsockname()[:2]
        bus.client_kill(f"{host}:{port}")
        time.sleep(0.5)
        waker.wake(bus, channel)
        assert _received(pubsub, 0.3) == 1
    finally:
        for _, sender in waker._senders.values():
            sender.close()
        pubsub.close()
        bus.close()


@pytest.mark.timeout(60)
def test_jobs_published_within_one_window_all_run_without_the_slow_poll(
    app: Celery, service: JobService, procs: Processes
) -> None:
    queue = qname("w_pub")
    procs.start("wake", ["worker", "-n", "wake@%h", "-Q", queue, "-c", "1", "--without-gossip",
                         "--without-mingle", "-l", "info"], {"PINLATER_POLL_INTERVAL_S": "60"})
    wait_for_workers(app, ["wake"])
    pub = app.tasks["tests.w_pub"]
    before = service.count(queue, JobState.SUCCEEDED)
    started = time.monotonic()
    descriptors = []
    for _ in range(20):
        # Back to back: usually one wake-up for both, the second job landing
        # after the claim that the wake-up caused.
        descriptors += [pub.delay().descriptor, pub.delay().descriptor]
        time.sleep(0.05)
    wait_until(lambda: service.count(queue, JobState.SUCCEEDED) - before == len(descriptors), 20,
               what="every job to run")
    # Well before the first slow poll (60 s).
    assert time.monotonic() - started < 20
