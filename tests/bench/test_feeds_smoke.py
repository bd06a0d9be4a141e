"""A short run of bench/feeds.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import run_smoke


@pytest.mark.slow
# Its reads must all be answered by the primary within the hedge: alone, not
# beside other tests' load.
@pytest.mark.serial
def test_feeds_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    stdout, report = run_smoke("feeds.py", tmp_path)
    fanout, reads = report["fanout"], report["reads"]
    assert fanout["tasks_cells_per_s"] > 0 and fanout["raw_cells_per_s"] > 0 and fanout["ratio"] > 0
    assert fanout["raw_thrift2_cells_per_s"] > 0 and 0 < fanout["ratio_to_faster_raw"] <= fanout["ratio"]
    assert fanout["cells_per_round"] == fanout["followers"] * fanout["pins"] * 2
    # The same rounds without the trimming coprocessor, and how the two compare.
    assert fanout["tasks_without_coprocessor_cells_per_s"] > 0
    assert len(fanout["tasks_without_coprocessor_s"]) == fanout["rounds"]
    assert fanout["coprocessor_speedup"] == pytest.approx(
        fanout["tasks_cells_per_s"] / fanout["tasks_without_coprocessor_cells_per_s"])
    # Every writer's round cost the machine CPU, part of it in the region servers,
    # and the servers' share never exceeds the machine's.
    for spent in fanout["cpu_s_per_round"].values():
        assert spent["machine"] > 0 and spent["hbase_region_server"] > 0
        servers = sum(v for k, v in spent.items() if k not in ("machine", "clients", "steal"))
        assert servers <= spent["machine"] + 0.05
        assert spent["clients"] == pytest.approx(spent["machine"] - servers, abs=0.02)
    assert fanout["cpu_s_per_round"]["tasks"]["mariadb"] > 0  # the fan-out reads the follows
    cells = fanout["cells_per_round"]
    for name, spent in fanout["cpu_us_per_cell"].items():  # the rounds' CPU, a cell at a time
        assert spent["machine"] == pytest.approx(fanout["cpu_s_per_round"][name]["machine"] * 1e6 / cells, rel=0.01)
    assert fanout["cpu_per_cell_vs_raw_thrift2"] == pytest.approx(
        fanout["cpu_s_per_round"]["tasks"]["machine"] / fanout["cpu_s_per_round"]["raw_thrift2"]["machine"], rel=0.01)
    assert reads["up"]["served_by"] == {"primary": reads["up"]["requests"]}
    # The read phases' CPU by kind, and an idle span of the same length to set it against.
    assert reads["up"]["cpu_s"]["machine"] > 0 and reads["idle_cpu_s"]["machine"] >= 0
    # The cold phase is measured like the others, before the warm-up reads.
    assert reads["cold"]["requests"] == reads["up"]["requests"] and reads["cold"]["errors"] == 0
    assert reads["warm_up_reads"] > 0 and reads["warm_up_s"] > 0
    # Stalled: every read still answered, by the standby.
    assert reads["stalled"]["errors"] == 0 and set(reads["stalled"]["served_by"]) == {"standby"}
    assert "no trimming coprocessor" in stdout and "of the faster raw writer" in stdout
    assert "primary stalled" in stdout and "primary cold" in stdout
