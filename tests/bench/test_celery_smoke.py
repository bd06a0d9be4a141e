"""A short run of bench/celery.py (Celery on PinLater against stock Celery,
Dramatiq and Huey on Redis), so the benchmark cannot rot between full runs.
Checks that every system ran and gave numbers, not how fast."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.celery import floor_summary
from tests.bench.smoke import run_smoke
from tests.servers import REPO

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
    # Bulk publishes, against single ones of the same run.
    assert set(report["bulk_publish_per_s"]) == set(report["bulk_vs_single"]) == {"delay_many", "group"}
    assert all(report["bulk_publish_per_s"][k] > 0 and report["bulk_vs_single"][k] > 0 for k in ("delay_many", "group"))
    assert "bulk publish:" in stdout
    # Celery's floor, timed beside them: the ratios are of the printed rates.
    huey = rows["huey+redis"]["publish_per_s"]
    assert report["celery_floor_per_s"] > 0
    assert report["floor_vs_huey"] == round(report["celery_floor_per_s"] / huey, 2)
    assert report["publish_vs_huey"] == round(rows["celery+pinlater"]["publish_per_s"] / huey, 2)
    assert report["single_vs_floor"] > 0 and "Celery's floor" in stdout
    # Both Celery systems ran with the bench's prefetch window, and say so.
    assert report["prefetch_multiplier"] == 16
    assert rows["celery+pinlater"]["workers"] == rows["celery+redis"]["workers"] == "2 solo, prefetch 16"


@pytest.mark.parametrize("multiplier", [4, 16])
def test_the_prefetch_window_reaches_both_celery_apps(multiplier: int) -> None:
    """The workers get the window from the environment bench/celery.py sets."""
    code = ("import sys; sys.path.insert(0, '.'); from bench.celery_apps import pinlater_app, stock_app; "
            "print(pinlater_app.conf.worker_prefetch_multiplier, stock_app.conf.worker_prefetch_multiplier)")
    env = dict(os.environ, BENCH_PREFETCH_MULTIPLIER=str(multiplier))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO, capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.split() == [str(multiplier)] * 2


def test_the_floors_ratio_to_huey_is_of_the_printed_rates() -> None:
    """A floor of 1,005.1/s against Huey's 1,000/s prints as 1005: its
    ratio is 1.0 (1005 / 1000), not the 1.01 of the unrounded rate."""
    rows = [{"system": "huey+redis", "publish_per_s": 1000.0}, {"system": "celery+pinlater", "publish_per_s": 900.0}]
    summary = floor_summary(rows, 900.0, 1005.1)
    assert summary["celery_floor_per_s"] == 1005
    assert summary["floor_vs_huey"] == round(1005 / 1000.0, 2) == 1.0
