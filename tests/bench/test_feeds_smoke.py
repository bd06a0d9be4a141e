"""A short run of bench/feeds.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import run_smoke


@pytest.mark.slow
def test_feeds_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    stdout, report = run_smoke("feeds.py", tmp_path)
    fanout, reads = report["fanout"], report["reads"]
    assert fanout["tasks_cells_per_s"] > 0 and fanout["raw_cells_per_s"] > 0 and fanout["ratio"] > 0
    assert fanout["raw_thrift2_cells_per_s"] > 0 and 0 < fanout["ratio_to_faster_raw"] <= fanout["ratio"]
    assert fanout["cells_per_round"] == fanout["followers"] * fanout["pins"] * 2
    assert reads["up"]["served_by"] == {"primary": reads["up"]["requests"]}
    # Stalled: every read still answered, by the standby.
    assert reads["stalled"]["errors"] == 0 and set(reads["stalled"]["served_by"]) == {"standby"}
    assert "of the faster raw writer" in stdout and "primary stalled" in stdout
