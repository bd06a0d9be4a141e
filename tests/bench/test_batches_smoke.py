"""A short run of bench/batches.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench.smoke import SHARED_STORES
from tests.servers import REPO


@pytest.mark.slow
@SHARED_STORES
def test_batches_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    out = tmp_path / "batches.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "batches.py"), "--smoke", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert {(r["backend"], r["batch"]) for r in rows} == {(b, n) for b in ("redis", "mysql") for n in (1, 100)}
    assert all(r["vs_plain"] > 0 and r["state"] == "released" and r["succeeded"] == r["jobs"] for r in rows)
