"""The core package stands alone: it imports nothing from the packages built
on it nor from the extras' dependencies, and `pinlater` finds the other
packages' subcommands through entry points; one that cannot load costs that
command only. The dashboard knows nothing of the apps either: their panels
are plugins (``dashboards.panels``) that import without Celery."""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pytest

from dashboards import panels
from pinlater import cli, cli_commands
from pinlater.kit import apps

ROOT = Path(__file__).resolve().parents[2]
# Each package and the packages it must not import.
FORBIDDEN = {
    "pinlater": {"dashboards", "workers", "tasks", "bench", "tests"},
    "dashboards": {"workers", "tasks", "bench", "tests"},
}
COMMANDS = {
    "queues", "create-queue", "delete-queue", "enqueue", "lookup", "count", "scan", "retry-failed", "delete", "cancel",
    "create-batch", "seal-batch", "batch", "cancel-batch",
    "set-rate", "set-concurrency", "set-key-limits", "set-unique-period", "pause", "resume", "config", "shards",
    "restore-queues", "monitor", "server", "server-stats", "dashboard", "migrate", "dev-certs", "trace", "app",
}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("package", list(FORBIDDEN))
def test_a_package_imports_nothing_from_the_packages_above_it(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert len(files) > 10
    upward = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in imported_modules(path)
        if name.split(".")[0] in FORBIDDEN[package]
    }
    assert upward == set()


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\nfrom tasks.feeds import panel\nimport dashboards.api as api\nfrom . import x\n")
    assert imported_modules(module) == {"os", "tasks.feeds", "dashboards.api"}


# Imports every module of the packages named, with the given top-level
# packages made unimportable (as if their extra were not installed).
IMPORT_ALL_WITHOUT = """
import importlib, pkgutil, sys
blocked = set(sys.argv[1].split(","))

class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, Block())
for name in sys.argv[2:]:
    module = importlib.import_module(name)
    print(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        importlib.import_module(info.name)
        print(info.name)
"""
# The packages of the extras (pyproject.toml) and of dev.
CELERY = ["celery", "kombu", "flower", "billiard"]
HBASE = ["happybase"]
# prometheus_client is the otel extra's, like OpenTelemetry, which the core
# imports only when metrics are on (tests/unit/test_tracing.py).
DEV = ["pytest", "fakeredis", "thrift", "playwright", "honcho", "packaging"]


# The modules of the dashboard's panels: the apps' (their manifests) and any other.
PANELS = sorted({app.panel.partition(":")[0] for app in apps.apps() if app.panel}
                | {entry.module for entry in entry_points(group=panels.GROUP)})


@pytest.mark.parametrize(("packages", "missing", "at_least"), [
    (["pinlater"], CELERY + HBASE + DEV, 10),  # the core install
    (["dashboards"], CELERY + DEV, 10),  # core + the dashboard extra
    (PANELS, CELERY + DEV, 2),  # the dashboard's panels, on the same
    (["workers"], HBASE + DEV, 10),  # core + celery
])
def test_each_part_imports_with_only_its_own_dependencies(packages: list[str], missing: list[str],
                                                          at_least: int) -> None:
    result = subprocess.run([sys.executable, "-c", IMPORT_ALL_WITHOUT, ",".join(missing), *packages],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    imported = result.stdout.split()
    assert set(packages) <= set(imported) and len(imported) >= at_least


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert len(actions) == 1
    choices: dict[str, argparse.ArgumentParser] = actions[0].choices
    return choices


def test_the_cli_lists_every_command() -> None:
    assert set(subcommands(cli.build_parser())) == COMMANDS
    # The installed `pinlater` too: its entry points come from the package metadata.
    shown = subprocess.run([sys.executable, "-m", "pinlater.cli", "--help"], capture_output=True, text=True,
                           check=True, timeout=60).stdout
    listed = shown.split("{", 1)[1].split("}", 1)[0].split(",")
    assert set(listed) == COMMANDS


def needs_a_missing_package(sub: Any) -> None:
    """A registered command whose extra is not installed: it fails when it runs."""

    def run(_args: argparse.Namespace) -> int:
        import pinlater_no_such_extra  # noqa: F401

        return 0

    sub.add_parser("needy").set_defaults(run=run)


def with_extra_entries(monkeypatch: pytest.MonkeyPatch, *entries: EntryPoint) -> None:
    def with_extras(*, group: str) -> list[EntryPoint]:
        return [*entry_points(group=group), *entries]

    monkeypatch.setattr("pinlater.cli_commands.entry_points", with_extras)


def test_a_command_that_cannot_load_is_refused_in_one_line_and_the_others_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with_extra_entries(monkeypatch, EntryPoint("broken", "pinlater_no_such_extra:register", cli_commands.GROUP))
    assert set(subcommands(cli.build_parser())) == COMMANDS | {"broken"}
    assert cli.main(["broken", "--port", "1", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "`pinlater broken` is unavailable: ModuleNotFoundError: No module named 'pinlater_no_such_extra'" in err
    assert "pip install 'pinlater-py[all]'" in err
    # Another command still parses and runs (and refuses its own bad input in one line).
    assert cli.main(["server-stats", "--url", "http://127.0.0.1:1"]) == 2
    assert "cannot read server stats from http://127.0.0.1:1" in capsys.readouterr().err


def test_a_package_missing_when_a_command_runs_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with_extra_entries(monkeypatch, EntryPoint("needy", f"{__name__}:needs_a_missing_package", cli_commands.GROUP))
    assert cli.main(["needy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "`pinlater needy` needs a package that is not installed: No module named 'pinlater_no_such_extra'" in err


def test_the_root_conftest_and_its_plugins_load_nothing_of_the_apps() -> None:
    """``make test-core`` must not need the apps: the root conftest and the
    fixture plugins it names import no ``tasks`` or ``dashboards`` module."""
    script = (
        "import sys, importlib\n"
        "root = importlib.import_module('tests.conftest')\n"
        "for name in root.pytest_plugins: importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tasks', 'dashboards')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", result.stdout
