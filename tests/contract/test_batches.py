"""Batches on every setup: a batch's callback is stored when the batch is
made, due never, and released once: when the batch is sealed and every
one of its jobs has ended (SUCCEEDED or FAILED), whichever way each ended
and however often that is told; a batch grows from its running jobs;
cancelling one ends its jobs and its callback; bad input is refused."""

from __future__ import annotations

import time

import pytest

from pinlater import Ack, Job, JobService, JobState
from pinlater.engine import batches, idempotency
from pinlater.errors import EnqueueOutcomeUnknown, EnqueueRejected, InvalidRequest, StorageError
from pinlater.limits import MAX_TIMESTAMP_MS
from pinlater.stores.base import ShardOutcomeUnknown
from pinlater.stores.control import LIVE_BATCH_STATES


def _setup(cluster: JobService, queue: str) -> str:
    """Queues ``queue`` (the jobs) and ``queue``_done (the callbacks)."""
    cluster.create_queue(queue, claim_timeout_ms=100)
    cluster.create_queue(queue + "_done")
    return queue + "_done"


def _run_all(cluster: JobService, queue: str, fail: set[bytes] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """Dequeues everything runnable of ``queue`` and ACKs it: a failure
    for the bodies in ``fail``, success for the rest. The descriptors run."""
    ran: list[str] = []
    while jobs := cluster.dequeue(queue, 100):
        cluster.ack(queue, succeeded=[Ack(j.descriptor, claim=j.claim) for j in jobs if j.body not in fail],
                    failed=[Ack(j.descriptor, claim=j.claim) for j in jobs if j.body in fail])
        ran += [j.descriptor for j in jobs]
    return ran


def test_the_callback_runs_once_every_job_has_ended(cluster: JobService, queue_name: str) -> None:
    done_q = _setup(cluster, queue_name)
    batch = cluster.create_batch(done_q, Job(b"callback"), description="nightly sync")
    first = cluster.enqueue(queue_name, [Job(b"a"), Job(b"b"), Job(b"bad", attempts_allowed=1)], batch=batch)
    status = cluster.batch_status(batch)
    assert (status.state, status.total, status.pending, status.description) == ("open", 3, 3, "nightly sync")
    callback = cluster.lookup([status.callback])[status.callback]
    assert callback.state is JobState.PENDING and callback.run_after_ms == MAX_TIMESTAMP_MS

    assert sorted(_run_all(cluster, queue_name, fail={b"bad"})) == sorted(first)
    # Told again, as the monitor and an ACK may both tell a job's end: counted once.
    counted = cluster.batch_status(batch)
    assert (counted.succeeded, counted.failed) == (2, 1)
    assert cluster.core.control.batch_end({d: "F" for d in first}) == []
    assert cluster.core.control.batch_end({f"{queue_name}:sx:p1:1": "S"}) == []  # in no batch
    assert cluster.batch_status(batch) == counted
    # Every job ended, but the batch is not sealed: its maker may add more.
    assert cluster.batch_status(batch).state == "open"
    assert cluster.dequeue(done_q, 10) == []
    [more] = cluster.enqueue(queue_name, [Job(b"c")], batch=batch)
    sealed = cluster.seal_batch(batch)
    assert (sealed.state, sealed.total, sealed.succeeded, sealed.failed) == ("sealed", 4, 2, 1)
    assert cluster.dequeue(done_q, 10) == []
    assert _run_all(cluster, queue_name) == [more]

    status = cluster.batch_status(batch)
    assert (status.state, status.succeeded, status.failed, status.pending) == ("released", 3, 1, 0)
    [run] = cluster.dequeue(done_q, 10)
    assert (run.descriptor, run.body) == (status.callback, b"callback")
    cluster.ack(done_q, succeeded=[Ack(run.descriptor, claim=run.claim)])
    # Told again (the monitor reads every job's state): nothing changes, nothing runs again.
    assert cluster.operators.settle_batches(idle_ms=0) == 0
    assert cluster.batch_status(batch).state == "released" and cluster.dequeue(done_q, 10) == []
    with pytest.raises(InvalidRequest, match=f"batch {batch} is released: no job can join it"):
        cluster.enqueue(queue_name, [Job(b"late")], batch=batch)


def test_sealing_a_batch_whose_jobs_have_all_ended_releases_it_at_once(cluster: JobService, queue_name: str) -> None:
    done_q = _setup(cluster, queue_name)
    empty = cluster.create_batch(done_q, Job(b"empty"))
    assert cluster.seal_batch(empty).state == "released"
    batch = cluster.create_batch(done_q, Job(b"two"))
    cluster.enqueue(queue_name, [Job(b"1"), Job(b"2")], batch=batch)
    _run_all(cluster, queue_name)
    assert cluster.seal_batch(batch).state == "released"
    assert sorted(j.body for j in cluster.dequeue(done_q, 10)) == [b"empty", b"two"]
    # Sealing again changes nothing.
    assert cluster.seal_batch(batch).state == "released"


def test_a_running_job_adds_the_next_page_before_its_ack(cluster: JobService, queue_name: str) -> None:
    done_q = _setup(cluster, queue_name)
    batch = cluster.create_batch(done_q, Job(b"all pages"))
    cluster.enqueue(queue_name, [Job(b"page 1")], batch=batch)
    cluster.seal_batch(batch)
    for page in range(1, 4):
        [job] = cluster.dequeue(queue_name, 1)
        assert job.body == b"page %d" % page
        if page < 3:
            cluster.enqueue(queue_name, [Job(b"page %d" % (page + 1))], batch=batch)
        cluster.ack(queue_name, succeeded=[Ack(job.descriptor, claim=job.claim)])
        assert cluster.dequeue(done_q, 10) == [] or page == 3
    status = cluster.batch_status(batch)
    assert (status.state, status.total, status.succeeded) == ("released", 3, 3)


def test_a_retried_job_ends_only_at_its_last_attempt(cluster: JobService, queue_name: str) -> None:
    done_q = _setup(cluster, queue_name)
    batch = cluster.create_batch(done_q, Job(b"cb"))
    [d] = cluster.enqueue(queue_name, [Job(b"flaky", attempts_allowed=2)], batch=batch)
    cluster.seal_batch(batch)
    [job] = cluster.dequeue(queue_name, 1)
    cluster.ack(queue_name, failed=[Ack(d, claim=job.claim, retry_delay_ms=1)])
    assert cluster.batch_status(batch).pending == 1
    time.sleep(0.01)
    [job] = cluster.dequeue(queue_name, 1)
    cluster.ack(queue_name, succeeded=[Ack(d, claim=job.claim)])
    status = cluster.batch_status(batch)
    assert (status.state, status.succeeded, status.failed) == ("released", 1, 0)


def test_ends_no_ack_told_are_found_by_the_monitor(cluster: JobService, queue_name: str) -> None:
    """A claim that expires to FAILED, a job an operator deletes, an ACK
    whose batches were not told: the monitor looks them up."""
    done_q = _setup(cluster, queue_name)
    batch = cluster.create_batch(done_q, Job(b"cb"))
    expiring, _deleted, acked = cluster.enqueue(
        queue_name, [Job(b"x", attempts_allowed=1), Job(b"y", priority=2), Job(b"z")], batch=batch)
    cluster.seal_batch(batch)
    jobs = {j.descriptor: j for j in cluster.dequeue(queue_name, 2, coverage=1.0)}
    assert set(jobs) == {expiring, acked}
    # ACKed without telling the batch: as a process that died after the ACK.
    config = cluster.queue_config(queue_name, fresh=True)
    cluster.update_queue(queue_name, batches=False)
    cluster.core.configs.forget(queue_name)
    cluster.ack(queue_name, succeeded=[Ack(acked, claim=jobs[acked].claim)])
    cluster.update_queue(queue_name, batches=config.batches)
    assert cluster.delete_jobs(queue_name, "pending", priority=2) == 1
    for _ in range(200):
        if sum(cluster.operators.expire_claims(s, config, 1, 10).failed for s in cluster.operators.shard_ids()):
            break
        time.sleep(0.01)
    assert cluster.batch_status(batch).pending == 3
    assert cluster.operators.settle_batches(idle_ms=0) == 1
    status = cluster.batch_status(batch)
    assert (status.state, status.succeeded, status.failed) == ("released", 1, 2)
    assert [j.body for j in cluster.dequeue(done_q, 10)] == [b"cb"]


def test_the_monitor_reaches_a_batch_behind_ones_still_waiting(cluster: JobService, queue_name: str) -> None:
    """Pages of the live batches, each pass going on from the last: one
    whose end only the monitor can find (its job deleted) is reached behind
    older batches whose jobs are still pending, however many those are."""
    done_q = _setup(cluster, queue_name)
    waiting = [cluster.create_batch(done_q, Job(b"wait%d" % i)) for i in range(5)]
    for batch in waiting:
        cluster.enqueue(queue_name, [Job(b"w")], batch=batch)
        cluster.seal_batch(batch)
    time.sleep(0.005)  # changed after every waiting one: last in the walk's order
    missed = cluster.create_batch(done_q, Job(b"cb"))
    cluster.enqueue(queue_name, [Job(b"gone", priority=2)], batch=missed)
    cluster.seal_batch(missed)
    assert cluster.delete_jobs(queue_name, "pending", priority=2) == 1
    # Other tests' batches may be live in this control store too: a round is all of them.
    live = len(cluster.core.control.batch_list(LIVE_BATCH_STATES, 100_000))
    walk = batches.SettleWalk()
    passes: list[int] = []
    while cluster.batch_status(missed).state != "released" and len(passes) <= live:
        before = walk.after
        passes.append(batches.settle_batches(cluster.core, 0, walk, limit=2))
        assert walk.after is None or before is None or walk.after > before
    assert passes[-1] >= 1 and len(passes) <= live // 2 + 1
    assert [j.body for j in cluster.dequeue(done_q, 10)] == [b"cb"]
    assert {cluster.batch_status(b).state for b in waiting} == {"sealed"}
    for _ in range(live):
        if walk.after is None:
            break
        batches.settle_batches(cluster.core, 0, walk, limit=2)
    assert walk.after is None  # past the newest: around again from the oldest


def test_cancelling_a_batch_ends_its_jobs_and_its_callback(cluster: JobService, queue_name: str) -> None:
    done_q = _setup(cluster, queue_name)
    batch = cluster.create_batch(done_q, Job(b"cb"))
    stored = cluster.enqueue(queue_name, [Job(b"%d" % i) for i in range(5)], batch=batch)
    [running] = cluster.dequeue(queue_name, 1)
    [finished] = cluster.dequeue(queue_name, 1)
    cluster.ack(queue_name, succeeded=[Ack(finished.descriptor, claim=finished.claim)])
    status = cluster.batch_status(batch)
    result = cluster.cancel_batch(batch)
    assert result.interrupted == [running.descriptor]
    assert sorted(result.cancelled) == sorted([*set(stored) - {running.descriptor, finished.descriptor},
                                               status.callback])
    assert cluster.batch_status(batch).state == "cancelled"
    assert cluster.dequeue(queue_name, 10) == [] and cluster.dequeue(done_q, 10) == []
    with pytest.raises(InvalidRequest, match="is cancelled: no job can join it"):
        cluster.enqueue(queue_name, [Job(b"late")], batch=batch)
    # Its ends are recorded: the cancel sent again has no job left to go over.
    after = cluster.batch_status(batch)
    assert (after.total, after.succeeded, after.failed, after.pending) == (5, 1, 4, 0)
    assert cluster.core.control.batch_unended(batch, 100) == ([], "")
    assert cluster.cancel_batch(batch).cancelled == []


@pytest.mark.parametrize(
    ("callback", "message"),
    [
        (Job(b"cb", run_after_ms=1), "give it no run_after"),
        (Job(b"cb", key="tenant"), "cannot have a fairness key"),
        (Job(b"cb", unique="u"), "cannot have a unique key"),
    ],
)
def test_a_callback_that_cannot_be_released_is_refused(
    cluster: JobService, queue_name: str, callback: Job, message: str
) -> None:
    done_q = _setup(cluster, queue_name)
    with pytest.raises(InvalidRequest, match=message):
        cluster.create_batch(done_q, callback)
    assert cluster.count(done_q, "pending", future=True) == 0


@pytest.mark.parametrize("batch", ["", "q.b123", "q.B" + "0" * 24, "q.b" + "g" * 24, "b" + "0" * 24,
                                   "bad-queue.b" + "0" * 24, "q" * 51 + ".b" + "0" * 24, 42])
def test_bad_batch_ids_are_refused_in_one_line(cluster: JobService, queue_name: str, batch: object) -> None:
    _setup(cluster, queue_name)
    for call in (lambda: cluster.batch_status(batch),  # type: ignore[arg-type]
                 lambda: cluster.enqueue(queue_name, [Job(b"x")], batch=batch)):  # type: ignore[arg-type]
        with pytest.raises(InvalidRequest, match="batch must be a batch id") as info:
            call()
        assert "\n" not in str(info.value)
    assert cluster.count(queue_name, "pending") == 0


def test_an_unknown_batch_is_named(cluster: JobService, queue_name: str) -> None:
    done_q = _setup(cluster, queue_name)
    with pytest.raises(InvalidRequest, match=f"names the queue {queue_name}, not its callback's {done_q}"):
        cluster.create_batch(done_q, Job(b"cb"), batch=f"{queue_name}.b" + "1" * 24)
    unknown = f"{queue_name}.b" + "0" * 24
    with pytest.raises(InvalidRequest, match=f"no batch {unknown} "):
        cluster.enqueue(queue_name, [Job(b"x")], batch=unknown)
    assert cluster.count(queue_name, "pending") == 0


def test_a_repeated_idempotent_enqueue_joins_no_batch_again(cluster: JobService, queue_name: str) -> None:
    done_q = _setup(cluster, queue_name)
    first = cluster.create_batch(done_q, Job(b"first"))
    other = cluster.create_batch(done_q, Job(b"other"))
    stored = cluster.enqueue(queue_name, [Job(b"a"), Job(b"b", unique="u")], idempotency_key="k", batch=first)
    # The repeat answers the first call's jobs; naming another batch moves none of them.
    assert cluster.enqueue(queue_name, [Job(b"a"), Job(b"b", unique="u")], idempotency_key="k",
                           batch=other) == stored
    assert (cluster.batch_status(first).total, cluster.batch_status(other).total) == (2, 0)
    assert sorted(_run_all(cluster, queue_name)) == sorted(stored)
    cluster.seal_batch(first)
    cluster.seal_batch(other)
    status = cluster.batch_status(first)
    assert (status.state, status.succeeded, status.failed) == ("released", 2, 0)
    assert sorted(j.body for j in cluster.dequeue(done_q, 10)) == [b"first", b"other"]


def test_a_refused_join_frees_the_idempotency_key_for_the_call_sent_again(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    done_q = _setup(cluster, queue_name)
    batch = cluster.create_batch(done_q, Job(b"cb"))
    control = cluster.core.control
    join = control.batch_join

    def refused(*args: object) -> object:
        raise StorageError("the control store refuses writes")

    monkeypatch.setattr(control, "batch_join", refused)
    with pytest.raises(StorageError, match="were cancelled: nothing of the call will run"):
        cluster.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="k", batch=batch)
    monkeypatch.setattr(control, "batch_join", join)
    # Sent again whole, with its key: new jobs, in the batch; the withdrawn ones are not answered.
    stored = cluster.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="k", batch=batch)
    assert {cluster.lookup(stored)[d].state for d in stored} == {JobState.PENDING}
    assert cluster.batch_status(batch).total == 2
    assert sorted(_run_all(cluster, queue_name)) == sorted(stored)
    status = cluster.seal_batch(batch)
    assert (status.state, status.succeeded, status.failed) == ("released", 2, 0)
    assert [j.body for j in cluster.dequeue(done_q, 10)] == [b"cb"]


