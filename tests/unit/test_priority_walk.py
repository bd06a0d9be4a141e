"""pinlater.engine.priority_walk over memory shards: priority order across shards,
never more than the limit, and how many calls each shard gets."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from pinlater.engine.priority_walk import walk_priorities
from pinlater.states import JobState
from pinlater.stores.base import Claims, EnqueueItem, ScanQuery, ShardUnavailable
from pinlater.stores.memory.shard import MemoryBackend

Q = "q"


def shards_with(*jobs_by_shard: Sequence[int]) -> list[MemoryBackend]:
    """One memory shard per argument, holding one runnable job per priority listed."""
    shards = []
    for n, priorities in enumerate(jobs_by_shard):
        shard = MemoryBackend(f"m{n}", clock=lambda: 1_000)
        shard.create_queue(Q, 3)
        shard.enqueue(Q, [EnqueueItem(b"x", p, 0, 1, "") for p in priorities])
        shards.append(shard)
    return shards


def walk(shards: list[MemoryBackend], limit: int, calls: Counter[str]) -> list[tuple[str, int]]:
    def take(shard: MemoryBackend, ps: Sequence[int], n: int, ahead: Sequence[int]) -> Claims:
        calls[shard.shard_id] += 1
        return shard.dequeue(Q, ps, n, "w", ahead)

    return [(shard.shard_id, job.priority) for shard, job in walk_priorities(shards, 3, limit, take).picked]


def test_an_empty_queue_is_one_call_per_shard() -> None:
    calls: Counter[str] = Counter()
    assert walk(shards_with((), (), ()), 10, calls) == []
    assert calls == {"m0": 1, "m1": 1, "m2": 1}


def test_priorities_go_first_across_shards() -> None:
    calls: Counter[str] = Counter()
    # The first shard visited holds only lower priorities than the second.
    got = walk(shards_with((3, 3, 2, 2), (1, 1)), 3, calls)
    assert got == [("m1", 1), ("m1", 1), ("m0", 2)]
    assert calls == {"m0": 2, "m1": 1}


def test_one_priority_everywhere_is_served_by_the_first_shard_alone() -> None:
    calls: Counter[str] = Counter()
    assert walk(shards_with((1, 1, 1), (1, 1, 1)), 2, calls) == [("m0", 1), ("m0", 1)]
    assert calls == {"m0": 1}


@pytest.mark.parametrize("limit", [1, 2, 5, 9, 20])
def test_never_more_than_the_limit_and_best_priorities_first(limit: int) -> None:
    shards = shards_with((3, 2, 1), (2, 2, 3), (1, 3))
    got = walk(shards, limit, Counter())
    assert len(got) == min(limit, 8)
    assert [p for _, p in got] == sorted(p for _, p in got)
    assert [p for _, p in got] == [1, 1, 2, 2, 2, 3, 3, 3][:limit]
    # Nothing was claimed that was not returned.
    running = sum(len(s.scan(ScanQuery(Q, p, JobState.RUNNING))) for s in shards for p in (1, 2, 3))
    assert running == len(got)


def test_an_unavailable_shard_is_left_out() -> None:
    shards = shards_with((1,), (2,))

    def take(shard: MemoryBackend, ps: Sequence[int], n: int, ahead: Sequence[int]) -> Claims:
        if shard.shard_id == "m0":
            raise ShardUnavailable("down")
        return shard.dequeue(Q, ps, n, "w", ahead)

    walked = walk_priorities(shards, 3, 5, take)
    assert [(s.shard_id, j.priority) for s, j in walked.picked] == [("m1", 2)]
    assert [(s.shard_id, str(e)) for s, e in walked.failed] == [("m0", "down")]
