"""A short run of bench/core.py, so the benchmark cannot rot between full runs."""

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
def test_core_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    out = tmp_path / "core.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "core.py"), "--smoke", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert {(r["backend"], r["op"], r["batch"]) for r in rows} == {
        (backend, op, batch)
        for backend in ("redis", "mysql")
        for op in ("enqueue", "enqueue unique", "dequeue+ack", "dequeue+ack capped", "dequeue+ack keyed",
                   "dequeue+ack key-limited")
        for batch in (1, 100)
    }
    assert all(r["jobs_per_s"] > 0 and r["ceiling_per_s"] > 0 for r in rows)
    capped = [r for r in rows if r["op"] == "dequeue+ack capped"]
    assert all(r["vs_uncapped"] > 0 and r["max_running"] == 4 * r["batch"] for r in capped)
    keyed = [r for r in rows if r["op"] == "dequeue+ack keyed"]
    assert all(r["vs_unkeyed"] > 0 and r["keys"] == 1000 for r in keyed)
    # On MySQL, what start-time fair queuing could reach, as raw SQL.
    assert all(r["sfq_vs_unkeyed"] > 0 for r in keyed if r["backend"] == "mysql")
    limited = [r for r in rows if r["op"] == "dequeue+ack key-limited"]
    assert all(r["vs_keyed"] > 0 and r["key_max_running"] == 1000 for r in limited)
    unique = [r for r in rows if r["op"] == "enqueue unique"]
    assert all(r["vs_plain"] > 0 for r in unique)
    # Every ratio against a peer is taken over paired rounds (one in a smoke run).
    assert all(r["rounds"] == 1 for r in capped + keyed + limited + unique)
    # On MySQL, the floor its schema sets, and a layout's with the key in the job's row.
    assert all(r["floor_vs_plain"] > 0 and r["in_row_vs_plain"] > 0 for r in unique if r["backend"] == "mysql")
