"""A short run of bench/server.py, so the server benchmark cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.servers import REPO


@pytest.mark.slow
def test_server_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    out = tmp_path / "server.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "server.py"), "--smoke", "--processes", "2", "--server-processes", "1,2",
         "--tls", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    everything = json.loads(out.read_text())
    rows = [r for r in everything if "transport" not in r]
    tls = [r for r in everything if r.get("transport") == "tls"]
    # TLS beside plain TCP, for each server count, and what a connection costs.
    assert {(r["op"], r.get("batch"), r["server_processes"]) for r in tls} == {
        (op, batch, n) for op in ("enqueue", "dequeue+ack") for batch in (1, 100) for n in (1, 2)
    } | {("connect", None, 1), ("connect", None, 2)}
    for row in tls:
        if row["op"] == "connect":
            assert row["tls_ms_per_connection"] > 0 and row["plain_ms_per_connection"] > 0
        else:
            assert row["tls_per_s"] > 0 and row["ratio_to_plain"] > 0 and row["tls_cpu_us_per_call"] > 0
    assert {(r["op"], r["batch"], r["server_processes"]) for r in rows} == {
        (op, batch, n) for op in ("enqueue", "dequeue+ack") for batch in (1, 100) for n in (1, 2)
    }
    assert all(r["in_process_per_s"] > 0 and r["server_per_s"] > 0 for r in rows)
    # Batches of one also measure the transport floor (bench.echo_server).
    for row in rows:
        if row["batch"] == 1:
            # The server's CPU is read from /proc in clock ticks: a smoke run may spend less than one.
            assert row["floor_client_cpu_us"] > 0 and row["floor_server_cpu_us"] >= 0
            assert "server_beyond_floor_us" in row and "client_beyond_floor_us" in row
            # The ceiling counts the store's CPU: Redis did work for every in-process job.
            assert row["in_process_store_cpu_us"] > 0 and row["cores"] >= 1
            assert row["ceiling_without_merging"] > 0 and row["in_process_cores_busy"] > 0
        else:
            assert "floor_client_cpu_us" not in row
