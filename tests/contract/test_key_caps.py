"""A queue's per-key cap (``QueueConfig.key_max_running``) on every setup:
no fairness key ever has more jobs RUNNING than the cap, whatever the
number of dequeuers, while the jobs without a key and the other keys go
on; each end of a claim frees its key's slot; the monitor settles what a
process that left held; bad caps are refused with nothing stored."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from pinlater import Ack, Checkpoint, Job, JobService, JobState
from pinlater.engine.key_slots import KeySlots
from pinlater.engine.slots import Slots, SlotsUnavailable
from pinlater.errors import InvalidRequest
from pinlater.operators import Monitor
from tests.support.caps import held_per_key, most_at_once, work_with_spans
from tests.support.waits import wait_for


def _bodies(jobs: list) -> Counter[bytes]:  # type: ignore[type-arg]
    return Counter(j.body for j in jobs)


def _other_process(cluster: JobService, source: str) -> JobService:
    """Another process over the same stores: slots of its own."""
    core = cluster.core
    return JobService(replace(core.sibling(), slots=Slots(core.control, core.shards),
                              key_slots=KeySlots(core.control, core.shards, core.slots.claims_of)), source=source)


def test_a_key_never_runs_more_than_its_cap_and_each_end_of_a_claim_frees_a_slot(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name)
    assert cluster.set_key_concurrency(queue_name, 2).key_max_running == 2
    cluster.enqueue(queue_name, [Job(b"a", key="A", attempts_allowed=5) for _ in range(8)])
    cluster.enqueue(queue_name, [Job(b"b", key="B", attempts_allowed=5) for _ in range(8)])
    cluster.enqueue(queue_name, [Job(b"-") for _ in range(3)])
    first = cluster.dequeue(queue_name, 100)
    assert _bodies(first) == Counter({b"a": 2, b"b": 2, b"-": 3})
    assert cluster.dequeue(queue_name, 100) == []  # both keys at their cap
    assert held_per_key(cluster, queue_name) == Counter({"A": 2, "B": 2})
    a = [j for j in first if j.body == b"a"]
    b = [j for j in first if j.body == b"b"]

    cluster.ack(queue_name, succeeded=[Ack(a[0].descriptor, claim=a[0].claim)])
    assert _bodies(cluster.dequeue(queue_name, 100)) == Counter({b"a": 1})
    cluster.ack(queue_name, failed=[Ack(b[0].descriptor, claim=b[0].claim)])
    assert _bodies(cluster.dequeue(queue_name, 100)) == Counter({b"b": 1})
    # A heartbeat keeps the slot; a move back to PENDING frees it.
    cluster.checkpoint(queue_name, [Checkpoint(b[1].descriptor, claim=b[1].claim)])
    assert cluster.dequeue(queue_name, 100) == []
    cluster.checkpoint(queue_name, [Checkpoint(b[1].descriptor, claim=b[1].claim, move_to_pending=True)])
    assert _bodies(cluster.dequeue(queue_name, 100)) == Counter({b"b": 1})
    # A stale ACK frees nothing.
    cluster.ack(queue_name, succeeded=[Ack(a[0].descriptor, claim=a[0].claim)])
    assert cluster.dequeue(queue_name, 100) == []
    assert cluster.count(queue_name, JobState.RUNNING) == 7  # the jobs without a key too
    assert held_per_key(cluster, queue_name) == Counter({"A": 2, "B": 2})


def test_acks_riding_on_a_dequeue_free_their_slots_for_it(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.set_key_concurrency(queue_name, 1)
    cluster.enqueue(queue_name, [Job(b"a", key="A") for _ in range(3)])
    [one] = cluster.dequeue(queue_name, 5)
    [two] = cluster.dequeue(queue_name, 5, succeeded=[Ack(one.descriptor, claim=one.claim)])
    [three] = cluster.dequeue(queue_name, 5, succeeded=[Ack(two.descriptor, claim=two.claim)])
    cluster.ack(queue_name, succeeded=[Ack(three.descriptor, claim=three.claim)])
    assert cluster.count(queue_name, JobState.SUCCEEDED) == 3


def test_a_claim_that_expires_frees_its_keys_slot(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, claim_timeout_ms=100)
    cluster.set_key_concurrency(queue_name, 1)
    cluster.enqueue(queue_name, [Job(b"a", key="A", attempts_allowed=3) for _ in range(2)])
    assert len(cluster.dequeue(queue_name, 5)) == 1
    assert cluster.dequeue(queue_name, 5) == []
    time.sleep(0.15)
    stats = Monitor(cluster.operators, queues=[queue_name]).run_once()
    assert stats.claims_repended == 1
    # The process finds its job no longer running under its claim.
    again = wait_for(lambda: cluster.dequeue(queue_name, 5), "the expired claim's slot freed", 5, 0.05)
    assert len(again) == 1
    assert held_per_key(cluster, queue_name) == Counter({"A": 1})


def test_a_process_that_leaves_with_jobs_running_is_settled_by_the_monitor(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name)
    cluster.set_key_concurrency(queue_name, 2)
    cluster.enqueue(queue_name, [Job(b"a", key="A") for _ in range(6)])
    other = _other_process(cluster, "leaving")
    gone = other.dequeue(queue_name, 5)
    assert len(gone) == 2
    other.core.key_slots.close()  # it leaves; its jobs run on
    Monitor(cluster.operators, queues=[queue_name]).run_once()
    assert held_per_key(cluster, queue_name) == Counter({"A": 2})  # its running jobs still count
    assert cluster.dequeue(queue_name, 5) == []
    # Another process ACKs them: the monitor's next pass frees the leaver's slots.
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in gone])
    Monitor(cluster.operators, queues=[queue_name]).run_once()
    assert held_per_key(cluster, queue_name) == Counter()
    assert len(cluster.dequeue(queue_name, 5)) == 2


def test_a_cap_set_on_a_busy_queue_counts_the_jobs_already_running(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"a", key="A") for _ in range(6)])
    running = cluster.dequeue(queue_name, 3)
    assert len(running) == 3
    cluster.set_key_concurrency(queue_name, 2)
    assert held_per_key(cluster, queue_name) == Counter({"A": 3})
    assert cluster.dequeue(queue_name, 5) == []
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in running[:2]])
    Monitor(cluster.operators, queues=[queue_name]).run_once()
    assert len(cluster.dequeue(queue_name, 5)) == 1


def test_ten_dequeuers_never_run_more_than_the_cap_of_a_key(cluster: JobService, queue_name: str) -> None:
    """Ten workers, each a process of its own, far above a cap of 2 per key:
    from the workers' own start and end times, no key ever had more than 2
    jobs running, and each key reached 2."""
    cap, per_key = 2, 24
    cluster.create_queue(queue_name)
    cluster.set_key_concurrency(queue_name, cap)
    cluster.enqueue(queue_name, [Job(k.encode(), key=k) for k in ("A", "B") for _ in range(per_key)])
    cluster.enqueue(queue_name, [Job(b"-") for _ in range(10)])
    spans: dict[bytes, list[tuple[float, float]]] = {b"A": [], b"B": [], b"-": []}
    lock = threading.Lock()
    deadline = time.monotonic() + 30

    def work(i: int) -> None:
        client = cluster if i == 0 else _other_process(cluster, f"w{i}")
        with contextlib.ExitStack() as stack:
            if client is not cluster:
                # Its own slots only: the stores are the cluster's, shared.
                stack.callback(client.core.key_slots.close)
            # Each job runs long enough that another worker's dequeue lands
            # inside it on 2 loaded cores, so that each key does reach its cap.
            work_with_spans(client, queue_name, 2 * per_key + 10, deadline, 0.1, spans, lock)

    with ThreadPoolExecutor(10) as pool:
        list(pool.map(work, range(10)))
    assert {k: len(s) for k, s in spans.items()} == {b"A": per_key, b"B": per_key, b"-": 10}
    assert most_at_once(spans[b"A"]) == cap
    assert most_at_once(spans[b"B"]) == cap
    assert cluster.count(queue_name, JobState.SUCCEEDED) == 2 * per_key + 10


def test_a_keyed_dequeue_hands_over_what_a_round_claimed_when_a_later_round_fails(
    cluster: JobService, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first round reads one key, claims its job and stops at the next
    key; the second round's step meets the control store gone. The job
    claimed is the caller's, not left RUNNING till its claim expires."""
    cluster.create_queue(queue_name)
    cluster.set_key_concurrency(queue_name, 5)
    cluster.enqueue(queue_name, [Job(b"a", key="A"), Job(b"b", key="B")])
    key_round = JobService._key_round  # the rounds are what this test is about
    rounds: list[int] = []

    def one_key_then_gone(self: JobService, queue: str, config: Any, shards: Any, n: int, read: int,
                          *rest: Any) -> Any:
        rounds.append(read)
        if len(rounds) > 1:
            raise SlotsUnavailable("the control store cannot be reached")
        return key_round(self, queue, config, shards, n, 1, *rest)

    monkeypatch.setattr(JobService, "_key_round", one_key_then_gone)
    got = cluster.dequeue(queue_name, 2)
    assert len(rounds) == 2
    assert _bodies(got) == Counter({b"a": 1})
    assert cluster.count(queue_name, JobState.RUNNING) == 1
    monkeypatch.undo()
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in got])
    assert _bodies(cluster.dequeue(queue_name, 2)) == Counter({b"b": 1})


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, 10**7, "2"])
def test_a_bad_key_cap_is_refused_in_one_line_and_nothing_is_stored(
    cluster: JobService, queue_name: str, bad: object
) -> None:
    cluster.create_queue(queue_name)
    cluster.set_key_concurrency(queue_name, 3)
    with pytest.raises(InvalidRequest) as caught:
        cluster.set_key_concurrency(queue_name, bad)  # type: ignore[arg-type]
    assert "\n" not in str(caught.value) and "key_max_running must be a whole number" in str(caught.value)
    assert cluster.queue_config(queue_name, fresh=True).key_max_running == 3
