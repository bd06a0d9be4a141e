"""Group commit by natural batching: concurrent calls of the same kind that
arrive while one is running go together, as one, when it is done.

Per key (what must match for calls to be merged), at most one batch runs
at a time. A call whose key has nothing running runs at once, alone: no
timer, no added delay without concurrency. Calls that arrive while a batch
of their key runs wait; when it ends, the waiting calls (in arrival order,
up to ``max_weight`` in total) become the next batch, run by the thread of
the first of them, and so on. So under load each batch is what arrived
during the previous one, and the busier the key, the bigger the batches.

``run(key, items)`` gets the items of one batch and returns one outcome per
item, in order: a value, or an exception that is raised to that caller
alone. An exception raised by ``run`` itself goes to every caller of the
batch. Every caller gets its outcome before ``submit`` returns: a waiting
caller blocks until its batch has run (``run`` must end: the shard calls it
makes have timeouts), never giving up on it, so no outcome, such as claimed
jobs, is ever produced for a caller that is no longer there to take it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Generic, TypeAlias, TypeVar

K = TypeVar("K", bound=Hashable)
I = TypeVar("I")  # noqa: E741
R = TypeVar("R")

# What ``run`` returns for one item: its value, or the error for its caller.
Outcome: TypeAlias = "R | BaseException"


class _Call(Generic[I, R]):
    __slots__ = ("batch", "done", "item", "outcome", "wake", "weight")

    def __init__(self, item: I, weight: int) -> None:
        self.item = item
        self.weight = weight
        # Held until the call is woken (a bare lock: far cheaper than an
        # Event, and it is released exactly once).
        self.wake = threading.Lock()
        self.wake.acquire()
        self.done = False
        self.outcome: R | BaseException | None = None
        # Set when this call is woken to run the next batch (it is the first of it).
        self.batch: list[_Call[I, R]] | None = None


class _Key(Generic[I, R]):
    __slots__ = ("waiting",)

    def __init__(self) -> None:
        self.waiting: deque[_Call[I, R]] = deque()


class GroupCommit(Generic[K, I, R]):
    """See the module doc. ``max_weight`` caps a batch's total weight (a
    call heavier than that still runs, alone)."""

    def __init__(self, run: Callable[[K, list[I]], Sequence[Outcome[R]]], max_weight: int) -> None:
        self._run = run
        self.max_weight = max_weight
        self._lock = threading.Lock()
        # Keys with a batch running now, and the calls waiting behind it.
        self._busy: dict[K, _Key[I, R]] = {}
        # Batches run and calls in them, for tests and stats.
        self.batches = 0
        self.calls = 0

    def submit(self, key: K, item: I, weight: int = 1) -> R:
        """Runs ``item`` with the other calls of ``key`` that wait with it;
        its outcome (raised if an exception)."""
        call: _Call[I, R] = _Call(item, weight)
        with self._lock:
            state = self._busy.get(key)
            if state is None:
                self._busy[key] = _Key()
                batch: list[_Call[I, R]] | None = [call]
            else:
                state.waiting.append(call)
                batch = None
        if batch is None:
            call.wake.acquire()
            if not call.done:  # woken to run the next batch
                batch = call.batch
                assert batch is not None
        if batch is not None:
            self._run_batch(key, batch)
        outcome = call.outcome
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome  # type: ignore[return-value]

    def _run_batch(self, key: K, batch: list[_Call[I, R]]) -> None:
        try:
            outcomes: Sequence[Outcome[R]] = self._run(key, [c.item for c in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(f"a batch of {len(batch)} calls got {len(outcomes)} outcomes")
        except BaseException as exc:  # noqa: BLE001 -- handed to every caller of the batch
            outcomes = [exc] * len(batch)
        finally:
            self._next(key, len(batch))
        for c, outcome in zip(batch, outcomes, strict=True):
            c.outcome = outcome
            c.done = True
            if c is not batch[0]:  # the first is this thread
                c.wake.release()

    def _next(self, key: K, finished: int) -> None:
        """Hands the key to the calls that waited meanwhile, or frees it."""
        with self._lock:
            self.batches += 1
            self.calls += finished
            state = self._busy[key]
            if not state.waiting:
                del self._busy[key]
                return
            waiting = state.waiting
            first = waiting.popleft()
            batch, weight = [first], first.weight
            while waiting and weight + waiting[0].weight <= self.max_weight:
                weight += waiting[0].weight
                batch.append(waiting.popleft())
        first.batch = batch
        first.wake.release()
