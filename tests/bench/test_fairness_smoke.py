"""A short run of bench/fairness.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import run_smoke


@pytest.mark.slow
def test_fairness_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    _, rows = run_smoke("fairness.py", tmp_path)
    assert {(r["backend"], r["keyed"]) for r in rows} == {(b, k) for b in ("redis", "mysql") for k in (True, False)}
    assert all(r["small_jobs"] > 10 and r["big_jobs"] == 5_000 for r in rows)
    assert all(0 < r["small_wait_p50_ms"] <= r["small_wait_p99_ms"] for r in rows)
    assert all(r["vs_unkeyed"] > 0 for r in rows if r["keyed"])
