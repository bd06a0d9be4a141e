"""Per-key limits on every setup. A shard serves keyed lanes under the
allowances a dequeue hands it (``ShardBackend.dequeue(allow=...)``), says
which keys it would serve first (``lane_keys``) and counts its running jobs
per owner and key (``running_owners``); a queue's ``key_rate`` holds over
the whole cluster, and a bad one is refused in one line with nothing
stored."""

from __future__ import annotations

import math
import random
import time
from collections import Counter

import pytest

from pinlater import Ack, Job, JobService
from pinlater.errors import InvalidRequest
from pinlater.states import JobState
from pinlater.stores.base import AckItem, CheckpointItem, ClaimedJob, EnqueueItem, FailItem, ShardBackend


class OneShard:
    """A queue on the cluster's first shard, through the shard's own calls."""

    def __init__(self, cluster: JobService, queue: str) -> None:
        cluster.create_queue(queue)
        self.be: ShardBackend = cluster.core.shards.all()[0]
        self.queue = queue

    def enqueue(self, n: int, key: str = "") -> None:
        body = (key or "-").encode()
        self.be.enqueue(self.queue, [EnqueueItem(body, 1, None, 2, "", key=key) for _ in range(n)])

    def dequeue(self, n: int, allow: dict[str, int] | None, token: str | None = None) -> list[ClaimedJob]:
        return self.be.dequeue(self.queue, [1], n, "limits", token=token, allow=allow).jobs


def _keys(jobs: list[ClaimedJob]) -> Counter[str]:
    return Counter(j.key for j in jobs)


def test_a_key_gets_at_most_its_allowance_and_one_without_any_loses_its_turn(
    cluster: JobService, queue_name: str
) -> None:
    shard = OneShard(cluster, queue_name)
    for key in ("A", "B", "C"):
        shard.enqueue(5, key)
    allow = {"A": 1, "B": 0, "C": 2}
    got = shard.dequeue(10, allow)
    assert _keys(got) == Counter({"A": 1, "C": 2})
    assert all(j.body == j.key.encode() for j in got)  # each job reports its own key
    assert allow == {"A": 0, "B": 0, "C": 0}  # counted down as taken
    # Every lane has lost its turn since the last job: the call ended, and
    # the rest are still there for the next.
    rest = shard.dequeue(20, {"A": 9, "B": 9, "C": 9})
    assert _keys(rest) == Counter({"A": 4, "B": 5, "C": 3})


def test_a_key_without_an_allowance_ends_the_call_and_keeps_its_turn(cluster: JobService, queue_name: str) -> None:
    shard = OneShard(cluster, queue_name)
    shard.enqueue(3, "A")
    shard.enqueue(3, "B")
    assert shard.dequeue(5, {"B": 5}) == []  # A is first in turn
    got = shard.dequeue(2, {"A": 5, "B": 5})
    assert [j.key for j in got] == ["A", "B"]


def test_jobs_without_a_key_are_never_limited(cluster: JobService, queue_name: str) -> None:
    shard = OneShard(cluster, queue_name)
    shard.enqueue(3, "A")
    shard.enqueue(4)
    got = shard.dequeue(10, {"A": 0})
    assert _keys(got) == Counter({"": 4})
    assert _keys(shard.dequeue(10, {"A": 1})) == Counter({"A": 1})


def test_the_keys_a_dequeue_would_serve_first_and_running_jobs_per_key(
    cluster: JobService, queue_name: str
) -> None:
    shard = OneShard(cluster, queue_name)
    assert shard.be.lane_keys(queue_name, [1], 10) == []
    shard.enqueue(2, "A")
    shard.enqueue(2)
    shard.enqueue(2, "B")
    assert set(shard.be.lane_keys(queue_name, [1, 2, 3], 10)) == {"A", "B"}
    token = "0123456789abcdef"
    got = shard.dequeue(6, None, token=token)
    assert len(got) == 6
    # Lanes served empty stay in turn until met, but no allowance is asked for them.
    assert shard.be.lane_keys(queue_name, [1, 2, 3], 10) == []
    assert shard.be.running_owners(queue_name, 1) == {("01234567", "A"): 2, ("01234567", "B"): 2,
                                                       ("01234567", ""): 2}


