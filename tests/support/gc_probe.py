"""How a server process runs Python's collector, seen from outside: a
``sitecustomize`` put first on its path writes, as the process exits, its
command line, its collector thresholds and how many objects it froze."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SITECUSTOMIZE = """
import atexit, gc, json, os, sys

def _report():
    path = os.path.join(os.environ["GC_PROBE_DIR"], f"{os.getpid()}.json")
    with open(path, "w") as f:
        json.dump({"argv": sys.argv, "threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}, f)

atexit.register(_report)
"""


def probed(directory: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` for a process whose collector the probe in ``directory`` (made here) reports."""
    directory.mkdir()
    (directory / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(directory), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "GC_PROBE_DIR": str(directory)}


def reports(directory: Path) -> list[dict[str, Any]]:
    """What every probed process that has exited reported."""
    return [json.loads(p.read_text()) for p in directory.glob("*.json")]
