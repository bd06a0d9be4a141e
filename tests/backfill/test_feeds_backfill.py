"""The feeds backfill end to end: Celery workers run the page jobs of a
run on the ``backfill`` queue; the rows on both clusters end equal to the
truth in MySQL, with each cell at its follow's time; verify finds nothing;
real-time follows, unfollows and pins running at the same time leave
nothing verify cannot repair; a run survives its workers being killed;
a cancelled run runs no more pages, and a run whose page failed ends so,
and finishes once an operator puts the page back."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable

import pytest

from pinlater.states import JobState
from tasks.appdata import objects
from tasks.backfill import kinds, runs
from tasks.backfill.kinds import BackfillContext
from tasks.backfill.pages import run_batch
from tasks.backfill.queue import QUEUE
from tasks.backfill.records import CANCELLED, FAILED, FINISHED, RUNNING, Records
from tasks.backfill.verify import verify
from tasks.hbase import PRIMARY, STANDBY
from tests.backfill.helpers import expected_columns, row, small_graph, wait_finished
from tests.feeds.world import FeedWorld
from tests.support.waits import wait_until

# Tens of seconds a test: started early, so no process is left with one at the end.
pytestmark = pytest.mark.slow

BOTH = (PRIMARY, STANDBY)


def context(world: FeedWorld) -> BackfillContext:
    return BackfillContext(world.store, world.pair, world.env)


def verify_rounds(world: FeedWorld, cluster: str, max_rounds: int = 5, kind: str = "feeds") -> list[int]:
    ctx = context(world)
    rounds = verify(ctx, kinds.get(kind), cluster, max_rounds=max_rounds, page_size=32, threads=8)
    return [r.differences for r in rounds]


def test_a_backfill_writes_every_feed_as_the_follows_would(world: FeedWorld) -> None:
    summary = small_graph(world.store, seed=21)
    world.start_workers(1, 4)
    started = runs.start(world.store, world.client, "feeds", BOTH, page_size=16)
    assert [r.cluster for r in started] == list(BOTH)
    finished = wait_finished(world, started)

    records = Records(world.store)
    for run in finished:
        counts = records.counts(run.id)
        assert counts.pages_done == run.total_pages > 4  # every shard paged
        assert counts.users_done >= summary.users
        assert all(page.runs == 1 and page.done_at_ms for page in records.pages(run.id))
    # Each run's pages took turns as that run's (fairness key), whichever shard they paged.
    # A run is marked finished by its end job, which succeeds only once that returns: waited for.
    def ended() -> list[str] | None:
        keys = [job.key for job in world.service.scan(QUEUE, JobState.SUCCEEDED, limit=1000).jobs]
        return keys if keys.count("") >= len(finished) else None

    keys: list[str] = wait_until(ended, 30, interval=0.2, what="the runs' end jobs to succeed")
    assert {f"backfill:{run.id}" for run in finished} <= set(keys)
    # Every page has its run's key; the runs' ends (their batches' callbacks) have none.
    assert all(key.startswith("backfill:") for key in keys if key) and keys.count("") == len(finished)
    ctx = context(world)
    filled = 0
    for user in summary.user_ids:
        for cluster in BOTH:
            want = expected_columns(ctx, cluster, user)
            # The same columns, each at the (latest) follow's time: the cells a follow job writes.
            assert row(world.pair, cluster, user) == want, (user, cluster)
            filled += bool(want)
    assert filled > summary.users  # most users follow someone with pins
    assert verify_rounds(world, PRIMARY) == [0]
    assert verify_rounds(world, STANDBY) == [0]
    assert world.failed_jobs() == {}


# Its waits give a loaded machine time while work still finishes (see
# wait_finished); the test's own limit leaves room for both of them.
@pytest.mark.timeout(480)
def test_real_time_updates_during_a_backfill_end_equal_after_verify(world: FeedWorld) -> None:
    summary = small_graph(world.store, seed=22)
    world.client.set_rate(QUEUE, 15)  # a few seconds of backfill, while the app changes the graph
    world.start_workers(1, 4)
    started = runs.start(world.store, world.client, "feeds", BOTH, page_size=8)
    rng = random.Random(5)
    users, boards = summary.user_ids, summary.board_ids
    followed: list[tuple[int, int]] = []
    for _ in range(150):  # over about 3 s: the run takes longer
        time.sleep(0.02)
        a, b = rng.sample(users, 2)
        choice = rng.random()
        if choice < 0.4:
            followee = b if rng.random() < 0.6 else rng.choice(boards)
            world.actions.follow(a, followee)
            followed.append((a, followee))
        elif choice < 0.6 and followed:
            world.actions.unfollow(*followed.pop(rng.randrange(len(followed))))
        else:
            board = rng.choice(boards)
            world.actions.create_pin(_owner(world, board), board, {"title": "new"})
    assert Records(world.store).counts(started[0].id).pages_done < started[0].total_pages  # still running
    wait_finished(world, started)
    world.settle(60, limit=180)
    for cluster in BOTH:
        rounds = verify_rounds(world, cluster)
        assert rounds[-1] == 0, (cluster, rounds)
    assert world.failed_jobs() == {}


def _owner(world: FeedWorld, board: int) -> int:
    found = objects.get(world.store, board)
    assert found is not None
    return int(found.data["user_id"])


@pytest.mark.parametrize("kind", ["feeds", "contacts"])
def test_workers_killed_mid_backfill_finish_after_restart_without_redoing_pages(world: FeedWorld, kind: str) -> None:
    small_graph(world.store, seed=23, users=80)
    world.client.set_rate(QUEUE, 10)
    world.start_workers(1, 4)
    run, other = runs.start(world.store, world.client, kind, BOTH, page_size=8)
    records = Records(world.store)
    wait_until(lambda: records.counts(run.id).pages_done >= 8, 30, what="some pages done")
    world.procs.kill_group(world.workers[0])  # SIGKILL: no ACK, no shutdown, jobs left claimed
    before = {(p.shard, p.page): p for p in records.pages(run.id)}
    done_before = {key: p for key, p in before.items() if p.done_at_ms is not None}
    assert 8 <= len(done_before) < run.total_pages, (len(done_before), run.total_pages)
    assert records.get_run(run.id).state != FINISHED

    world.procs.restart(world.workers[0])
    finished, _ = wait_finished(world, [run, other], timeout=90)
    assert finished.state == FINISHED and finished.finished_at_ms is not None
    after = {(p.shard, p.page): p for p in records.pages(run.id)}
    assert len(after) == run.total_pages and all(p.done_at_ms is not None for p in after.values())
    # A page done before the kill was not done again: same run count, same time.
    for key, page in done_before.items():
        assert (after[key].runs, after[key].done_at_ms) == (1, page.done_at_ms), key
    # Only pages cut short by the kill ran twice.
    redone = {key for key, p in after.items() if p.runs > 1}
    assert redone <= set(before) - set(done_before), redone
    assert verify_rounds(world, PRIMARY, kind=kind) == [0]
    assert verify_rounds(world, STANDBY, kind=kind) == [0]
    assert world.failed_jobs() == {}


def quiet(read: Callable[[], tuple[int, int]], quiet_s: float, timeout_s: float) -> tuple[int, int]:
    """``read()`` (pages done, jobs running) once no job runs and it has not
    changed for ``quiet_s``; fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    value, since = read(), time.monotonic()
    while value[1] or time.monotonic() - since < quiet_s:
        assert time.monotonic() < deadline, f"still changing after {timeout_s}s (last {value})"
        time.sleep(0.2)
        now = read()
        if now != value:
            value, since = now, time.monotonic()
    return value


