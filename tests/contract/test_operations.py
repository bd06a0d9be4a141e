"""The rest of the wire contract in-process: lookup, count, scan, delete,
dry runs, queue admin, and clear errors for bad input, on every setup, the
TLS ones included."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from pinlater import CONTINUATION_END, Ack, Checkpoint, Job, JobService, JobState
from pinlater.errors import (
    ContinuationInvalid,
    DequeueRateLimited,
    EnqueueRejected,
    InvalidRequest,
    PasswordInvalid,
    PriorityNotSupported,
    QueueDeleted,
    QueueNameInvalid,
    QueueNameTooLong,
    QueueNotFound,
)
from pinlater.queue_config import QueueConfig
from pinlater.stores.base import EnqueueItem


def test_lookup_leaves_unknown_descriptors_out(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    [d] = cluster.enqueue(queue_name, [Job(b"secret body")])
    shard = cluster.operators.shard_ids()[0]
    unknown = f"{queue_name}:s{shard}:p1:999999"
    other_queue = f"nosuchqueue:s{shard}:p1:1"
    found = cluster.lookup([d, unknown, other_queue])
    assert list(found) == [d]
    assert found[d].body is None
    assert cluster.lookup([d], include_body=True)[d].body == b"secret body"


def test_malformed_and_foreign_descriptors_are_refused(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    with pytest.raises(InvalidRequest, match="malformed"):
        cluster.lookup(["not-a-descriptor"])
    with pytest.raises(InvalidRequest, match="shard"):
        cluster.lookup([f"{queue_name}:sZZ9:p1:1"])
    with pytest.raises(InvalidRequest, match="not in queue"):
        cluster.ack(queue_name, succeeded=[Ack(f"other:s{cluster.operators.shard_ids()[0]}:p1:1")])
    with pytest.raises(PriorityNotSupported):
        cluster.ack(queue_name, succeeded=[Ack(f"{queue_name}:s{cluster.operators.shard_ids()[0]}:p9:1")])


def test_count_by_state_priority_future_and_regex(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    now = cluster.operators.shard_now_ms()
    cluster.enqueue(queue_name, [Job(b"user:1", priority=1), Job(b"user:2", priority=2)])
    cluster.enqueue(queue_name, [Job(b"board:1", priority=2, run_after_ms=now + 600_000)])
    assert cluster.count(queue_name, "pending") == 2
    assert cluster.count(queue_name, JobState.PENDING, priority=2) == 1
    assert cluster.count(queue_name, "pending", future=True) == 1
    assert cluster.count(queue_name, "pending", body_regex=r"^user:") == 2
    assert cluster.count(queue_name, "pending", future=True, body_regex="board") == 1
    assert cluster.count(queue_name, "running") == 0


def test_scan_pages_newest_first_with_a_working_continuation(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    now = cluster.operators.shard_now_ms()
    expected: list[tuple[int, str]] = []
    for _batch in range(5):
        jobs = [Job(b"j", priority=1 + i % 3, run_after_ms=now + 1000 * (i % 4)) for i in range(60)]
        for job, d in zip(jobs, cluster.enqueue(queue_name, jobs), strict=True):
            expected.append((job.run_after_ms or 0, d))
    seen: list[str] = []
    times: list[int] = []
    continuation = "0"
    pages = 0
    while continuation != CONTINUATION_END:
        page = cluster.scan(queue_name, "pending", future=True, continuation=continuation, limit=37)
        seen += [j.descriptor for j in page.jobs]
        times += [j.run_after_ms for j in page.jobs]
        continuation = page.continuation
        pages += 1
        assert pages < 50
    future = sorted(d for t, d in expected if t > now)
    assert sorted(seen) == future
    assert len(seen) == len(set(seen))
    assert times == sorted(times, reverse=True)
    with pytest.raises(ContinuationInvalid):
        cluster.scan(queue_name, "pending", continuation="garbage")


def test_scan_filters_by_body_regex_and_shows_body_on_request(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"keep-%d" % i) for i in range(5)] + [Job(b"drop")] * 5)
    page = cluster.scan(queue_name, "pending", body_regex="^keep", limit=100)
    assert len(page.jobs) == 5 and all(j.body is None for j in page.jobs)
    page = cluster.scan(queue_name, "pending", body_regex="^keep", include_body=True)
    assert sorted(j.body or b"" for j in page.jobs) == [b"keep-%d" % i for i in range(5)]


def test_delete_jobs_by_state_and_regex(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    later = cluster.operators.shard_now_ms() + 3_600_000
    cluster.enqueue(queue_name, [Job(b"spam-%d" % i) for i in range(3)] + [Job(b"ham")] * 3)
    cluster.enqueue(queue_name, [Job(b"spam-later", run_after_ms=later)])  # scheduled jobs are pending too
    assert cluster.delete_jobs(queue_name, "pending", body_regex="^spam", limit=3) == 3
    assert cluster.delete_jobs(queue_name, "pending", body_regex="^spam") == 1
    assert cluster.count(queue_name, "pending", future=True) == 0
    assert cluster.delete_jobs(queue_name, "failed") == 0
    assert cluster.count(queue_name, "pending") == 3
    assert cluster.delete_jobs(queue_name, "pending", limit=2) == 2
    assert cluster.count(queue_name, "pending") == 1


def test_dry_run_peeks_without_claiming(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    descriptors = cluster.enqueue(queue_name, [Job(b"x")] * 3)
    peeked = cluster.dequeue(queue_name, 10, dry_run=True)
    assert sorted(j.descriptor for j in peeked) == sorted(descriptors)
    assert all(j.claim == "" for j in peeked)
    assert cluster.count(queue_name, "pending") == 3
    assert len(cluster.dequeue(queue_name, 10)) == 3


def test_coverage_visits_a_share_of_the_shards(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    by_shard: dict[str, int] = {}
    while len(by_shard) < len(cluster.operators.shard_ids()):  # jobs on every shard
        [d] = cluster.enqueue(queue_name, [Job(b"x")])
        shard = d.split(":")[1][1:]
        by_shard[shard] = by_shard.get(shard, 0) + 1
    got = cluster.dequeue(queue_name, 1000, coverage=0.01)
    visited = {j.descriptor.split(":")[1][1:] for j in got}
    assert len(visited) == 1  # the smallest share is still one shard
    assert len(got) == by_shard[visited.pop()]
    assert len(cluster.dequeue(queue_name, 1000)) == sum(by_shard.values()) - len(got)
    with pytest.raises(InvalidRequest, match="coverage"):
        cluster.dequeue(queue_name, 10, coverage=0)


def test_two_dequeuers_never_share_a_job(cluster: JobService, other_worker: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    for _ in range(10):
        cluster.enqueue(queue_name, [Job(b"x")] * 50)
    got: dict[str, list[str]] = {"a": [], "b": []}

    def work(client: JobService, key: str) -> None:
        while batch := client.dequeue(queue_name, 7):
            got[key] += [j.descriptor for j in batch]

    threads = [threading.Thread(target=work, args=(c, k)) for c, k in ((cluster, "a"), (other_worker, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    everything = got["a"] + got["b"]
    assert len(everything) == 500 == len(set(everything))


def test_queue_admin_and_runtime_config(cluster: JobService, queue_name: str) -> None:
    config = cluster.create_queue(queue_name, priorities=5, max_dequeue_rate=100)
    assert cluster.create_queue(queue_name) == config  # idempotent, config kept
    assert queue_name in cluster.queue_names()
    cluster.enqueue(queue_name, [Job(b"x", priority=5)])
    cluster.pause(queue_name)
    with pytest.raises(DequeueRateLimited, match="paused"):
        cluster.dequeue(queue_name, 1)
    assert cluster.count(queue_name, "pending") == 1
    cluster.resume(queue_name)
    assert len(cluster.dequeue(queue_name, 1)) == 1
    cluster.set_rate(queue_name, 0)
    with pytest.raises(DequeueRateLimited):
        cluster.dequeue(queue_name, 1)


def test_a_config_change_made_meanwhile_by_another_caller_is_kept(
    cluster: JobService, other_worker: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two changes at once (an operator's rate, an enqueue marking the
    queue as one with batches): each is a compare-and-set, so the one that
    lost the race reads again and applies over the other, losing neither."""
    config = cluster.create_queue(queue_name)
    control = cluster.core.control
    replace = control.replace_queue
    raced: list[bool] = []

    def another_caller_first(current: QueueConfig, updated: QueueConfig) -> bool:
        if not raced:
            raced.append(True)
            other_worker.set_rate(queue_name, 7)  # between this caller's read and its write
        return replace(current, updated)

    monkeypatch.setattr(control, "replace_queue", another_caller_first)
    changed = cluster.update_queue(queue_name, batches=True)
    assert (changed.batches, changed.max_dequeue_rate) == (True, 7)
    stored = cluster.queue_config(queue_name, fresh=True)
    assert (stored.batches, stored.max_dequeue_rate) == (True, 7)
    # The store's step itself: a stale ``current`` changes nothing.
    assert replace(config, config.with_changes(paused=True)) is False
    assert cluster.queue_config(queue_name, fresh=True) == stored


