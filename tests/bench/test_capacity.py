"""bench/capacity.py: the plan's arithmetic on costs given here, its refusals,
and a short measurement of the job lifecycle on the services' Redis."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.capacity import COSTS, plan
from tests.bench.smoke import run_smoke
from tests.servers import REPO

COSTS_HERE = {
    "job": {"machine": 150.0, "redis": 50.0, "clients": 100.0},
    "fanout_cell": {"machine": 67.0, "hbase_region_server": 20.0, "clients": 40.0, "mariadb": 5.0, "redis": 2.0},
}


def test_a_plan_sums_the_costs_by_kind_and_turns_cores_into_hosts() -> None:
    result = plan(COSTS_HERE, {"job": 10_000, "fanout_cell": 1_000_000}, host_cores=16, utilisation=0.5)
    assert result["cores"] == {"clients": 41.0, "hbase_region_server": 20.0, "mariadb": 5.0, "redis": 2.5}
    roles = result["roles"]
    # 8 usable cores a host, and one host over for a failure.
    assert roles["workers"] == {"cores": 41.0, "hosts": 7}
    assert roles["hbase region servers"] == {"cores": 20.0, "hosts": 4}
    assert roles["mysql shards"] == {"cores": 5.0, "hosts": 2}
    # Redis runs on one core: 2.5 cores at half load is 5 shards, on one host (+1).
    assert roles["redis shards"] == {"cores": 2.5, "shards": 5, "hosts": 2}
    assert result["total_hosts"] == 15


def test_a_plan_refuses_a_unit_nobody_measured() -> None:
    with pytest.raises(SystemExit, match="no measured cost for lookup"):
        plan(COSTS_HERE, {"job": 1.0, "lookup": 5.0}, host_cores=16, utilisation=0.6)
    assert plan(COSTS_HERE, {"job": 10_000, "lookup": 0.0}, host_cores=16, utilisation=0.6)["total_hosts"] == 4
    # A kind whose share rounds to nothing is no role: noise, not a need.
    assert plan(COSTS_HERE, {"job": 1.0}, host_cores=16, utilisation=0.6)["roles"] == {}


def _plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "bench" / "capacity.py"), "plan", *args], capture_output=True,
                          text=True, timeout=60, cwd=REPO, check=False)


def test_the_committed_costs_plan_pinterests_scale() -> None:
    assert COSTS.is_file()
    done = _plan("--jobs", "10000", "--pins", "1000", "--followers", "1000", "--feed-reads", "20000",
                 "--lookups", "5000")
    assert done.returncode == 0, done.stderr
    assert "hbase region servers" in done.stdout and "hosts (at 60% busy" in done.stdout
    bad = _plan("--jobs", "10", "--utilisation", "0")
    assert bad.returncode == 2 and "--utilisation in (0, 1]" in bad.stderr


@pytest.mark.slow
def test_capacity_measure_smoke(servers: None, tmp_path: Path) -> None:
    stdout, report = run_smoke("capacity.py", tmp_path, extra=["measure"])
    job = report["units"]["job"]
    assert job["redis"] > 0 and job["clients"] > 0 and job["machine"] >= job["redis"]
    assert report["units"]["job_mysql"]["mariadb"] > 0
    assert report["machine"]["cores"] >= 1 and report["jobs"] == 5_000
    assert "job " in stdout


@pytest.mark.slow
def test_capacity_check_smoke(servers: None, tmp_path: Path) -> None:
    """The model against one and two CPU-capped worker hosts of the topology
    harness, a Redis of its own; here only that it runs and reports (on a
    busy machine the quotas are not what limits the hosts)."""
    stdout, report = run_smoke("capacity.py", tmp_path, extra=["check"])
    assert set(report["sizes"]) == {"1", "2"}
    for size in ("1", "2"):
        measured = report["sizes"][size]
        assert measured["jobs_per_s"] > 0 and measured["model_jobs_per_s"] > 0
        assert measured["client_cores"] <= int(size) * report["host_cores"] * 1.2  # the quota holds
    assert abs(report["sizes"]["2"]["model_jobs_per_s"] - 2 * report["sizes"]["1"]["model_jobs_per_s"]) <= 1
    assert report["doubling"] > 0 and "the model says 2x" in stdout
