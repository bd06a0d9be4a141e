"""Adding a store kind is its folder and one entry-point line: the
``memory2`` kind of ``tests/support/memory_again`` (the memory kind's
classes registered a second time) is registered by a dist-info of its own,
written here with that one line, and the whole contract suite runs on it
alone in a subprocess."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.servers import REPO

FOLDER = REPO / "tests" / "support" / "memory_again"
ENTRY_POINT = 'memory2 = "tests.support.memory_again:KIND"'


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_the_new_kind_folder_is_self_contained() -> None:
    """It builds on the store kinds' shared modules and the test setups'
    ``Setup`` only: nothing outside the folder names it."""
    allowed = ("pinlater.stores", "tests.support.stores", "tests.support.memory_again", "__future__", "uuid")
    imports = set().union(*(_imports(path) for path in FOLDER.glob("*.py")))
    assert imports and all(name.startswith(allowed) for name in imports), imports
    outside = [
        path for top in ("pinlater", "dashboards", "workers", "tests")
        for path in (REPO / top).rglob("*.py")
        if FOLDER not in path.parents and path != Path(__file__) and "memory_again" in path.read_text("utf-8")
    ]
    assert outside == []


@pytest.mark.slow
def test_the_contract_suite_runs_on_a_kind_registered_by_one_entry_point(tmp_path: Path) -> None:
    dist_info = tmp_path / "memory_again-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: memory-again\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text(f"[pinlater.stores]\n{ENTRY_POINT.replace(chr(34), '')}\n")
    report = tmp_path / "report.xml"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "PINLATER_TEST_KINDS": "memory2",
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "xdist", "-n", "2",
         "tests/contract", f"--ignore={Path(__file__).relative_to(REPO)}", f"--junitxml={report}"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    suite = ET.parse(report).getroot().find("testsuite")
    assert suite is not None
    cases = [case.get("name", "") for case in suite.iter("testcase")]
    assert int(suite.get("failures", "1")) == 0 and int(suite.get("errors", "1")) == 0
    assert int(suite.get("skipped", "1")) == 0
    on_kind = [name for name in cases if "[memory2" in name]
    assert len(on_kind) > 100, len(on_kind)
    # Nothing ran on another kind's setup.
    assert not [name for name in cases if "[" in name and "memory2" not in name and
                any(f"[{other}" in name for other in ("memory-", "memory]", "redis", "mysql"))]