def test_delete_queue_needs_the_secret(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"x")])
    with pytest.raises(PasswordInvalid):
        cluster.delete_queue(queue_name, None)
    with pytest.raises(PasswordInvalid):
        cluster.delete_queue(queue_name, "wrong")
    assert cluster.count(queue_name, "pending") == 1
    cluster.delete_queue(queue_name, "secret")
    cluster.delete_queue(queue_name, "secret")  # idempotent
    assert queue_name not in cluster.queue_names()
    with pytest.raises(QueueNotFound):
        cluster.enqueue(queue_name, [Job(b"x")])
    cluster.create_queue(queue_name)
    assert cluster.count(queue_name, "pending") == 0


def test_a_stale_config_enqueues_nothing_into_a_deleted_queue(
    cluster: JobService, other_worker: JobService, queue_name: str
) -> None:
    # other_worker holds the queue's config in its cache (config_ttl_s) when
    # the queue is deleted: its enqueue must fail, not leave orphan jobs that
    # no worker or operator sees (and that a queue of the same name created
    # later would inherit).
    cluster.create_queue(queue_name)
    other_worker.enqueue(queue_name, [Job(b"before")])
    cluster.delete_queue(queue_name, "secret")
    with pytest.raises(QueueNotFound, match="was deleted"):
        other_worker.enqueue(queue_name, [Job(b"after")])
    # A refusal is an answer, not a shard error: no shard counts one.
    ops = cluster.operators
    assert [h.consecutive_errors for h in ops.shard_status().values()] == [0] * len(ops.shard_ids())
    for shard in cluster.core.shards.all():  # whichever shard it had picked
        with pytest.raises(QueueDeleted):
            shard.enqueue(queue_name, [EnqueueItem(b"after", 1, None, 1, "")])
        assert queue_name not in shard.queue_names()
    cluster.create_queue(queue_name)
    other_worker.enqueue(queue_name, [Job(b"again")])
    assert [j.body for j in cluster.scan(queue_name, "pending", include_body=True).jobs] == [b"again"]


