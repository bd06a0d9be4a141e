"""A server's uptime is counted on the monotonic clock: a wall clock that an
operator or NTP steps (back or forth) must not make it jump or go negative."""

from __future__ import annotations

import os
import time

import pytest

from pinlater.thrift.stats import ServerStats, StatsTable


@pytest.mark.parametrize("step_s", [-3600.0, 86_400.0])
def test_a_stepped_wall_clock_leaves_the_uptime_alone(monkeypatch: pytest.MonkeyPatch, step_s: float) -> None:
    private = ServerStats().table
    shared, fd = StatsTable.shared(2)
    try:
        wall = time.time()
        monkeypatch.setattr(time, "time", lambda: wall + step_s)
        for table in (private, shared):
            uptime = table.snapshot()["uptime_s"]
            assert isinstance(uptime, float) and 0 <= uptime < 60, uptime
    finally:
        os.close(fd)