def test_pause_stops_progress_and_resume_finishes(world: FeedWorld) -> None:
    small_graph(world.store, seed=24, users=60)
    world.client.set_rate(QUEUE, 10)
    world.start_workers(1, 2)
    run, other = runs.start(world.store, world.client, "feeds", BOTH, page_size=8)
    records = Records(world.store)
    wait_until(lambda: records.counts(run.id).pages_done >= 3, 30, what="some pages done")
    runs.pause(world.client)
    assert runs.queue_paused(world.client)
    assert runs.run_progress(records, run, True).state == "paused"
    # Pages claimed before the pause still finish, however slow the machine:
    # wait until none runs (claimed jobs are RUNNING until acknowledged) and
    # nothing changed for longer than a queue config is cached, then no
    # other page may finish.
    def done_and_running() -> tuple[int, int]:
        return records.counts(run.id).pages_done, world.client.count(QUEUE, "RUNNING")

    stopped, _ = quiet(done_and_running, quiet_s=2.0, timeout_s=120)
    time.sleep(2.0)
    assert done_and_running() == (stopped, 0)
    assert stopped < run.total_pages
    runs.resume(world.client)
    assert not runs.queue_paused(world.client)
    wait_finished(world, [run, other])
    assert verify_rounds(world, PRIMARY) == verify_rounds(world, STANDBY) == [0]


