"""Unique jobs on every setup: a job whose unique key a PENDING or RUNNING
job of the queue holds (or one SUCCEEDED within the queue's unique period)
is not stored, and the enqueue answers the holder's descriptor and names
it a duplicate; the key is free again exactly when the holder ends,
whatever ends it; bad keys are refused in one line."""

from __future__ import annotations

import time

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState
from pinlater.errors import EnqueueRejected
from pinlater.limits import MAX_UNIQUE_KEY_BYTES


def _run_one(cluster: JobService, queue: str, descriptor: str) -> str:
    """Dequeues the job ``descriptor``; its claim."""
    [job] = cluster.dequeue(queue, 1)
    assert job.descriptor == descriptor
    return job.claim


def test_a_held_key_answers_the_holder_until_it_ends(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    first = cluster.enqueue(queue_name, [Job(b"sync 42", unique="account:42", attempts_allowed=3)])
    assert first.duplicates == ()
    # PENDING: another one, at another priority too, is the same job.
    again = cluster.enqueue(queue_name, [Job(b"sync 42 again", priority=2, unique="account:42")])
    assert again == [first[0]] and again.duplicates == (0,)
    claim = _run_one(cluster, queue_name, first[0])
    # RUNNING, and back to PENDING by a failure with a retry left: still held.
    assert cluster.enqueue(queue_name, [Job(b"x", unique="account:42")]).duplicates == (0,)
    cluster.ack(queue_name, failed=[Ack(first[0], claim=claim, retry_delay_ms=1)])
    assert cluster.lookup([first[0]])[first[0]].state is JobState.PENDING
    assert cluster.enqueue(queue_name, [Job(b"x", unique="account:42")]) == [first[0]]
    # It runs again, and succeeds: free.
    claim = _run_one_when_due(cluster, queue_name, first[0])
    cluster.ack(queue_name, succeeded=[Ack(first[0], claim=claim)])
    after = cluster.enqueue(queue_name, [Job(b"sync 42, later", unique="account:42")])
    assert after.duplicates == () and after[0] != first[0]
    # The only job body stored for the key is the first and the last.
    assert cluster.count(queue_name, "pending") == 1


def _run_one_when_due(cluster: JobService, queue: str, descriptor: str) -> str:
    for _ in range(200):
        jobs = cluster.dequeue(queue, 1)
        if jobs:
            assert jobs[0].descriptor == descriptor
            return jobs[0].claim
        time.sleep(0.01)
    raise AssertionError(f"{descriptor} never became due")


@pytest.mark.parametrize("end", ["failed", "expired", "cancelled", "deleted", "move_to_pending_then_cancel"])
def test_every_end_of_the_holder_frees_the_key(cluster: JobService, queue_name: str, end: str) -> None:
    cluster.create_queue(queue_name, claim_timeout_ms=100)
    [d] = cluster.enqueue(queue_name, [Job(b"x", unique="k", attempts_allowed=1)])
    if end == "failed":
        cluster.ack(queue_name, failed=[Ack(d, claim=_run_one(cluster, queue_name, d))])
    elif end == "expired":
        _run_one(cluster, queue_name, d)
        shard = cluster.operators.shard_ids()[0]
        config = cluster.queue_config(queue_name)
        expired = 0
        for _ in range(100):
            expired += sum(cluster.operators.expire_claims(s, config, 1, 100).failed
                           for s in cluster.operators.shard_ids())
            if expired:
                break
            time.sleep(0.02)
        assert expired == 1, shard
    elif end == "cancelled":
        assert cluster.cancel(queue_name, [d]).cancelled == [d]
    elif end == "deleted":
        assert cluster.delete_jobs(queue_name, "pending") == 1
    else:
        claim = _run_one(cluster, queue_name, d)
        cluster.checkpoint(queue_name, [Checkpoint(d, move_to_pending=True, claim=claim)])
        assert cluster.enqueue(queue_name, [Job(b"y", unique="k")]).duplicates == (0,)
        assert cluster.cancel(queue_name, [d]).cancelled == [d]
    again = cluster.enqueue(queue_name, [Job(b"y", unique="k")])
    assert again.duplicates == () and again[0] != d


def test_a_job_named_twice_in_one_call_is_stored_once(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    result = cluster.enqueue(queue_name, [Job(b"a", unique="u"), Job(b"b"), Job(b"c", priority=3, unique="u"),
                                          Job(b"d", unique="v")])
    assert result.duplicates == (2,)
    assert result[2] == result[0] and len(set(result)) == 3
    assert cluster.count(queue_name, "pending") == 3
    # Every job of a call whose keys are all held stores nothing.
    held = cluster.enqueue(queue_name, [Job(b"e", unique="v"), Job(b"f", unique="u")])
    assert held == [result[3], result[0]] and held.duplicates == (0, 1)
    assert cluster.count(queue_name, "pending") == 3
    # A held key beside a free one: only the free one's job is stored.
    mixed = cluster.enqueue(queue_name, [Job(b"g", unique="v"), Job(b"h", unique="w"), Job(b"i", unique="w")])
    assert mixed.duplicates == (0, 2) and mixed[0] == result[3] and mixed[2] == mixed[1] not in result
    assert cluster.count(queue_name, "pending") == 4


def test_the_queue_can_hold_a_key_after_success(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.update_queue(queue_name, unique_succeeded_ms=60_000)
    [d] = cluster.enqueue(queue_name, [Job(b"x", unique="daily")])
    cluster.ack(queue_name, succeeded=[Ack(d, claim=_run_one(cluster, queue_name, d))])
    assert cluster.enqueue(queue_name, [Job(b"y", unique="daily")]) == [d]
    # A failure does not hold it; nor does success once the period is over.
    [other] = cluster.enqueue(queue_name, [Job(b"z", unique="other", attempts_allowed=1)])
    cluster.ack(queue_name, failed=[Ack(other, claim=_run_one(cluster, queue_name, other))])
    assert cluster.enqueue(queue_name, [Job(b"z", unique="other")]).duplicates == ()
    cluster.update_queue(queue_name, unique_succeeded_ms=0)
    assert cluster.enqueue(queue_name, [Job(b"y", unique="daily")]).duplicates == ()


def test_keys_are_per_queue_and_go_with_a_deleted_queue(cluster: JobService, queue_name: str) -> None:
    other = queue_name + "_b"
    cluster.create_queue(queue_name)
    cluster.create_queue(other)
    [a] = cluster.enqueue(queue_name, [Job(b"x", unique="k")])
    assert cluster.enqueue(other, [Job(b"x", unique="k")]).duplicates == ()
    cluster.delete_queue(queue_name, "secret")
    cluster.create_queue(queue_name)
    # Ids start again in a new queue: the old key must not name a new job.
    [b] = cluster.enqueue(queue_name, [Job(b"plain")])
    fresh = cluster.enqueue(queue_name, [Job(b"x", unique="k")])
    assert fresh.duplicates == () and fresh[0] != b
    del a


def test_garbage_collection_keeps_a_key_free(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, succeeded_retention_ms=0)
    [d] = cluster.enqueue(queue_name, [Job(b"x", unique="k")])
    cluster.ack(queue_name, succeeded=[Ack(d, claim=_run_one(cluster, queue_name, d))])
    config = cluster.queue_config(queue_name)
    collected = sum(cluster.operators.collect_finished(s, config, 1, JobState.SUCCEEDED, 100)
                    for s in cluster.operators.shard_ids())
    assert collected == 1
    again = cluster.enqueue(queue_name, [Job(b"y", unique="k")])
    assert again.duplicates == () and cluster.count(queue_name, "pending") == 1


@pytest.mark.parametrize(
    ("unique", "message"),
    [
        ("x" * (MAX_UNIQUE_KEY_BYTES + 1), f"job unique key is {MAX_UNIQUE_KEY_BYTES + 1} bytes in UTF-8"),
        ("é" * 101, "job unique key is 202 bytes in UTF-8"),
        ("\ud800", "lone surrogate"),
        (42, "job unique key must be text, got a int"),
    ],
)
def test_bad_keys_are_refused_and_nothing_is_stored(
    cluster: JobService, queue_name: str, unique: object, message: str
) -> None:
    cluster.create_queue(queue_name)
    with pytest.raises(EnqueueRejected, match=message):
        cluster.enqueue(queue_name, [Job(b"ok", unique="fine"), Job(b"x", unique=unique)])  # type: ignore[arg-type]
    assert cluster.count(queue_name, "pending") == 0
    assert cluster.enqueue(queue_name, [Job(b"ok", unique="x" * MAX_UNIQUE_KEY_BYTES)]).duplicates == ()


@pytest.mark.parametrize("unique", ["é" * (MAX_UNIQUE_KEY_BYTES // 2), "🔑 key", "a\x00b", " trailing "],
                         ids=["two-byte", "four-byte", "nul", "spaces"])
def test_any_text_is_a_key_and_the_same_text_the_same_key(cluster: JobService, queue_name: str, unique: str) -> None:
    """A key is its UTF-8 bytes, whichever way a store first takes it."""
    cluster.create_queue(queue_name)
    [d] = cluster.enqueue(queue_name, [Job(b"a", unique=unique)])
    assert cluster.enqueue(queue_name, [Job(b"b", unique=unique), Job(b"c", unique=unique[:10].strip() + "!")])[0] == d
    assert cluster.enqueue(queue_name, [Job(b"d", unique=unique)]).duplicates == (0,)
    assert cluster.count(queue_name, "pending") == 2
