"""Fair service between fairness keys on the memory shard: the rules of
the Redis scripts (``lua/_prelude.lua``, ``dequeue.lua``) and of the MySQL
shard, one job at a time, so that a test can hold each store against them.

A priority keeps lanes from its first keyed pending job until no keyed
lane is left: one lane per key, and lane "" for jobs without one. Lanes
take turns in the order of their turn numbers. A dequeue takes the lane of
the lowest turn that has a due job, one job from it, and gives the lane the
next turn. A keyed lane met empty at its turn leaves the turns, one whose
first job is not due then waits for it and gets the next turn when it is
due. Lane "" never leaves: without a due job it keeps its turn, so jobs
without a key that come after a quiet spell are next.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field

# As dequeue.lua: lanes that came due join the turns, at most this many
# beyond the limit per call.
PROMOTE = 100
# How many lanes in turn ``in_turn`` reads at most for ``count`` (as the
# Redis and MySQL shards' lane_keys).
SCAN = 4
SCAN_MORE = 16


def _order(lane: str) -> bytes:
    return lane.encode("utf-8")  # Redis orders equal scores by member bytes


@dataclass
class Lanes:
    """One priority's lanes. ``jobs``: keyed lane -> local id -> run_after
    (lane "" is read from the pending jobs themselves). The turns and each
    lane's jobs are also kept in heaps, with entries that no longer match
    ``turns`` or ``jobs`` skipped as they surface, so that a job costs a
    few heap steps however many lanes and jobs there are."""

    turn: int = 0
    turns: dict[str, int] = field(default_factory=lambda: {"": 0})
    waits: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, dict[int, int]] = field(default_factory=dict)
    _in_turn: list[tuple[int, str]] = field(default_factory=lambda: [(0, "")])
    _heads: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # lane -> (run_after, id)

    def _give_turn(self, lane: str) -> None:
        self.turn += 1
        self.turns[lane] = self.turn
        heapq.heappush(self._in_turn, (self.turn, lane))

    def add(self, lane: str, local_id: int, run_after: int, now: int) -> None:
        """A keyed job entered pending."""
        self.jobs.setdefault(lane, {})[local_id] = run_after
        heapq.heappush(self._heads.setdefault(lane, []), (run_after, local_id))
        if lane in self.turns:
            return
        if run_after <= now:
            self.waits.pop(lane, None)
            self._give_turn(lane)
        elif lane not in self.waits or self.waits[lane] > run_after:
            self.waits[lane] = run_after

    def drop(self, lane: str, local_id: int) -> None:
        jobs = self.jobs.get(lane)
        if jobs is not None:
            jobs.pop(local_id, None)
            if not jobs:
                del self.jobs[lane]
                self._heads.pop(lane, None)

    def _head(self, lane: str) -> tuple[int, int] | None:
        """The lane's first job, (run_after, id), or None."""
        heap, jobs = self._heads.get(lane), self.jobs.get(lane)
        if heap is None or jobs is None:
            return None
        while heap and jobs.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # claimed, deleted, or pending again with another run_after
        return heap[0] if heap else None

    @property
    def ended(self) -> bool:
        return len(self.turns) == 1 and not self.waits

    def take(self, want: int, now: int, plain_head: Callable[[], tuple[int, int] | None],
             claim: Callable[[int], None], allow: dict[str, int] | None = None) -> str | None:
        """Up to ``want`` jobs in turn. ``plain_head()``: the first pending job
        without a key, (run_after, local id), or None; ``claim(id)`` claims a
        job (so it is no longer pending).

        ``allow`` (per-key limits): how many more jobs each key may start,
        counted down as they are taken. A keyed lane with a due job whose
        key has 0 left goes last without a job, as if served: it loses the
        turn it cannot use. One whose key is not in ``allow``, or that lost
        its turn already since the last job taken (so every lane has), ends
        the call keeping its turn and is returned. Lane "" is never limited.
        An empty lane, or one whose first job is not due, leaves the turns
        as without allowances."""
        due = sorted((s, _order(lane), lane) for lane, s in self.waits.items() if s <= now)
        for _, _, lane in due[: want + PROMOTE]:
            del self.waits[lane]
            self._give_turn(lane)
        taken = 0
        passed: set[str] = set()
        while taken < want:
            ready = self._next_ready(now, plain_head)
            if ready is None:
                return None
            lane = ready
            if lane == "":
                head = plain_head()
                assert head is not None
                claim(head[1])
            else:
                first = self._head(lane)
                if first is None:
                    del self.turns[lane]
                    continue
                s, local_id = first
                if s > now:
                    del self.turns[lane]
                    self.waits[lane] = s
                    continue
                if allow is not None:
                    left = allow.get(lane)
                    if left is None or lane in passed:
                        return lane
                    if left <= 0:
                        passed.add(lane)
                        self._give_turn(lane)
                        continue
                    allow[lane] = left - 1
                self.drop(lane, local_id)
                claim(local_id)
            taken += 1
            passed.clear()
            self._give_turn(lane)
        return None

    def in_turn(self, count: int, now: int) -> list[str]:
        """The keys of the first ``count`` keyed lanes in turn with a due job
        (among the first ``SCAN * count + SCAN_MORE``), once each,
        due waits promoted first as ``take`` promotes them: whose allowances
        a limited ``take`` of ``count`` jobs needs first."""
        due = sorted((s, _order(lane), lane) for lane, s in self.waits.items() if s <= now)
        for _, _, lane in due[: count + PROMOTE]:
            del self.waits[lane]
            self._give_turn(lane)
        # A lane served empty by another dequeue stays in turn until met:
        # only lanes with a due job count, among a bounded number read.
        first = heapq.nsmallest(SCAN * count + SCAN_MORE,
                                ((turn, lane) for lane, turn in self.turns.items() if lane != ""))
        due_now = [lane for _, lane in first if (head := self._head(lane)) is not None and head[0] <= now]
        return due_now[:count]

    def _next_ready(self, now: int, plain_head: Callable[[], tuple[int, int] | None]) -> str | None:
        """The lane of the lowest turn that is a keyed lane, or lane "" with
        a due job (lane "" without one keeps its turn); None if neither."""
        heap = self._in_turn
        passed: tuple[int, str] | None = None
        ready = None
        while heap:
            turn, lane = heap[0]
            if self.turns.get(lane) != turn:
                heapq.heappop(heap)  # a turn given up or taken again
                continue
            if lane != "":
                ready = lane
                break
            head = plain_head()
            if head is not None and head[0] <= now:
                ready = lane
                break
            passed = heapq.heappop(heap)
        if passed is not None:
            heapq.heappush(heap, passed)
        return ready