def _page_jobs(world: FeedWorld, run_id: int) -> list[str]:
    """The descriptors of ``run_id``'s page jobs waiting in the queue."""
    found = world.client.scan(QUEUE, JobState.PENDING, limit=1000, include_body=True)
    return [j.descriptor for j in found.jobs if j.body and json.loads(j.body).get("run") == run_id]


def test_a_cancelled_run_runs_no_more_pages_and_one_whose_page_failed_ends_failed(world: FeedWorld) -> None:
    small_graph(world.store, seed=25, users=60)
    world.client.set_rate(QUEUE, 10)
    runs.pause(world.client)  # every first page waits, so which of them run is this test's to say
    cut, failing = runs.start(world.store, world.client, "feeds", BOTH, page_size=8)
    first_pages = len(cut.plan.first_pages())
    assert first_pages >= 2 and len(_page_jobs(world, cut.id)) == first_pages

    cancelled, result = runs.cancel(world.store, world.client, cut.id)
    assert cancelled.state == CANCELLED and cancelled.finished_at_ms is not None
    # Its waiting pages, and its end (the batch's callback), which will not run either.
    assert result is not None and len(result.cancelled) == first_pages + 1 and not result.unapplied
    assert _page_jobs(world, cut.id) == []
    assert runs.cancel(world.store, world.client, cut.id) == (cancelled, None)  # ended: left as it is
    # One chain of the other run cut at its first page: the run's batch ends
    # when its other chains have, and the run with it, failed.
    world.client.cancel(QUEUE, _page_jobs(world, failing.id)[:1])

    runs.resume(world.client)
    world.start_workers(1, 2)
    records = Records(world.store)
    ended = wait_until(lambda: (r := records.get_run(failing.id)).state != RUNNING and r, 90,
                       what="the run with a failed page to end")
    assert ended.state == FAILED
    assert 0 < records.counts(failing.id).pages_done < failing.total_pages
    assert records.counts(cut.id).pages_done == 0 and records.get_run(cut.id).state == CANCELLED
    status = world.client.batch_status(run_batch(world.store.shard_map.database_prefix, cut))
    assert status.state == "cancelled" and status.succeeded == 0
    # An operator puts the failed jobs back: the failed run's chain goes on
    # outside its ended batch, and the run finishes; the cancelled run's
    # pages (and its end) do nothing.
    assert world.client.retry_failed(QUEUE) == first_pages + 2
    wait_finished(world, [failing])
    assert records.counts(cut.id).pages_done == 0 and records.get_run(cut.id).state == CANCELLED
    # What the cancelled run left undone, a new run does.
    wait_finished(world, runs.start(world.store, world.client, "feeds", (cut.cluster,), page_size=8))
    assert verify_rounds(world, PRIMARY) == verify_rounds(world, STANDBY) == [0]
