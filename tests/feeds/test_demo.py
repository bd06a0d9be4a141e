"""The README's demo, small: it seeds a graph, runs pins and follows through
Celery workers on PinLater into both clusters, and prints feeds and job
counts. Its own databases and tables (this session's prefixes), so a
developer's ``make demo`` data is left alone."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tasks.appdata import schema
from tasks.appdata.settings import AppDataSettings
from tasks.appdata.store import AppData
from tasks.hbase import ClusterPair, HBaseSettings, drop_table
from tasks.hbase.tables import installed_tables
from tests.servers import REPO, ensure_services

# Tens of seconds a test: started early, so no process is left with one at the end.
# The demo's job service is the demo's shards (pinlater.demo), which `make
# run`'s test also runs on: one process runs both, one after the other.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("demo_settings")]


# Each phase's bound (--timeout) stops a hang and does not time the demo: on
# busy CI cores one worker's 16 contacts backfill pages once took over 120 s.
@pytest.mark.timeout(900)
def test_the_demo_runs_the_task_path_and_prints_feeds_and_counts(tmp_path: Path) -> None:
    ensure_services()
    traces = tmp_path / "traces.jsonl"
    tag = uuid.uuid4().hex[:8]
    env = dict(os.environ, PINLATER_APPDATA_DATABASE_PREFIX=f"appdata_demotest_{tag}_",
               PINLATER_HBASE_TABLE_PREFIX=f"demotest{tag}", COLUMNS="120",
               # The three reads below mean the primary's answer, however loaded the machine.
               PINLATER_FEED_READ_CUTOFF_MS="30000")
    try:
        result = subprocess.run(
            [sys.executable, "-m", "tasks.demo", "--users", "3000", "--celebrity-followers", "1500",
             "--pins", "40", "--follows", "30", "--workers", "1", "--timeout", "300", "--traces", str(traces),
             "--env-file", str(tmp_path / "demo.env")],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=840,
        )
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        out = result.stdout
        assert "every feed job finished" in out
        # The settings its processes ran on, for `make run` to start the Procfile's on.
        written = (tmp_path / "demo.env").read_text().splitlines()
        assert f"PINLATER_APPDATA_DATABASE_PREFIX=appdata_demotest_{tag}_" in written
        assert {line.split("=", 1)[0] for line in written} >= {"PINLATER_SHARDS", "PINLATER_CONTROL_URL",
                                                              "PINLATER_HBASE_TABLE_PREFIX", "PINLATER_BUS_PREFIX"}
        # The progress bars: the contacts backfill, then the application's actions and their jobs.
        for bar in ("contacts backfill pages", "pins, follows, renames, imports", "jobs finished"):
            assert bar in out, bar
        assert re.search(r"typeahead index loaded for 3,000 users on both clusters", out), \
            [line for line in out.splitlines() if "typeahead index" in line]
        assert out.count("served by the primary") == 3
        assert "typeahead of user" in out
        assert re.search(r"\((mutual|following|followers|social|address_book)\)", out)  # a lookup's results
        # The same lookup over Thrift, answered by the Contacts Service.
        assert re.search(r"over Thrift \(Contacts Service on 127\.0\.0\.1:\d+\), '[^']+': .+\(\w+\) "
                         r"\[answered by the primary\]", out), [line for line in out.splitlines() if "Thrift" in line]
        # And one limited to second_degree: someone the accounts the user follows follow.
        assert re.search(r"over Thrift, second_degree only, '[^']+': [^\n]*\(second_degree\) \[.+ is followed by "
                         r"\d+ of the accounts user \d+ follows\]", out), [
            line for line in out.splitlines() if "Thrift" in line]
        assert "second_degree contacts loaded for" in out
        assert "jobs by state per queue" in out
        for queue in ("feed_fanout", "feed_follow", "feed_write_primary", "feed_write_standby",
                      "typeahead_update", "typeahead_rename", "typeahead_second", "backfill"):
            assert queue in out
        # --traces: one pin's fan-out as a tree: its pages, each under the
        # page that published it, and their HBase calls.
        tree = out.split("the fan-out of pin ", 1)[1].splitlines()
        assert tree[1].startswith("trace "), tree[:3]  # the line after the heading
        rows = [((len(label) - len(label.lstrip(" "))) // 2, label.strip())
                for label in (line.split(" ms  ", 1)[1] for line in tree[2:] if " ms  " in line)]

        def children(name: str) -> set[str]:
            """The first words of the spans right under every span ``name``."""
            found = set()
            for i, (depth, label) in enumerate(rows):
                if label.startswith(name):
                    for below, child in rows[i + 1:]:
                        if below <= depth:
                            break
                        if below == depth + 1:
                            found.add(" ".join(child.split(" ")[:2]))
            return found

        # Each page after the first under the publish that made it, and
        # each putting its cells itself (no write job while the write
        # queues run freely).
        assert "run feeds.fanout" in children("publish feeds.fanout"), rows[:20]
        assert any(c.startswith("hbase ") for c in children("run feeds.fanout")), rows[:20]
        assert re.search(r"run feeds\.fanout .*waited \d+ ms in feed_fanout .*\[feeds-worker\]", out)
    finally:
        store = AppData(AppDataSettings.from_env(env))
        schema.drop_shards(store)
        store.close()
        pair = ClusterPair.from_settings(HBaseSettings.from_env(env))
        for pool in pair:
            for table in installed_tables():
                drop_table(pool, table.name)
        pair.close()