def test_a_key_rate_holds_over_the_whole_cluster(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    # So slow that each key's bucket holds the one job it starts full with.
    cluster.set_key_rate(queue_name, 0.001)
    cluster.enqueue(queue_name, [Job(b"a", key="A") for _ in range(20)])
    cluster.enqueue(queue_name, [Job(b"b", key="B") for _ in range(20)])
    cluster.enqueue(queue_name, [Job(b"-") for _ in range(5)])
    taken = []
    for _ in range(4):  # again and again: the buckets stay empty
        taken += cluster.dequeue(queue_name, 100)
    assert Counter(j.body for j in taken) == Counter({b"a": 1, b"b": 1, b"-": 5})
    cluster.ack(queue_name, succeeded=[Ack(j.descriptor, claim=j.claim) for j in taken])
    # Lifted: the rest flow.
    assert cluster.set_key_rate(queue_name, None).key_rate is None
    rest = []
    for _ in range(10):
        rest += cluster.dequeue(queue_name, 100)
    assert Counter(j.body for j in rest) == Counter({b"a": 19, b"b": 19})


def test_a_key_rate_gives_back_what_a_dequeue_did_not_use(cluster: JobService, queue_name: str) -> None:
    shard = OneShard(cluster, queue_name)
    cluster.set_key_rate(queue_name, 0.001)
    shard.enqueue(3)
    shard.enqueue(1, "A")
    # Jobs without a key came first, so they have the first turn: A's one
    # token is taken for a dequeue of 1 that one of them fills, and must go
    # back, or A's job would never run.
    bodies = []
    for _ in range(6):
        bodies += [j.body for j in cluster.dequeue(queue_name, 1)]
    assert bodies[0] == b"-"
    assert Counter(bodies) == Counter({b"A": 1, b"-": 3})


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -1.0, 2e9])
def test_a_bad_key_rate_is_refused_in_one_line_with_nothing_stored(
    cluster: JobService, queue_name: str, bad: float
) -> None:
    cluster.create_queue(queue_name)
    cluster.set_key_rate(queue_name, 5.0)
    with pytest.raises(InvalidRequest) as caught:
        cluster.set_key_rate(queue_name, bad)
    assert "\n" not in str(caught.value) and "key_rate" in str(caught.value)
    assert cluster.queue_config(queue_name, fresh=True).key_rate == 5.0


# A claim's owner is its token's first 8 characters (CLAIM_OWNER_LEN); the
# rest is new per call, as a token must be (a store answers a dequeue that
# repeats one with the jobs it claimed: a retry after a lost reply).
_OWNERS = ("01234567", "fedcba98", "aaaaaaaa")


