"""Fair service between fairness keys on the memory shard: the same lanes,
turns and order as the Redis scripts (``lua/_prelude.lua``, ``dequeue.lua``),
step for step, so a test can hold one against the other.

A priority keeps lanes from its first keyed pending job until every lane
is empty. One lane per key and lane "" for jobs without one; a lane whose
first job is runnable has a turn, one whose first job is not waits for its
run_after. A dequeue takes the lane of the lowest turn, one job from it,
and gives the lane the next turn; a lane met empty at its turn leaves the
turns, one whose first job is not due then waits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# As dequeue.lua: lanes that came due join the turns, at most this many
# beyond the limit per call.
PROMOTE = 100


def _order(lane: str) -> bytes:
    return lane.encode("utf-8")  # Redis orders equal scores by member bytes


@dataclass
class Lanes:
    """One priority's lanes. ``jobs``: lane -> local id -> run_after."""

    turn: int = 0
    turns: dict[str, int] = field(default_factory=dict)
    waits: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, dict[int, int]] = field(default_factory=dict)

    def touch(self, lane: str, run_after: int, now: int) -> None:
        if lane in self.turns:
            return
        if run_after <= now:
            self.waits.pop(lane, None)
            self.turn += 1
            self.turns[lane] = self.turn
        elif lane not in self.waits or self.waits[lane] > run_after:
            self.waits[lane] = run_after

    def add(self, lane: str, local_id: int, run_after: int, now: int) -> None:
        self.jobs.setdefault(lane, {})[local_id] = run_after
        self.touch(lane, run_after, now)

    def drop(self, lane: str, local_id: int) -> None:
        jobs = self.jobs.get(lane)
        if jobs is not None:
            jobs.pop(local_id, None)
            if not jobs:
                del self.jobs[lane]

    def head(self, lane: str) -> tuple[int, int] | None:
        """The lane's first job: (run_after, local id)."""
        jobs = self.jobs.get(lane)
        if not jobs:
            return None
        return min((s, i) for i, s in jobs.items())

    @property
    def empty(self) -> bool:
        return not self.turns and not self.waits

    def take(self, want: int, now: int, pending_at: Callable[[int], int | None], claim: Callable[[int], bool]) -> int:
        """Up to ``want`` jobs in turn; ``pending_at(id)``: the job's run_after
        while it is pending, else None; ``claim(id)`` claims it (False: no
        such job). How many were claimed. One job at a time, always from
        the lane of the lowest turn: what the script's batched reads add
        up to."""
        due = sorted((s, _order(lane), lane) for lane, s in self.waits.items() if s <= now)
        for _, _, lane in due[: want + PROMOTE]:
            del self.waits[lane]
            self.turn += 1
            self.turns[lane] = self.turn
        got = taken = 0
        while taken < want and self.turns:
            lane = min(self.turns, key=lambda name: (self.turns[name], _order(name)))
            first = self.head(lane)
            if first is None:
                del self.turns[lane]
                continue
            s, local_id = first
            if s > now:
                del self.turns[lane]
                self.waits[lane] = s
                continue
            self.drop(lane, local_id)
            taken += 1
            # A lane's member is a pending job (every way out of pending
            # takes it out of its lane); should one not be, it is not claimed.
            if pending_at(local_id) is not None and claim(local_id):
                got += 1
            # Served: the next turn, whatever the lane has left (met empty
            # or not due at that turn, it leaves then).
            self.turn += 1
            self.turns[lane] = self.turn
        return got
