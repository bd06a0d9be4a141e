"""A close of the slot keepers (queue caps and per-key caps) waits for a
background step under way, so that the step's store calls never meet the
control store its caller closes next; and a step stuck on a silent store
holds the close for CLOSE_WAIT_S at most."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from pinlater import Job
from pinlater.engine import key_slots, slots
from pinlater.engine.core import Core
from pinlater.engine.shards import ShardSet
from pinlater.service import JobService
from pinlater.settings import Settings
from pinlater.stores.memory.control import MemoryControlStore
from pinlater.stores.memory.shard import MemoryBackend

Q = "q"


def _service() -> JobService:
    core = Core.build(ShardSet([MemoryBackend("m1")], probe_interval_s=3600), MemoryControlStore(), Settings())
    return JobService(core, source="t", owns_core=True)


def _blocking_step(keeper: object, release: threading.Event, log: list[str]) -> Callable[..., None]:
    """The keeper's background step, held until ``release``; ``log`` tells
    when it started and ended."""
    step = keeper._tend_pool  # type: ignore[attr-defined]

    def held(*args: object) -> None:
        log.append("step started")
        release.wait(10)
        step(*args)
        log.append("step ended")

    return held


@pytest.mark.parametrize("which", ["slots", "key_slots"])
def test_close_waits_for_the_background_step_under_way(which: str) -> None:
    service = _service()
    service.create_queue(Q)
    if which == "slots":
        service.update_queue(Q, max_running=2)
    else:
        service.update_queue(Q, key_max_running=2)
    service.enqueue(Q, [Job(b"x", key="a") for _ in range(3)])
    assert len(service.dequeue(Q, 1)) == 1  # the keeper's thread runs from here
    keeper = getattr(service.core, which)
    release, log = threading.Event(), list[str]()
    keeper._tend_pool = _blocking_step(keeper, release, log)
    while not log:
        time.sleep(0.01)
    closer = threading.Thread(target=keeper.close)
    closer.start()
    closer.join(0.5)
    assert closer.is_alive(), "close returned while a background step was under way"
    release.set()
    closer.join(5)
    assert not closer.is_alive()
    assert log == ["step started", "step ended"]
    service.close()


def test_a_step_stuck_on_a_silent_store_holds_the_close_for_the_wait_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(slots, "CLOSE_WAIT_S", 0.3)
    monkeypatch.setattr(key_slots, "CLOSE_WAIT_S", 0.3)
    service = _service()
    service.create_queue(Q, max_running=2)
    service.enqueue(Q, [Job(b"x")])
    assert len(service.dequeue(Q, 1)) == 1
    release, log = threading.Event(), list[str]()
    service.core.slots._tend_pool = _blocking_step(service.core.slots, release, log)  # type: ignore[method-assign]
    while not log:
        time.sleep(0.01)
    started = time.monotonic()
    service.core.slots.close()
    assert 0.25 <= time.monotonic() - started < 3
    release.set()
    service.close()
