"""Fairness keys on every setup: among the runnable jobs of a priority a
dequeue serves keys in turn (jobs without a key share one turn), whatever
path brought a job back to PENDING; keys are shown by lookups and bad keys
are refused in one line with nothing stored."""

from __future__ import annotations

import time

import pytest

from pinlater import Ack, Job, JobService, JobState
from pinlater.descriptor import JobDescriptor
from pinlater.errors import EnqueueRejected
from pinlater.limits import MAX_KEY_BYTES
from pinlater.stores.base import CheckpointItem, ClaimedJob, EnqueueItem, FailItem, ShardBackend
from tests.support.stores import ALL_SETUPS, settings_for


class OneShard:
    """A queue on the cluster's first shard, through the shard's own calls:
    the order rules hold per shard, and a cluster's enqueue picks a shard
    at random."""

    def __init__(self, cluster: JobService, queue: str) -> None:
        cluster.create_queue(queue)
        self.be: ShardBackend = cluster.core.shards.all()[0]
        self.queue = queue

    def enqueue(self, body: bytes, n: int, key: str = "", attempts: int = 2) -> None:
        self.be.enqueue(self.queue, [EnqueueItem(body, 1, None, attempts, "", key=key) for _ in range(n)])

    def dequeue(self, n: int) -> list[ClaimedJob]:
        return self.be.dequeue(self.queue, [1], n, "fair").jobs


def _shard_of(descriptor: str) -> str:
    return JobDescriptor.parse(descriptor).shard


def _keys(cluster: JobService, queue: str, jobs: list[str]) -> list[str]:
    infos = cluster.lookup(jobs)
    return [infos[d].key for d in jobs]


def _drain_one_by_one(cluster: JobService, queue: str, most: int) -> list[str]:
    """Descriptors in the order single dequeues took them (each ACKed)."""
    taken: list[str] = []
    for _ in range(most):
        got = cluster.dequeue(queue, 1)
        if not got:
            break
        taken.append(got[0].descriptor)
        cluster.ack(queue, succeeded=[Ack(got[0].descriptor, claim=got[0].claim)])
    return taken


def test_a_key_enqueued_after_a_big_backlog_is_served_in_turn_with_it(
    cluster: JobService, queue_name: str
) -> None:
    shard = OneShard(cluster, queue_name)
    shard.enqueue(b"a", 200, key="A")
    shard.enqueue(b"b", 5, key="B")
    order = []
    for _ in range(205):
        [job] = shard.dequeue(1)
        order.append(job.body)
    assert order[:10] == [b"a", b"b"] * 5
    assert order[10:] == [b"a"] * 195


def test_keys_take_turns_over_the_whole_cluster(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"a", key="A") for _ in range(200)])
    small = set(cluster.enqueue(queue_name, [Job(b"b", key="B") for _ in range(5)]))
    taken = _drain_one_by_one(cluster, queue_name, 205)
    assert len(taken) == 205
    # A dequeue tries the shards in a random order, and each serves its
    # keys in turn: B's last job comes early whichever shards they are on.
    assert max(taken.index(d) for d in small) < 60
    [shard] = {_shard_of(d) for d in small}
    on_b_shard = [d in small for d in taken if _shard_of(d) == shard]
    if len(on_b_shard) > len(small):  # A's jobs went to B's shard too: A, B, A, B, ... there
        assert on_b_shard[:10] == [False, True] * 5


def test_jobs_without_a_key_share_one_turn_and_keys_alternate_within_one_dequeue(
    cluster: JobService, queue_name: str
) -> None:
    shard = OneShard(cluster, queue_name)
    shard.enqueue(b"plain", 4)
    shard.enqueue(b"x", 4, key="X")
    shard.enqueue(b"y", 2, key="Y")
    got = shard.dequeue(7)
    assert [j.body for j in got] == [b"plain", b"x", b"y", b"plain", b"x", b"y", b"plain"]


def test_priorities_stay_strict_between_keys(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, priorities=2)
    cluster.enqueue(queue_name, [Job(b"low", priority=2, key="A") for _ in range(3)])
    cluster.enqueue(queue_name, [Job(b"high", priority=1, key="B") for _ in range(3)])
    got = cluster.dequeue(queue_name, 6)
    assert [j.body for j in got] == [b"high"] * 3 + [b"low"] * 3


