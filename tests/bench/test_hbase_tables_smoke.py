"""A short run of bench/hbase_tables.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import run_smoke


@pytest.mark.slow
def test_hbase_tables_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    stdout, report = run_smoke("hbase_tables.py", tmp_path)
    encodings = report["encodings"]
    assert list(encodings) == ["NONE", "PREFIX", "FAST_DIFF"]
    assert report["cells"] == report["users"] * report["pins_per_user"] > 0
    for numbers in encodings.values():
        # Flushed and compacted: every table holds store files of its cells.
        assert numbers["store_bytes"] > 0 and numbers["write_cells_per_s"] > 0
        assert 0 < numbers["read_p50_ms"] <= numbers["read_p99_ms"]
    assert encodings["NONE"]["ratio_to_none"] == 1.0
    # The feed's keys share long prefixes: both encodings store it smaller.
    assert encodings["FAST_DIFF"]["store_bytes"] < encodings["PREFIX"]["store_bytes"] < encodings["NONE"]["store_bytes"]
    assert "x NONE's size" in stdout
