"""A short run of bench/celery.py (Celery on PinLater against stock Celery,
Dramatiq and Huey on Redis), so the benchmark cannot rot between full runs.
Checks that every system ran and gave numbers, not how fast."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.bench.smoke import run_smoke

SYSTEMS = {"celery+pinlater", "celery+redis", "dramatiq+redis", "huey+redis"}


@pytest.mark.timeout(300)
def test_celery_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    stdout, report = run_smoke("celery.py", tmp_path, timeout=280)
    rows = {r["system"]: r for r in report["results"]}
    assert set(rows) == SYSTEMS
    for name, row in rows.items():
        assert row["tasks"] == 1000
        assert math.isfinite(row["publish_per_s"]) and row["publish_per_s"] > 0, name
        assert math.isfinite(row["drain_per_s"]) and row["drain_per_s"] > 0, name
        # The table has a line for each system, with its two rates.
        assert any(line.split()[:3] == [name, f"{row['publish_per_s']:.0f}", f"{row['drain_per_s']:.0f}"]
                   for line in stdout.splitlines()), stdout
    assert report["fastest_peer"] in {"dramatiq+redis", "huey+redis"}
    assert report["publish_ratio"] > 0 and report["drain_ratio"] > 0 and report["peer_drain_ratio"] > 0
    assert "fastest peer" in stdout
