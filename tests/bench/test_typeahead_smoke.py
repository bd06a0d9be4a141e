"""A short run of bench/typeahead.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tasks.backfill.queue import DEFAULT_MAX_RUNNING as BACKFILL_MAX_RUNNING
from tasks.backfill.queue import DEFAULT_RATE as BACKFILL_RATE
from tests.bench.smoke import SHARED_STORES, run_smoke


@pytest.mark.slow
@SHARED_STORES
def test_typeahead_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    stdout, report = run_smoke("typeahead.py", tmp_path)
    load, fill, lookups = report["load"], report["backfill"], report["lookups"]
    assert load["imports"]["address_book"] > 0 and load["imports"]["social"] > 0 and load["linked_accounts"] > 0
    assert fill["cluster"] == "primary" and fill["users"] == load["users"]
    # Every writer wrote every planned cell, to the primary only.
    assert fill["cells_written"] == {"rebuild": [fill["cells"]], "raw": [fill["cells"]],
                                     "raw_thrift2": [fill["cells"]], "raw_encoded": [fill["cells"]],
                                     "rebuild_service": [fill["cells"]]}
    # The index emptied before each writer's run: 5 writers in the smoke's one round.
    assert len(fill["settle_s"]) == 5 * fill["rounds"] and all(s > 0 for s in fill["settle_s"])
    assert fill["rebuild_service_users_per_s"] > 0 and fill["ratio_service"] > 0
    assert fill["service_processes"] == fill["processes"]  # the service runs as many processes as the backfill
    assert fill["rebuild_users_per_s"] > 0 and fill["raw_users_per_s"] > 0 and fill["ratio"] > 0
    assert fill["raw_thrift2_users_per_s"] > 0 and fill["ratio_thrift2"] > 0
    assert fill["raw_encoded_users_per_s"] > 0 and fill["ratio_encoded"] > 0
    for spent in fill["cpu_ms_per_user"].values():  # every writer cost CPU, some of it in the region server
        assert spent["machine"] > 0 and spent["hbase_region_server"] > 0
    assert fill["cpu_ms_per_user"]["rebuild"]["mariadb"] > 0  # the rebuild reads the truth; the raw loops do not
    # Every user's second_degree list filled after the index, by the same pages and processes; the
    # smoke graph's ~10 follows a user give most users second_degree contacts.
    second = report["second_degree_backfill"]
    assert second["cluster"] == "primary" and second["users"] == load["users"] > 0
    assert second["pages"] == fill["pages"] and second["processes"] == fill["processes"]
    assert second["seconds"] > 0 and second["users_per_s"] > 0
    assert 0 < second["users_listed"] <= second["users"]
    assert 0 < second["listed_per_user"] <= second["limits"]["cap"]
    # One list cell per listed user, names inline, on an empty table.
    assert second["cells"] == second["users_listed"] and second["cells_per_user"] == second["cells"] / second["users"]
    assert "second_degree backfill" in stdout
    assert lookups["settle_s"] > 0 and lookups["during_unlimited_backfill"]["processes"] == 1
    assert lookups["service_processes"] == 1  # lookups through one service process, as the Procfile runs it
    # The backfill beside the lookups ran through its queue, with the queue's own cap and rate.
    queued = lookups["during_backfill"]
    assert queued["processes"] == 2 and queued["backfill"]["max_running"] == BACKFILL_MAX_RUNNING
    assert queued["backfill"]["max_dequeue_rate"] == BACKFILL_RATE
    assert queued["backfill"]["niceness"] == 10  # as the Procfile's backfill worker runs
    assert queued["backfill"]["pages"] > 0 and queued["backfill"]["users"] <= fill["users"]
    phases = [lookups["users"], lookups["celebrity"]]
    phases += [lookups[during][k] for during in ("during_backfill", "during_unlimited_backfill")
               for k in ("users", "celebrity")]
    for p in phases:
        # Every lookup answered, by the primary, and most found something.
        assert p["errors"] == 0 and p["answered"] == p["requests"] > 0
        assert p["served_by"] == {"primary": p["requests"]}
        assert p["empty_answers"] < p["requests"] / 2
        assert 0 <= p["second_degree_hits"] <= p["requests"] - p["empty_answers"]
        assert all(math.isfinite(p[k]) and p[k] > 0 for k in ("p50_ms", "p90_ms", "p99_ms", "max_ms"))
        assert p["p50_ms"] <= p["p99_ms"] <= p["max_ms"]
        gc = p["gc_pauses"]  # read from the primary's GC log: the region server logs every pause
        assert gc["count"] >= 0 and gc["max_ms"] <= gc["total_ms"] + 0.1
    assert lookups["celebrity"]["candidates"]["max"] > lookups["users"]["candidates"]["median"]
    # A quarter of the users' queries type a second_degree contact's name: some answers show one.
    assert lookups["users"]["second_degree_hits"] > 0
    # The same lookups through the Contacts Service and the HTTP endpoint, each a process of its own.
    for kind in ("thrift", "http"):
        for who in ("users", "celebrity"):
            p = lookups["served"][kind][who]
            assert p["errors"] == 0 and p["answered"] == p["requests"] == lookups[who]["requests"], (kind, who)
            assert p["empty_answers"] == lookups[who]["empty_answers"]  # the same queries, the same answers
            assert p["second_degree_hits"] == lookups[who]["second_degree_hits"], (kind, who)
            assert 0 < p["p50_ms"] <= p["p99_ms"] <= p["max_ms"]
    assert "target through the Contacts Service" in stdout
    assert "ratio (rebuild / raw happybase):" in stdout and "target: p99" in stdout
