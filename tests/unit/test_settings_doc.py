"""Every package declares its variables (``SETTINGS``), docs/configuration.md
is exactly what ``pinlater.kit.settings_doc`` makes of them, and each declared
default is the default its settings object really has."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pinlater.kit.settings_doc import COMMAND, discovered, render
from pinlater.settings import Settings
from tasks.appdata.settings import AppDataSettings
from tasks.feeds.settings import FeedSettings
from tasks.hbase.settings import HBaseSettings
from tasks.typeahead.settings import TypeaheadSettings
from workers.settings import TransportSettings

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
# Each package of the table, and its settings object as it is by default.
DEFAULTS: dict[str, Callable[[], object]] = {
    "pinlater": Settings,
    "tasks.appdata": AppDataSettings,
    "tasks.feeds": FeedSettings,
    "tasks.hbase": HBaseSettings,
    "tasks.typeahead": TypeaheadSettings,
    "workers": lambda: TransportSettings(Settings()),
}


def test_every_package_with_settings_is_found() -> None:
    found = [name for name, _ in discovered()]
    assert found == sorted(DEFAULTS), (
        "the pinlater.settings entry points differ from this test's packages: after changing them in "
        "pyproject.toml, reinstall (make venv, or pip install -e '.[dev]') and list the package here"
    )


def test_the_configuration_doc_is_what_the_generator_makes() -> None:
    made = render(discovered())
    assert DOC.read_text(encoding="utf-8") == made, f"docs/configuration.md is out of date: run `{COMMAND}`"


def test_each_declared_default_is_the_settings_objects_default() -> None:
    checked = 0
    for package, settings in discovered():
        default = DEFAULTS[package]()
        for setting in settings:
            assert setting.meaning and "\n" not in setting.meaning, setting.variable
            if setting.field and setting.default:
                assert setting.parse(setting.default) == getattr(default, setting.field), setting.variable
                checked += 1
            elif setting.field:  # unset: the object's default is "none"
                assert getattr(default, setting.field) in (None, "", ()), setting.variable
    assert checked > 40