def test_jobs_of_a_batch_that_ended_before_they_joined_are_withdrawn(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch ends between the enqueue's check and its join: the jobs
    are cancelled, so the call sent again (its idempotency key freed) does
    not leave them stored twice."""
    done_q = _setup(cluster, queue_name)
    batch = cluster.create_batch(done_q, Job(b"cb"))
    control = cluster.core.control
    join = control.batch_join

    def sealed_first(target: str, descriptors: list[str]) -> bool:
        cluster.seal_batch(target)  # empty: it ends and releases its callback at once
        return join(target, descriptors)

    monkeypatch.setattr(control, "batch_join", sealed_first)
    with pytest.raises(InvalidRequest, match=f"batch {batch} became released .* cancelled, nothing of the call"):
        cluster.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="k", batch=batch)
    monkeypatch.setattr(control, "batch_join", join)
    assert cluster.count(queue_name, JobState.PENDING) == 0
    other = cluster.create_batch(done_q, Job(b"other"))
    stored = cluster.enqueue(queue_name, [Job(b"a"), Job(b"b")], idempotency_key="k", batch=other)
    assert sorted(_run_all(cluster, queue_name)) == sorted(stored)
    assert cluster.seal_batch(other).state == "released"


def test_a_join_gone_silent_keeps_the_idempotency_key_reserved(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    done_q = _setup(cluster, queue_name)
    batch = cluster.create_batch(done_q, Job(b"cb"))

    def silent(*args: object) -> object:
        raise ShardOutcomeUnknown("no answer from the control store")

    monkeypatch.setattr(cluster.core.control, "batch_join", silent)
    with pytest.raises(EnqueueOutcomeUnknown, match="may or may not be in the batch"):
        cluster.enqueue(queue_name, [Job(b"a")], idempotency_key="k", batch=batch)
    monkeypatch.setattr(idempotency, "WAIT_S", 0.2)
    # Sent again: refused while the first try's reservation holds, not stored twice.
    with pytest.raises(EnqueueRejected, match="still running"):
        cluster.enqueue(queue_name, [Job(b"a")], idempotency_key="k", batch=batch)
    assert cluster.count(queue_name, JobState.PENDING) == 1
