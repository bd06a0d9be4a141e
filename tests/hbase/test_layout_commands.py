"""``scripts/hbase``'s layout settings and region-server commands refuse bad
input in one line, before touching any cluster (the commands' work on a
running distributed cluster is bench/recovery.py's, smoke-tested in
tests/bench/test_recovery_smoke.py)."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.servers import REPO


def _hbase(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / "scripts" / "hbase"), *args], env=os.environ | env, capture_output=True,
                          text=True, timeout=60, check=False)


@pytest.mark.parametrize(("env", "message"), [
    ({"PINLATER_HBASE_LAYOUT": "sharded"}, "PINLATER_HBASE_LAYOUT: must be standalone or distributed, not 'sharded'"),
    ({"PINLATER_HBASE_MTTR": "fast"}, "PINLATER_HBASE_MTTR: must be tuned or default, not 'fast'"),
    ({"PINLATER_HBASE_FS": "nfs"}, "PINLATER_HBASE_FS: must be local or hdfs, not 'nfs'"),
])
def test_a_bad_setting_is_one_line(env: dict[str, str], message: str) -> None:
    done = _hbase("status", **env)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"hbase: ERROR: {message}\n"


@pytest.mark.parametrize(("args", "message"), [
    (("rs", "standby", "kill", "4"), "rs kill: N must be 1 to 3, not '4'"),
    (("rs", "standby", "pause", "-1"), "rs pause: N must be 1 to 3, not '-1'"),
    (("rs", "standby", "list"), "standby: no distributed cluster runs (start one: "),
    (("rs", "nowhere", "list"), "unknown cluster 'nowhere' (primary, standby or chaos)"),
])
def test_region_server_commands_refuse_bad_input(args: tuple[str, ...], message: str) -> None:
    done = _hbase(*args)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"hbase: ERROR: {message}") and done.stderr.count("\n") == 1, done.stderr


def test_an_unknown_region_server_command_prints_the_usage() -> None:
    done = _hbase("rs", "standby", "explode", "1")
    assert done.returncode == 2 and "rs CLUSTER list|kill N|forget N|pause N|resume N|start N" in done.stderr
