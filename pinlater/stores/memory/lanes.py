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

from collections.abc import Callable
from dataclasses import dataclass, field

# As dequeue.lua: lanes that came due join the turns, at most this many
# beyond the limit per call.
PROMOTE = 100


def _order(lane: str) -> bytes:
    return lane.encode("utf-8")  # Redis orders equal scores by member bytes


@dataclass
class Lanes:
    """One priority's lanes. ``jobs``: keyed lane -> local id -> run_after
    (lane "" is read from the pending jobs themselves)."""

    turn: int = 0
    turns: dict[str, int] = field(default_factory=lambda: {"": 0})
    waits: dict[str, int] = field(default_factory=dict)
    jobs: dict[str, dict[int, int]] = field(default_factory=dict)

    def add(self, lane: str, local_id: int, run_after: int, now: int) -> None:
        """A keyed job entered pending."""
        self.jobs.setdefault(lane, {})[local_id] = run_after
        if lane in self.turns:
            return
        if run_after <= now:
            self.waits.pop(lane, None)
            self.turn += 1
            self.turns[lane] = self.turn
        elif lane not in self.waits or self.waits[lane] > run_after:
            self.waits[lane] = run_after

    def drop(self, lane: str, local_id: int) -> None:
        jobs = self.jobs.get(lane)
        if jobs is not None:
            jobs.pop(local_id, None)
            if not jobs:
                del self.jobs[lane]

    @property
    def ended(self) -> bool:
        return len(self.turns) == 1 and not self.waits

    def take(self, want: int, now: int, plain_head: Callable[[], tuple[int, int] | None],
             claim: Callable[[int], None]) -> None:
        """Up to ``want`` jobs in turn. ``plain_head()``: the first pending job
        without a key, (run_after, local id), or None; ``claim(id)`` claims a
        job (so it is no longer pending)."""
        due = sorted((s, _order(lane), lane) for lane, s in self.waits.items() if s <= now)
        for _, _, lane in due[: want + PROMOTE]:
            del self.waits[lane]
            self.turn += 1
            self.turns[lane] = self.turn
        taken = 0
        while taken < want:
            ready = None
            for lane in sorted(self.turns, key=self.turns.__getitem__):
                if lane != "":
                    ready = lane
                    break
                head = plain_head()
                if head is not None and head[0] <= now:
                    ready = lane
                    break
            if ready is None:
                return
            lane = ready
            if lane == "":
                head = plain_head()
                assert head is not None
                claim(head[1])
            else:
                jobs = self.jobs.get(lane)
                if not jobs:
                    del self.turns[lane]
                    continue
                s, local_id = min((s, i) for i, s in jobs.items())
                if s > now:
                    del self.turns[lane]
                    self.waits[lane] = s
                    continue
                self.drop(lane, local_id)
                claim(local_id)
            taken += 1
            self.turn += 1
            self.turns[lane] = self.turn
