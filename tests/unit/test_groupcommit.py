"""GroupCommit: natural batching of concurrent calls per key."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest

from pinlater.engine.groupcommit import GroupCommit, Outcome
from tests.support.waits import wait_for


class Recorder:
    """A ``run`` that records its batches; the first batch of a key can be
    held until released, so that later calls queue up behind it."""

    def __init__(self, hold_first: bool = True) -> None:
        self.batches: list[tuple[str, list[Any]]] = []
        self.release = threading.Event()
        self.running = threading.Event()
        self.hold_first = hold_first
        self.threads: list[str] = []

    def __call__(self, key: str, items: list[Any]) -> Sequence[Outcome[Any]]:
        self.batches.append((key, list(items)))
        self.threads.append(threading.current_thread().name)
        if self.hold_first and len(self.batches) == 1:
            self.running.set()
            assert self.release.wait(10)
        out: list[Outcome[Any]] = []
        for item in items:
            if isinstance(item, str) and item.startswith("bad"):
                out.append(ValueError(item))
            else:
                out.append(("done", key, item))
        return out


def start(fn: Callable[[], Any], name: str) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 -- the test looks at it
            box["error"] = exc

    t = threading.Thread(target=target, name=name)
    t.start()
    return t, box



def waiting(gc: GroupCommit[Any, Any, Any], key: str) -> int:
    with gc._lock:
        state = gc._busy.get(key)
        return 0 if state is None else len(state.waiting)


def queue_behind_first(
    gc: GroupCommit[Any, Any, Any], run: Recorder, key: str, items: Sequence[Any], weights: Sequence[int] | None = None
) -> tuple[dict[str, Any], list[tuple[threading.Thread, dict[str, Any]]]]:
    """A first call held running, then ``items`` submitted one by one, each
    waiting behind it (in this order) before the next is submitted."""
    first_thread, first = start(lambda: gc.submit(key, "first"), "first")
    assert run.running.wait(10)
    calls = []
    for n, item in enumerate(items):
        weight = 1 if weights is None else weights[n]
        calls.append(start(partial(gc.submit, key, item, weight), f"call-{n}"))
        wait_for(partial(lambda n: waiting(gc, key) == n + 1, n), "a waiter", interval_s=0.001)
    calls.insert(0, (first_thread, first))
    return first, calls


def test_a_call_alone_runs_at_once_in_its_own_thread() -> None:
    run = Recorder(hold_first=False)
    gc: GroupCommit[str, int, Any] = GroupCommit(run, max_weight=10)
    assert gc.submit("q", 1) == ("done", "q", 1)
    assert gc.submit("q", 2) == ("done", "q", 2)
    assert run.batches == [("q", [1]), ("q", [2])]
    assert run.threads == [threading.current_thread().name] * 2
    assert gc._busy == {}


def test_calls_arriving_during_a_batch_go_together_in_arrival_order_each_getting_its_own() -> None:
    run = Recorder()
    gc: GroupCommit[str, Any, Any] = GroupCommit(run, max_weight=100)
    first, calls = queue_behind_first(gc, run, "q", ["a", "b", "c", "d"])
    run.release.set()
    for t, _ in calls:
        t.join(10)
    assert run.batches == [("q", ["first"]), ("q", ["a", "b", "c", "d"])]
    assert first["value"] == ("done", "q", "first")
    assert [box["value"] for _, box in calls[1:]] == [("done", "q", x) for x in "abcd"]
    # The second batch ran in the thread of its first call, not the first batch's.
    assert run.threads == ["first", "call-0"]
    assert (gc.batches, gc.calls) == (2, 5)
    assert gc._busy == {}


def test_an_error_for_one_item_fails_only_its_caller() -> None:
    run = Recorder()
    gc: GroupCommit[str, Any, Any] = GroupCommit(run, max_weight=100)
    _, calls = queue_behind_first(gc, run, "q", ["a", "bad-b", "c"])
    run.release.set()
    for t, _ in calls:
        t.join(10)
    boxes = [box for _, box in calls[1:]]
    assert boxes[0]["value"] == ("done", "q", "a") and boxes[2]["value"] == ("done", "q", "c")
    assert isinstance(boxes[1]["error"], ValueError) and str(boxes[1]["error"]) == "bad-b"
    assert len(run.batches) == 2


def test_run_raising_fails_every_caller_of_that_batch_and_the_key_goes_on() -> None:
    held = threading.Event()
    release = threading.Event()
    seen: list[list[str]] = []

    def run(key: str, items: list[str]) -> list[Outcome[str]]:
        seen.append(items)
        if len(seen) == 1:
            held.set()
            assert release.wait(10)
        if "boom" in items:
            raise ConnectionError("shard down")
        return [i.upper() for i in items]

    gc: GroupCommit[str, str, str] = GroupCommit(run, max_weight=2)
    first_thread, first = start(lambda: gc.submit("q", "x"), "first")
    assert held.wait(10)
    calls = []
    for n, item in enumerate(["boom", "y", "z"]):  # max_weight 2: [boom, y] then [z]
        calls.append(start(partial(gc.submit, "q", item), f"c{n}"))
        wait_for(partial(lambda n: waiting(gc, "q") == n + 1, n), "a waiter", interval_s=0.001)
    release.set()
    for t, _ in [(first_thread, first), *calls]:
        t.join(10)
    assert seen == [["x"], ["boom", "y"], ["z"]]
    assert first["value"] == "X"
    assert isinstance(calls[0][1]["error"], ConnectionError) and isinstance(calls[1][1]["error"], ConnectionError)
    assert calls[2][1]["value"] == "Z"
    assert gc._busy == {}


def test_a_wrong_number_of_outcomes_is_an_error_for_the_batch_not_a_hang() -> None:
    gc: GroupCommit[str, int, int] = GroupCommit(lambda key, items: [], max_weight=10)
    with pytest.raises(RuntimeError, match="got 0 outcomes"):
        gc.submit("q", 1)
    assert gc._busy == {}


def test_batches_are_capped_by_weight_and_keep_the_order() -> None:
    run = Recorder()
    gc: GroupCommit[str, Any, Any] = GroupCommit(run, max_weight=5)
    _, calls = queue_behind_first(gc, run, "q", ["a", "b", "c", "d", "e"], weights=[2, 2, 2, 9, 1])
    run.release.set()
    for t, _ in calls:
        t.join(10)
    # a+b fit (4), c would make 6; c alone up to d (11 > 5); d alone (heavier than the cap: still runs); then e.
    assert [items for _, items in run.batches] == [["first"], ["a", "b"], ["c"], ["d"], ["e"]]
    assert all("value" in box for _, box in calls)


def test_other_keys_do_not_wait() -> None:
    run = Recorder()
    gc: GroupCommit[str, Any, Any] = GroupCommit(run, max_weight=10)
    first_thread, first = start(lambda: gc.submit("q1", "held"), "first")
    assert run.running.wait(10)
    assert gc.submit("q2", "other") == ("done", "q2", "other")  # while q1 is running
    run.release.set()
    first_thread.join(10)
    assert first["value"] == ("done", "q1", "held")


def test_many_threads_every_call_answered_exactly_once() -> None:
    lock = threading.Lock()
    ran: list[int] = []

    def run(key: str, items: list[int]) -> list[Outcome[int]]:
        time.sleep(0.001)
        with lock:
            ran.extend(items)
        return [i * 2 for i in items]

    gc: GroupCommit[str, int, int] = GroupCommit(run, max_weight=7)
    results: dict[int, int] = {}

    def worker(base: int) -> None:
        for i in range(base, base + 200):
            results[i] = gc.submit(f"q{i % 2}", i)

    threads = [threading.Thread(target=worker, args=(n * 1000,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(ran) == sorted(results) and len(ran) == 1600
    assert all(results[i] == 2 * i for i in results)
    assert gc.calls == 1600 and gc.batches < 1600  # some merged
    assert gc._busy == {}
