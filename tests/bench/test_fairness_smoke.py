"""A short run of bench/fairness.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import SHARED_STORES, run_smoke


@pytest.mark.slow
@SHARED_STORES
def test_fairness_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    _, all_rows = run_smoke("fairness.py", tmp_path)
    rows = [r for r in all_rows if "keyed" in r]
    assert {(r["backend"], r["keyed"]) for r in rows} == {(b, k) for b in ("redis", "mysql") for k in (True, False)}
    assert all(r["small_jobs"] > 10 and r["big_jobs"] == 5_000 for r in rows)
    assert all(0 < r["small_wait_p50_ms"] <= r["small_wait_p99_ms"] for r in rows)
    assert all(r["vs_unkeyed"] > 0 for r in rows if r["keyed"])
    # The cost of many keys: every job drained (the bench checks), at a rate, with 10 keys and with 2,000.
    scaling = [r for r in all_rows if "keyed" not in r]
    assert {(r["backend"], r["keys"]) for r in scaling} == {(b, k) for b in ("redis", "mysql") for k in (10, 2_000)}
    assert all(r["jobs"] == 5_000 and r["jobs_per_s"] > 0 for r in scaling)
    assert all(r["vs_10_keys"] > 0 for r in scaling if r["keys"] == 2_000)
