"""A short run of bench/seam.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

from pathlib import Path

from tests.bench.smoke import run_smoke


def test_seam_benchmark_smoke(tmp_path: Path) -> None:
    _, result = run_smoke("seam.py", tmp_path, timeout=120)
    assert result["calls"] == 2_000
    for name in ("raw_ns", "seam_ns", "app_call_ns"):
        assert result[name] > 0, name
    # Each instrumented call does the bare call's work and more.
    assert result["seam_ns"] > result["raw_ns"]
    assert result["app_call_ns"] > result["raw_ns"]