def test_a_retried_or_moved_back_job_goes_behind_its_keys_older_jobs(
    cluster: JobService, queue_name: str
) -> None:
    shard = OneShard(cluster, queue_name)
    be, q = shard.be, queue_name
    shard.enqueue(b"a1", 1, key="A", attempts=3)
    shard.enqueue(b"a2", 1, key="A")
    shard.enqueue(b"b1", 1, key="B")
    shard.enqueue(b"b2", 1, key="B")
    time.sleep(0.005)  # so that jobs back in PENDING are due later than those enqueued
    [a1] = shard.dequeue(1)
    assert a1.body == b"a1"
    # Back in PENDING, each is behind the older jobs of its key, and the
    # keys still alternate.
    assert be.ack_failed(q, [FailItem(1, a1.local_id, "fair", "", delay_ms=1, claim=a1.claim)]) == [True]
    [b1] = shard.dequeue(1)
    assert b1.body == b"b1"
    moved = CheckpointItem(1, b1.local_id, "fair", None, True, None, None, None, claim=b1.claim)
    assert be.checkpoint(q, [moved]) == [True]
    time.sleep(0.01)  # a1's retry delay
    got = shard.dequeue(4)
    assert [j.body for j in got] == [b"a2", b"b2", b"a1", b"b1"]


def test_a_key_whose_jobs_are_not_due_yet_waits_without_holding_the_others(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name)
    later = cluster.core.shards.all()[0].now_ms() + 3_600_000
    cluster.enqueue(queue_name, [Job(b"later", key="L", run_after_ms=later) for _ in range(3)])
    cluster.enqueue(queue_name, [Job(b"now", key="N") for _ in range(3)])
    got = cluster.dequeue(queue_name, 10)
    assert [j.body for j in got] == [b"now"] * 3
    assert cluster.count(queue_name, JobState.PENDING, future=True) == 3


def test_deleted_keyed_jobs_are_never_dequeued(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    doomed = cluster.enqueue(queue_name, [Job(b"doomed", key="D") for _ in range(3)])
    kept = cluster.enqueue(queue_name, [Job(b"kept", key="K") for _ in range(2)])
    assert cluster.delete_jobs(queue_name, JobState.PENDING, body_regex="doomed") == 3
    got = cluster.dequeue(queue_name, 10)
    assert sorted(j.descriptor for j in got) == sorted(kept)
    assert not set(doomed) & {j.descriptor for j in got}


def test_lookups_and_scans_show_the_key(cluster: JobService, queue_name: str, setup: str) -> None:
    cluster.create_queue(queue_name)
    [keyed, plain] = cluster.enqueue(queue_name, [Job(b"k", key="tenant-é"), Job(b"p")])
    assert _keys(cluster, queue_name, [keyed, plain]) == ["tenant-é", ""]
    scanned = cluster.scan(queue_name, JobState.PENDING).jobs
    assert sorted(j.key for j in scanned) == ["", "tenant-é"]
    # A process whose first call is a read sees them too (it learns the
    # store's layout before writing the read); a store of servers is shared.
    if ALL_SETUPS[setup].servers:
        with JobService.from_settings(settings_for(setup), source="fresh") as fresh:
            assert fresh.lookup([keyed])[keyed].key == "tenant-é"
        with JobService.from_settings(settings_for(setup), source="fresh") as fresh:
            assert {j.key for j in fresh.scan(queue_name, JobState.PENDING).jobs} == {"", "tenant-é"}


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("k" * (MAX_KEY_BYTES + 1), f"job key is {MAX_KEY_BYTES + 1} bytes in UTF-8; the most is {MAX_KEY_BYTES}"),
        ("é" * (MAX_KEY_BYTES // 2 + 1), f"job key is {MAX_KEY_BYTES + 2} bytes in UTF-8"),
        (b"bytes", "job key must be text, got a bytes"),
        (None, "job key must be text, got a NoneType"),
        (7, "job key must be text, got a int"),
        ("\ud800", "job key must be valid Unicode text"),
    ],
)
def test_bad_keys_are_refused_in_one_line_with_nothing_stored(
    cluster: JobService, queue_name: str, key: object, message: str
) -> None:
    cluster.create_queue(queue_name)
    with pytest.raises(EnqueueRejected) as refused:
        cluster.enqueue(queue_name, [Job(b"fine", key="ok"), Job(b"bad", key=key)])  # type: ignore[arg-type]
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    assert cluster.count(queue_name, JobState.PENDING, future=True) + cluster.count(queue_name, JobState.PENDING) == 0
