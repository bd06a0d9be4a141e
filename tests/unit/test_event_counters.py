"""The per-process event counters' flush while the control store fails:
nothing counted is lost, and the log says so once, not every second."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from types import SimpleNamespace

import pytest

from pinlater.engine import counters
from pinlater.engine.counters import EventCounters
from pinlater.stores.base import ShardWriteRefused
from pinlater.stores.memory.control import MemoryControlStore


class Refusing(MemoryControlStore):
    """A control store whose counts are refused while ``refusing``."""

    refusing = True

    def add_counts(self, minute: int, counts: Mapping[str, Mapping[str, int]]) -> None:
        if self.refusing:
            raise ShardWriteRefused("control store refuses writes: MISCONF no space left on device")
        super().add_counts(minute, counts)


def test_a_failing_flush_keeps_the_counts_and_is_said_once_a_minute(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    monkeypatch.setattr(counters, "time", SimpleNamespace(time=time.time, monotonic=lambda: now[0]))
    control = Refusing()
    events = EventCounters(control, flush_interval_s=3600)
    caplog.set_level(logging.WARNING, logger="pinlater.engine.counters")
    for _ in range(120):  # two minutes of flushes a second
        events.add("q", counters.ENQUEUED)
        events.flush()
        now[0] += 1.0
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and all("could not flush event counters (kept" in m and "MISCONF" in m for m in said)
    control.refusing = False
    events.flush()
    assert caplog.records[-1].getMessage() == "event counters flushed again"
    minute = counters.current_minute()
    totals = control.read_counts(minute - 5, minute)
    assert sum(per_queue["q"][counters.ENQUEUED] for per_queue in totals.values()) == 120
    events.close()
