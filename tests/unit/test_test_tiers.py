"""The test tiers are found, not listed: the Makefile's app tier is every
folder of tests/ outside the core tier and the support folders, so every
folder that holds tests runs in `make test`, in exactly one tier."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def tiers() -> dict[str, set[str]]:
    shown = subprocess.run(["make", "-s", "--no-print-directory", "test-tiers"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, check=True).stdout
    return {name: set(folders.split()) for name, _, folders in (line.partition(":") for line in shown.splitlines())}


def folders_with_tests() -> set[str]:
    return {f"tests/{path.relative_to(TESTS).parts[0]}" for path in TESTS.rglob("test_*.py")
            if len(path.relative_to(TESTS).parts) > 1}


def test_every_folder_with_tests_is_in_one_tier() -> None:
    found = tiers()
    assert set(found) == {"core", "app", "support"}
    assert found["core"] & found["app"] == set()
    assert folders_with_tests() <= found["core"] | found["app"]
    assert folders_with_tests() & found["support"] == set()  # a support folder holds no tests
    assert {"tests/feeds", "tests/hbase", "tests/apps"} <= found["app"]
    assert not any(path.is_file() for path in TESTS.glob("test_*.py"))  # a test outside any folder runs in no tier


def test_a_new_folder_joins_the_app_tier(tmp_path: Path) -> None:
    # The Makefile's rule, on a copy of the tree's shape with one folder more.
    for folder in ("unit", "contract", "integration", "thrift", "workers", "support", "feeds", "brand_new"):
        (tmp_path / "tests" / folder).mkdir(parents=True)
    (tmp_path / "Makefile").write_text((ROOT / "Makefile").read_text())
    shown = subprocess.run(["make", "-s", "--no-print-directory", "test-tiers"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60, check=True).stdout
    assert "app: tests/brand_new tests/feeds" in shown.splitlines()
