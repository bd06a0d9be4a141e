"""A short run of bench/celery.py (Celery on PinLater against stock Celery
on Redis), so the benchmark cannot rot between full runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import REPO


@pytest.mark.timeout(180)
def test_celery_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    out = tmp_path / "celery.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "celery.py"), "--smoke", "--json", str(out)],
        capture_output=True, text=True, timeout=170, cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    print("\n" + result.stdout)
    data = json.loads(out.read_text())
    assert {r["system"] for r in data["results"]} == {"celery+pinlater", "celery+redis"}
    assert all(r["drain_per_s"] > 0 and r["publish_per_s"] > 0 for r in data["results"])
    assert data["drain_ratio"] > 0
