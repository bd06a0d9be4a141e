"""Kombu's own generic transport tests (``t/integration/common.py``), taken
from kombu's published source distribution of the installed version.

``make kombu-suite`` (which ``make test`` and ``make test-core`` run first)
downloads it with pip into ``.var/kombu-suite/`` (git-ignored, never
committed): ``python -m tests.workers.kombu_suite``. Importing the tests
never reaches the network; no copy in the cache is a loud failure naming
that command, never a skip.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import tarfile
from importlib.metadata import version
from pathlib import Path
from types import ModuleType

from tests.servers import REPO

SUITE_FILE = "t/integration/common.py"


def _target(kombu_version: str) -> Path:
    return REPO / ".var" / "kombu-suite" / kombu_version / "kombu_common.py"


def fetch(kombu_version: str) -> Path:
    """Download kombu ``kombu_version``'s sources and keep the suite's file."""
    target = _target(kombu_version)
    if target.exists():
        return target
    cache = target.parent
    cache.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--quiet",
         "--dest", str(cache), f"kombu=={kombu_version}"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"could not download kombu {kombu_version}'s sources with pip: {done.stderr.strip()}")
    [sdist] = cache.glob(f"kombu-{kombu_version}.tar.gz")
    with tarfile.open(sdist) as tar:
        member = tar.extractfile(f"kombu-{kombu_version}/{SUITE_FILE}")
        if member is None:
            raise RuntimeError(f"{sdist} has no {SUITE_FILE}")
        text = member.read()
    partial = target.with_suffix(".part")
    partial.write_bytes(text)
    partial.replace(target)
    return target


def load() -> ModuleType:
    """kombu's ``t/integration/common.py``, pinned to the installed kombu."""
    kombu_version = version("kombu")
    path = _target(kombu_version)
    if not path.exists():
        raise RuntimeError(f"kombu {kombu_version}'s transport suite is not fetched: run `make kombu-suite`")
    spec = importlib.util.spec_from_file_location(f"kombu_suite_{kombu_version.replace('.', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    print(fetch(version("kombu")))
