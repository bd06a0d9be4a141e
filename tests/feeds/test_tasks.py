"""The feed tasks end to end: application actions enqueue JSON jobs on
PinLater, Celery worker processes run them, both HBase clusters get every
write. Each test runs on the in-process stores and, where it says so, also
through a ``pinlater server`` (the Thrift client) and on MySQL shards."""

from __future__ import annotations

import pytest

from pinlater.models import Job
from pinlater.states import JobState
from tasks.appdata import graph
from tasks.appdata.store import AppData
from tasks.feeds import queues
from tasks.feeds.follow import FollowAction
from tasks.feeds.settings import FeedSettings
from tasks.feeds.trim import SweepJob
from tasks.feeds.writes import WriteBody
from tests.feeds.helpers import feeds, pin, tick, user
from tests.feeds.world import FeedWorld, longest_run_ms

# Workers and both clusters, about ten seconds a test: started early, so no
# process is left with them at the end.
pytestmark = pytest.mark.slow

# Through a plain server in the tests below; here through one with TLS, the workers holding
# the worker role only and the application the producer role.
BACKENDS = ["redis", "redis+tls", "mysql"]


def followers(store: AppData, account: int, count: int, name: str) -> list[int]:
    out = []
    for i in range(count):
        follower = user(store, f"{name}{i}")
        graph.follow_user(store, follower, account)
        out.append(follower)
    return out


@pytest.mark.parametrize("writes", ["direct", "queued"])
@pytest.mark.parametrize("world", BACKENDS, indirect=True)
@pytest.mark.feed_settings(page_size=50)
def test_a_pin_reaches_every_follower_of_pinner_and_board_once(world: FeedWorld, writes: str) -> None:
    """Each page puts its cells itself, or (direct writes off, as while a
    write queue is paused or backed up) queues a write job per cluster."""
    store = world.store
    pinner = user(store, "pinner")
    board = graph.create_board(store, pinner, {"name": "b"}).id
    of_pinner = followers(store, pinner, 120, "fp")
    of_board = [user(store, f"fb{i}") for i in range(30)]
    both = of_pinner[:20]  # follow the pinner and the board: still one cell
    for follower in of_board + both:
        graph.follow_board(store, follower, board)
    bystander = user(store, "bystander")
    world.start_workers(env={"PINLATER_FEED_DIRECT_WRITE_MS": "0"} if writes == "queued" else {})

    new = world.actions.create_pin(pinner, board, {"title": "hello"})
    counts = world.settle(60)

    for follower in of_pinner + of_board:
        assert feeds(world.pair, follower) == [new.id], follower
    assert feeds(world.pair, bystander) == []
    assert feeds(world.pair, pinner) == []
    assert world.failed_jobs() == {}
    # 120 pinner followers in pages of 50 (3), 50 board followers (1 page).
    assert counts[queues.FANOUT]["succeeded"] == 4
    assert longest_run_ms(world.statuses(queues.FANOUT)) > 0  # each run recorded in its status
    if writes == "direct":  # no write job at all, and the pages took turns as their pinner's
        assert {name: sum(counts[name].values()) for name in queues.WRITE.values()} == dict.fromkeys(
            queues.WRITE.values(), 0)
        jobs = world.service.scan(queues.FANOUT, JobState.SUCCEEDED, limit=10).jobs
        assert [job.key for job in jobs] == [f"pinner:{pinner}"] * 4
        return
    assert counts[queues.WRITE_PRIMARY]["succeeded"] == counts[queues.WRITE_STANDBY]["succeeded"] == 4
    # Each write job wrote one page: 50, 50 and 20 of the pinner's, 50 of the board's.
    for queue in queues.WRITE.values():
        assert sorted(world.write_rows(queue)) == [20, 50, 50, 50], queue
    # Every page of the fan-out, and every write it made, took turns as its
    # pinner's (fairness key), through the wire too.
    for queue in (queues.FANOUT, queues.WRITE_PRIMARY, queues.WRITE_STANDBY):
        jobs = world.service.scan(queue, JobState.SUCCEEDED, limit=10).jobs
        assert [job.key for job in jobs] == [f"pinner:{pinner}"] * 4, queue


