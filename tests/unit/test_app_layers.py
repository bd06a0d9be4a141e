"""The apps sit above the kits they build on: the HBase, app-data and
backfill kits and the modules every task package shares import no app, nor
does the dashboard; the apps are found through their manifests
(``pinlater.kit.apps``), and each manifest says what its tasks do."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from pinlater.kit import apps
from tests.unit.test_layers import imported_modules

ROOT = Path(__file__).resolve().parents[2]
# Each installed app's package, from its entry point (nothing loaded).
APP_PACKAGES = {entry.name: entry.module.rpartition(".")[0] for entry in entry_points(group=apps.GROUP)}
# What the apps build on: the kits, and the modules of tasks/ every app shares.
# tasks/demo.py is above the apps: the one place that drives them together.
KITS = ["tasks/hbase", "tasks/appdata", "tasks/backfill", "dashboards",
        *(str(p.relative_to(ROOT)) for p in sorted((ROOT / "tasks").glob("*.py")) if p.name != "demo.py")]


def test_the_apps_are_found_and_are_packages_of_tasks() -> None:
    assert set(APP_PACKAGES) >= {"feeds", "typeahead", "backfill"}
    assert all(package.startswith("tasks.") for package in APP_PACKAGES.values())


@pytest.mark.parametrize("kit", KITS)
def test_a_kit_imports_no_app(kit: str) -> None:
    path = ROOT / kit
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    assert files
    own = kit.replace("/", ".").removesuffix(".py")
    others = {package for package in APP_PACKAGES.values() if package != own}
    upward = {
        f"{file.relative_to(ROOT)}: {name}"
        for file in files
        for name in imported_modules(file)
        if any(name == package or name.startswith(package + ".") for package in others)
    }
    assert upward == set()


def test_the_rule_sees_a_kit_importing_an_app(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("from tasks.feeds.settings import FeedSettings\nimport tasks.typeahead.tables\n")
    assert {"tasks.feeds.settings", "tasks.typeahead.tables"} <= imported_modules(module)


# Imports every installed app's task modules into an app of its own and
# prints, per app, the queues its tasks run and those its manifest declares.
QUEUES_OF_TASKS = """
import importlib, json
from pinlater.kit import apps
from workers import registry
from workers.app import make_app

app = make_app("manifest_check", imports=())
found = apps.apps()
for manifest in found:
    for module in manifest.task_modules:
        importlib.import_module(module)
app.finalize(auto=True)
out = {}
for manifest in found:
    tasks = [t for t in app.tasks.values() if type(t).__module__ in manifest.task_modules]
    out[manifest.name] = {"tasks": sorted({registry.queue_of_task(t.name) or "" for t in tasks}),
                          "declared": sorted(manifest.queue_names)}
print(json.dumps(out))
"""


def test_each_manifest_declares_the_queues_its_tasks_run() -> None:
    result = subprocess.run([sys.executable, "-c", QUEUES_OF_TASKS], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert set(found) == set(APP_PACKAGES)
    for name, queues in found.items():
        assert queues["tasks"] == queues["declared"] and queues["tasks"], name


def test_each_manifest_names_parts_that_load() -> None:
    found, unavailable = apps.installed()
    assert unavailable == []
    for app in found:
        for reference in (app.tables, app.settings, app.panel, app.cli, *app.backfill_kinds):
            if reference is not None:
                assert apps.load(reference) is not None, reference