def test_acks_and_checkpoints_of_a_deleted_queue_are_stale(
    cluster: JobService, other_worker: JobService, queue_name: str
) -> None:
    # A worker finishing jobs of a queue deleted meanwhile, its config still cached.
    cluster.create_queue(queue_name)
    other_worker.enqueue(queue_name, [Job(b"a"), Job(b"b")])
    first, second = (j.descriptor for j in other_worker.dequeue(queue_name, 2))
    assert other_worker.checkpoint(queue_name, [Checkpoint(first)]).acked == [first]
    cluster.delete_queue(queue_name, "secret")
    assert other_worker.checkpoint(queue_name, [Checkpoint(first)]).stale == [first]
    result = other_worker.ack(queue_name, succeeded=[Ack(first)], failed=[Ack(second)])
    assert (sorted(result.stale), result.acked, result.unapplied) == (sorted([first, second]), [], {})
    for shard in cluster.core.shards.all():
        assert queue_name not in shard.queue_names()


def test_a_shard_that_missed_the_queue_being_created_again_stores_it_on_enqueue(
    cluster: JobService, queue_name: str
) -> None:
    # As if the queue was deleted and created again while every shard was
    # down: each still marks it deleted, and the config exists.
    cluster.create_queue(queue_name)
    for shard in cluster.core.shards.all():
        shard.delete_queue(queue_name)
    descriptors = cluster.enqueue(queue_name, [Job(b"x", priority=2)])
    assert cluster.count(queue_name, "pending") == 1
    [job] = cluster.dequeue(queue_name, 1)
    assert job.descriptor == descriptors[0]