@pytest.mark.parametrize("world", ["redis", "redis+thrift"], indirect=True)
@pytest.mark.feed_settings(recent_pins=3)
def test_follow_and_unfollow_delivered_in_either_order_end_the_same(world: FeedWorld) -> None:
    """The follow and unfollow jobs of the app's actions, through the
    workers, delivered in order, in reverse order and at once (the jobs
    enqueued as ``FeedActions`` does, at moments the test picks)."""
    store, client = world.store, world.client
    followee = user(store, "followee")
    board = graph.create_board(store, followee, {"name": "b"}).id
    pins = [pin(store, followee, board, tick()) for _ in range(4)]
    newest = [p.id for p in reversed(pins)][:3]
    in_order, out_of_order, together = user(store, "a"), user(store, "b"), user(store, "c")
    world.actions.ensure_queues()
    world.start_workers()

    # In order, through the app's own actions: the follow's job, then the unfollow's.
    world.actions.follow(in_order, followee)
    world.settle(30)
    assert feeds(world.pair, in_order) == newest
    world.actions.unfollow(in_order, followee)
    # The others: follow and unfollow in MySQL, their jobs delivered later.
    jobs = {}
    for follower in (out_of_order, together):
        t1 = tick()
        graph.follow_user(store, follower, followee, at_ms=t1)
        since = graph.follow_time(store, follower, followee)
        graph.unfollow_user(store, follower, followee)
        jobs[follower] = (FollowAction(follower, followee, "follow", t1).to_json().encode(),
                          FollowAction(follower, followee, "unfollow", tick(), follow_at=since).to_json().encode())

    def deliver(body: bytes) -> None:
        client.enqueue(queues.FOLLOW, [Job(body)])

    follow, unfollow = jobs[out_of_order]
    deliver(unfollow)
    world.settle(30)
    deliver(follow)  # late: the follow is gone, nothing to put
    follow, unfollow = jobs[together]
    deliver(unfollow)
    deliver(follow)
    world.settle(30)
    assert feeds(world.pair, in_order) == feeds(world.pair, out_of_order) == feeds(world.pair, together) == []

    # Follow, unfollow, re-follow: the re-follow (a later time) shows the pins again.
    world.actions.follow(out_of_order, followee)
    world.settle(30)
    assert feeds(world.pair, out_of_order) == newest
    assert world.failed_jobs() == {}


def test_a_body_no_retry_can_fix_fails_at_once_with_its_reason(world: FeedWorld) -> None:
    world.actions.ensure_queues()
    world.start_workers()
    bad = {
        queues.FANOUT: b'{"pin_id": 1}',
        queues.FOLLOW: b"not json",
        queues.WRITE_PRIMARY: WriteBody("put", "standby", user(world.store, "v"), ((user(world.store, "u"), 5),),
                                        ("0" * 32,)).to_json().encode(),
        queues.TRIM: b'{"user_id": 5, "cluster": "elsewhere", "cap": 10}',
    }
    descriptors = {q: world.client.enqueue(q, [Job(body)])[0] for q, body in bad.items()}
    world.settle(30)
    for queue, descriptor in descriptors.items():
        info = world.service.lookup([descriptor])[descriptor]
        assert info.state is JobState.FAILED, queue
        assert info.attempts_remaining == 0
        assert "[failed: JobRefused: " in info.custom_status, info.custom_status
        assert "retry" not in info.custom_status  # failed on the first attempt
    assert "standby cluster on the primary queue" in world.service.lookup(
        [descriptors[queues.WRITE_PRIMARY]])[descriptors[queues.WRITE_PRIMARY]].custom_status


def test_beat_schedules_the_sweep_from_the_task() -> None:
    from tasks.feeds import tasks as feed_tasks  # noqa: F401  (binds the shared tasks)
    from workers.app import make_app
    from workers.beat import EpochTicks, periodic_schedule

    app = make_app("beat_check", imports=())
    entry = periodic_schedule(app)["pinlater:feeds.trim_sweep"]
    assert entry["task"] == "feeds.trim_sweep"
    # Every beat ticks at the same instants: multiples of the interval since the epoch.
    assert isinstance(entry["schedule"], EpochTicks)
    assert entry["schedule"].seconds == FeedSettings.from_env({}).sweep_interval_s
    assert entry["args"] == ("{}",)
    assert SweepJob.from_json(entry["args"][0]) == SweepJob()