@pytest.mark.parametrize("seed", range(4))
def test_running_owners_counts_the_claims_held_after_random_actions(
    cluster: JobService, queue_name: str, seed: int
) -> None:
    """The oracle is the calls' own answers: a job is running under the
    claim a dequeue gave it until a call that took it out of RUNNING said so.
    Priority 1 keeps lanes (keyed jobs), priority 2 has no keys."""
    rnd = random.Random(seed)
    shard = OneShard(cluster, queue_name)
    be, q = shard.be, queue_name
    running: dict[tuple[int, int], tuple[str, str]] = {}  # (priority, id) -> (claim, key)
    calls = 0

    def some(priority: int | None = None) -> list[tuple[int, int]]:
        held = sorted(at for at in running if priority in (None, at[0]))
        return rnd.sample(held, rnd.randint(0, len(held)))

    def gone(taken: list[tuple[int, int]], answers: list[bool]) -> None:
        for at, ok in zip(taken, answers, strict=True):
            if ok:
                del running[at]

    for _ in range(40):
        action = rnd.choice(["enqueue", "enqueue", "dequeue", "dequeue", "succeed", "fail", "stale",
                             "checkpoint", "cancel", "delete", "expire"])
        if action == "enqueue":
            p = rnd.choice([1, 2])
            be.enqueue(q, [EnqueueItem(b"x" * rnd.randint(0, 3000), p, None, 3, "",
                                       key=rnd.choice(["", "A", "B", "\u03a9"]) if p == 1 else "")
                           for _ in range(rnd.randint(1, 6))])
        elif action == "dequeue":
            calls += 1
            token = f"{rnd.choice(_OWNERS)}{calls:08x}"
            # Counted (a capped queue's) or not, the count is the same.
            counted = rnd.random() < 0.7
            for job in be.dequeue(q, [1, 2], rnd.randint(1, 5), "w", token=token, counted=counted).jobs:
                assert job.claim.startswith(token)
                running[(job.priority, job.local_id)] = (job.claim, job.key)
        elif action == "succeed":
            taken = some()
            gone(taken, be.ack_succeeded(q, [AckItem(p, i, "w", "", claim=running[(p, i)][0]) for p, i in taken]))
        elif action == "fail":
            taken = some()
            gone(taken, be.ack_failed(q, [FailItem(p, i, "w", "", 0, claim=running[(p, i)][0]) for p, i in taken]))
        elif action == "stale":  # an ACK naming another claim changes nothing
            taken = some()
            assert not any(be.ack_succeeded(q, [AckItem(p, i, "w", "", claim="f" * 16 + "@w") for p, i in taken]))
        elif action == "checkpoint":
            taken = some()
            moves = [rnd.random() < 0.5 for _ in taken]
            beats = [CheckpointItem(p, i, "w", None, move, None, None, None, claim=running[(p, i)][0])
                     for (p, i), move in zip(taken, moves, strict=True)]
            assert all(be.checkpoint(q, beats))
            gone(taken, moves)  # a heartbeat keeps its claim; a move to PENDING ends it
        elif action == "cancel":
            p = rnd.choice([1, 2])
            taken = some(p)
            found = be.cancel(q, p, [i for _, i in taken], "")
            assert [c.state for c in found] == [JobState.RUNNING] * len(taken)
            gone(taken, [True] * len(taken))
        elif action == "delete":
            p = rnd.choice([1, 2])
            taken = some(p)
            assert be.delete(q, p, JobState.RUNNING, [i for _, i in taken], 100) == len(taken)
            gone(taken, [True] * len(taken))
        else:
            p = rnd.choice([1, 2])
            time.sleep(0.005)  # every claim is older than a timeout of 0
            expired = be.expire_claims(q, p, 0, 10_000)
            held = [at for at in running if at[0] == p]
            assert expired.repended + expired.failed == len(held)
            gone(held, [True] * len(held))
        for p in (1, 2):
            want = Counter((claim[:8], key) for (pr, _), (claim, key) in running.items() if pr == p)
            assert be.running_owners(q, p) == dict(want), (action, p)


def test_lane_keys_reads_the_priorities_in_order_until_it_has_its_limit(cluster: JobService, queue_name: str) -> None:
    """What a dequeue of a few jobs asks for, and what its answer costs,
    stay those of its limit however many priorities hold lanes."""
    shard = OneShard(cluster, queue_name)
    be, q = shard.be, queue_name
    for p in (1, 2, 3):
        be.enqueue(q, [EnqueueItem(b"-", p, None, 2, "", key=f"p{p}k{i}") for i in range(10)])
    few = be.lane_keys(q, [1, 2, 3], 4)
    assert 4 <= len(few) <= 12 and all(k.startswith("p1") for k in few), few
    more = be.lane_keys(q, [1, 2, 3], 15)
    assert {k for k in more if k.startswith("p1")} == {f"p1k{i}" for i in range(10)}
    assert any(k.startswith("p2") for k in more) and not any(k.startswith("p3") for k in more), more
    # A dequeue of the keys asked for serves them, priority 1's first.
    got = shard.be.dequeue(q, [1, 2, 3], 4, "limits", allow=dict.fromkeys(few, 1)).jobs
    assert len(got) == 4 and {j.priority for j in got} == {1}
