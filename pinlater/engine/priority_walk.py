"""Which shard to ask for which priorities, so that a dequeue over several
shards serves priorities in order (a priority-1 job on any shard goes before
a priority-2 job on another) with about one call per shard.

Each shard has a *floor*: the best priority that may still have runnable
jobs there (1 until the shard has answered). The walk asks the shard with
the lowest floor (ties: in the given, random, order) for every priority from
its floor up to the lowest floor of the other shards: nothing better can be
waiting elsewhere, so claiming those is safe. Along with its jobs the shard
reports the first of the remaining priorities that has runnable jobs (its
new floor) or that it has none, so the walk never asks again for nothing.

An empty queue costs exactly one call per shard; jobs of one priority cost
one call per shard until the limit is met. Nothing is claimed beyond the
limit (each call asks for what is still missing).

A shard whose call fails, whatever the error, is left out of the rest of
the walk, which goes on with the others: what earlier calls claimed is
returned with the failures, never dropped (a claimed job nobody holds would
wait for its claim to time out and spend an attempt without running), and
so is what the failed call had claimed before it failed (``claimed_before``).
A call whose shard stopped answering after it was sent
(``ShardOutcomeUnknown``) ends the walk: it may have claimed all it was
asked for, and the caller's caps count those jobs as running (the slots
they may hold stay in doubt, ``pinlater.engine.slots``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pinlater.errors import PinLaterError
from pinlater.stores.base import ClaimedJob, Claims, ShardOutcomeUnknown, claimed_before

B = TypeVar("B")

# (shard, priorities to take in order, how many at most, look-ahead priorities)
Take = Callable[[B, Sequence[int], int, Sequence[int]], Claims]


@dataclass(slots=True)
class Walk(Generic[B]):
    """What a walk got: the jobs with their shards, in priority order, and
    each shard whose call failed, with its error."""

    picked: list[tuple[B, ClaimedJob]] = field(default_factory=list)
    failed: list[tuple[B, PinLaterError]] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)  # keys that ended a shard's call (Claims.stopped_at)


def walk_priorities(shards: Sequence[B], priorities: int, limit: int, take: Take[B]) -> Walk[B]:
    """Up to ``limit`` jobs from ``shards``, priorities 1..``priorities`` in
    order. A shard whose call raises is left out of this walk (``failed``)."""
    floors = dict.fromkeys(range(len(shards)), 1)  # dicts keep the visit order
    walk: Walk[B] = Walk()
    out = walk.picked
    while floors and len(out) < limit:
        index = min(floors, key=floors.__getitem__)  # the first of the lowest
        first = floors.pop(index)
        last = min(floors.values(), default=priorities)
        shard = shards[index]
        try:
            claims = take(shard, range(first, last + 1), limit - len(out), range(last + 1, priorities + 1))
        except PinLaterError as exc:
            walk.failed.append((shard, exc))
            out += [(shard, job) for job in claimed_before(exc)]
            if isinstance(exc, ShardOutcomeUnknown):
                break  # it may have claimed all it was asked for
            continue
        out += [(shard, job) for job in claims.jobs]
        if claims.stopped_at is not None:
            walk.stopped.append(claims.stopped_at)
        # A floor only rises (the shard has no runnable job up to ``last``),
        # so the walk ends.
        if claims.next_priority is not None and claims.next_priority > last:
            floors[index] = claims.next_priority
    return walk
