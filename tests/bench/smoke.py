"""Running a benchmark's ``--smoke`` as a subprocess, for the smoke tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.servers import REPO


def run_smoke(script: str, tmp_path: Path, timeout: float = 300, extra: list[str] | None = None) -> tuple[str, Any]:
    """``python bench/<script> [EXTRA...] --smoke --json FILE``: its stdout
    and the JSON report; fails with the tail of its output when it exits
    non-zero."""
    out = tmp_path / f"{Path(script).stem}.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), *(extra or []), "--smoke", "--json", str(out)],
        capture_output=True, text=True, timeout=timeout, cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout, json.loads(out.read_text())


# bench/core.py and bench/batches.py empty the Redis databases and drop the
# MySQL database that bench/fairness.py and bench/typeahead.py's queued
# backfill (``bench.core.settings_for``) also use: their smokes run one
# after another in one test process, never beside each other.
SHARED_STORES = pytest.mark.xdist_group("bench-core-stores")
