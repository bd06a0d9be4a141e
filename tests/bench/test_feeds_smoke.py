"""A short run of bench/feeds.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import REPO


@pytest.mark.slow
def test_feeds_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    out = tmp_path / "feeds.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "feeds.py"), "--smoke", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    fanout, reads = report["fanout"], report["reads"]
    assert fanout["tasks_cells_per_s"] > 0 and fanout["raw_cells_per_s"] > 0 and fanout["ratio"] > 0
    assert fanout["cells_per_round"] == fanout["followers"] * fanout["pins"] * 2
    assert reads["up"]["served_by"] == {"primary": reads["up"]["requests"]}
    # Stalled: every read still answered, by the standby.
    assert reads["stalled"]["errors"] == 0 and set(reads["stalled"]["served_by"]) == {"standby"}
    assert "ratio:" in result.stdout and "primary stalled" in result.stdout
