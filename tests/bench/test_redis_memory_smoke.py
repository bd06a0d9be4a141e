"""A short run of bench/redis_memory.py (it starts and stops its own stock
redis-server), so the benchmark cannot rot, and the memory bound: a
pending job with a 100-byte body costs at most ~300 bytes of Redis memory
on a server with default settings, at most about what the leanest raw
layout of the same data costs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.bench.smoke import run_smoke


@pytest.mark.timeout(300)
def test_redis_memory_benchmark_smoke(tmp_path: Path) -> None:
    stdout, rows = run_smoke("redis_memory.py", tmp_path, timeout=280)
    by_layout = {r["layout"]: r for r in rows}
    assert set(by_layout) == {"pinlater", "floor"}
    for row in rows:
        assert (row["body_bytes"], row["jobs"]) == (100, 30_000)
        assert math.isfinite(row["enqueue_per_s"]) and row["enqueue_per_s"] > 0
        assert math.isfinite(row["dequeue_ack_per_s"]) and row["dequeue_ack_per_s"] > 0
        assert any(line.split()[:3] == [row["layout"], "100", "30,000"] for line in stdout.splitlines()), stdout
    ours, floor = by_layout["pinlater"]["bytes_per_job"], by_layout["floor"]["bytes_per_job"]
    assert ours <= 300, f"{ours:.0f} bytes per pending job (100-byte body)"
    assert ours <= floor + 40, f"{ours:.0f} bytes per job against the raw floor's {floor:.0f}"