@pytest.mark.parametrize(
    ("name", "error"),
    [("bad-name", QueueNameInvalid), ("", QueueNameInvalid), ("x" * 51, QueueNameTooLong), ("a b", QueueNameInvalid)],
)
def test_bad_queue_names_are_refused(cluster: JobService, name: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        cluster.create_queue(name)
    with pytest.raises(error):
        cluster.enqueue(name, [Job(b"x")])


def test_bad_jobs_are_refused_and_nothing_is_stored(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    good = Job(b"ok")
    for bad, error in (
        (Job(b"x", priority=0), PriorityNotSupported),
        (Job(b"x", priority=4), PriorityNotSupported),
        (Job(b"x" * (64 * 1024 + 1)), EnqueueRejected),
        (Job(b"x", attempts_allowed=0), EnqueueRejected),
        (Job(b"x", run_after_ms=-5), EnqueueRejected),
        (Job("text"), EnqueueRejected),  # type: ignore[arg-type]
    ):
        with pytest.raises(error):
            cluster.enqueue(queue_name, [good, bad])
    assert cluster.count(queue_name, "pending") == 0
    with pytest.raises(QueueNotFound):
        cluster.enqueue("no_such_queue_here", [good])
    with pytest.raises(InvalidRequest):
        cluster.dequeue(queue_name, 0)
    with pytest.raises(InvalidRequest):
        cluster.dequeue(queue_name, 1_000_000)
    assert cluster.enqueue(queue_name, []) == []


def test_event_counters_record_every_transition(cluster: JobService, queue_name: str) -> None:
    from pinlater.engine.counters import recent_rates, recent_totals

    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"x", attempts_allowed=1)] * 5)
    jobs = cluster.dequeue(queue_name, 5)
    cluster.ack(
        queue_name,
        succeeded=[Ack(j.descriptor) for j in jobs[:3]],
        failed=[Ack(j.descriptor) for j in jobs[3:]],
    )
    cluster.ack(queue_name, succeeded=[Ack(jobs[0].descriptor)])  # stale: not counted again
    assert cluster.retry_failed(queue_name) == 2
    cluster.operators.flush_counters()
    totals = recent_totals(cluster.core.control, minutes=2)[queue_name]
    assert totals == {"enqueued": 5, "dequeued": 5, "succeeded": 3, "failed": 2, "retried_by_operator": 2}
    # A cancel counts the jobs it ended; a unique key held counts a duplicate, not an enqueue.
    cluster.enqueue(queue_name, [Job(b"c", unique="k"), Job(b"d"), Job(b"e")])
    assert cluster.enqueue(queue_name, [Job(b"f", unique="k")]).duplicates == (0,)
    claimed = [j.descriptor for j in cluster.dequeue(queue_name, 10)]
    assert len(claimed) == 5 and len(cluster.cancel(queue_name, claimed[:3]).interrupted) == 3
    cluster.operators.flush_counters()
    totals = recent_totals(cluster.core.control, minutes=2)[queue_name]
    assert (totals["enqueued"], totals["duplicates"], totals["cancelled"]) == (8, 1, 3)
    assert recent_rates(cluster.core.control, minutes=1)[queue_name]["enqueued"] > 0


def test_keys_that_differ_only_in_trailing_spaces_are_different_keys(cluster: JobService, queue_name: str) -> None:
    """No store compares a caller's keys padded (a MySQL VARCHAR would): an
    enqueue with idempotency key "k " is not answered as the one with "k",
    and fairness keys "a" and "a " have a rate bucket each."""
    cluster.create_queue(queue_name)
    first = list(cluster.enqueue(queue_name, [Job(b"1")], idempotency_key="k"))
    second = list(cluster.enqueue(queue_name, [Job(b"2")], idempotency_key="k "))
    assert first != second
    assert list(cluster.enqueue(queue_name, [Job(b"3")], idempotency_key="k ")) == second  # a repeat is one
    cluster.set_key_rate(queue_name, 0.001)  # each key's bucket holds the one job it starts full with
    cluster.enqueue(queue_name, [Job(k.encode(), key=k) for k in ("a", "a ", "a", "a ")])
    taken = []
    for _ in range(4):
        taken += cluster.dequeue(queue_name, 100)
    assert Counter(j.body for j in taken) == Counter({b"1": 1, b"2": 1, b"a": 1, b"a ": 1})
