"""`make test` spreads the suite with pytest-xdist's ``--dist loadgroup``
and the groups of the root conftest: a file's tests in one process (its
module fixtures made once), the cases of a ``spread_cases`` file anywhere.
pytest-xdist 3.8 marks a group by rewriting each test's node id, which
pytest 9.2 no longer lets it do: the groups are then silently ignored and
every test goes anywhere (pyproject.toml pins pytest below 9.2 for this).
This runs a small suite under the root conftest's hook and fails, naming
both versions, when a file's tests are split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TESTS = """
import json, os, pytest
{mark}
@pytest.mark.parametrize("case", range(4))
def test_case(case, request):
    with open(os.environ["GROUPS_OUT"], "a") as out:
        out.write(json.dumps([request.node.path.name, os.environ["PYTEST_XDIST_WORKER"]]) + "\\n")
"""


def test_a_files_tests_share_a_process_and_spread_cases_do_not(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n")
    (tmp_path / "test_together.py").write_text(TESTS.format(mark=""))
    (tmp_path / "test_spread.py").write_text(TESTS.format(mark="pytestmark = pytest.mark.spread_cases"))
    out = tmp_path / "groups.jsonl"
    env = {**os.environ, "GROUPS_OUT": str(out), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist", "-n", "2",
         "--dist", "loadgroup", "--no-loadscope-reorder", "-W", "ignore::pytest.PytestUnknownMarkWarning", "."],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    workers: dict[str, set[str]] = defaultdict(set)
    for line in out.read_text().splitlines():
        name, worker = json.loads(line)
        workers[name].add(worker)
    versions = f"pytest {version('pytest')}, pytest-xdist {version('pytest-xdist')}"
    assert len(workers["test_together.py"]) == 1, f"{versions}: a file's tests were split: {dict(workers)}"
    # Four groups for two processes: each process is handed one at the start.
    assert len(workers["test_spread.py"]) == 2, f"{versions}: spread cases stayed together: {dict(workers)}"
