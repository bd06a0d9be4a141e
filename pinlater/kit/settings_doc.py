"""docs/configuration.md: every environment variable of every package, made
from the packages' ``SETTINGS`` tuples of ``pinlater.kit.envsettings.Setting``.

    python -m pinlater.kit.settings_doc > docs/configuration.md

The packages are found through the ``pinlater.settings`` entry-point group
(pyproject.toml): an entry's name is the package as the table shows it, its
value the package's ``SETTINGS``; and the apps' through their manifests
(``pinlater.kit.apps``), each shown as the package of its ``settings``. So the core lists the packages built on it
without importing them by name, as ``pinlater.cli_commands`` does for their
commands; it needs every extra installed, since it loads every package's
settings. A test compares the file with this output.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from pinlater.kit import apps
from pinlater.kit.envsettings import Setting

GROUP = "pinlater.settings"
COMMAND = "python -m pinlater.kit.settings_doc > docs/configuration.md"

_INTRO = f"""# Configuration

Every process is configured by environment variables. This table lists
every one of every package: the variable, the package whose settings object
reads it, its default, and what it means. It is generated from the
packages' `SETTINGS` declarations; do not edit it, run
`{COMMAND}`.

All are read alike, by `pinlater.kit.envsettings`:

* a variable set to nothing or to white space is unset: it takes the default;
* a number is ASCII decimal, finite and within its bounds (`²`, `٣`,
  `1_000`, `inf`, `nan`, `1e400` and numbers out of range are refused);
* a flag is `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`;
* an address is `HOST:PORT` (or `[IPv6]:PORT`) with a port from 1 to 65535;
* a value a setting cannot take stops the process when it reads its
  settings, with one line, `VARIABLE: problem` (a `SettingError`); a secret
  or a URL, which may carry a password, is never repeated in it.

"""


def discovered() -> list[tuple[str, tuple[Setting, ...]]]:
    """(package, its SETTINGS) of every ``pinlater.settings`` entry point, by package name."""
    references = {entry.name: entry.value for entry in entry_points(group=GROUP)}
    installed, unavailable = apps.installed()
    if unavailable:  # its settings would be missing from the table
        raise RuntimeError("; ".join(f"app {u.name}: {u.error}" for u in unavailable))
    for app in installed:
        if app.settings is not None:
            references[app.settings.split(":")[0].rpartition(".")[0] or app.name] = app.settings
    found = []
    for name, reference in sorted(references.items()):
        settings = apps.load(reference)
        if not isinstance(settings, tuple) or not all(isinstance(s, Setting) for s in settings):
            raise TypeError(f"{name} = {reference} is not a tuple of Setting")
        found.append((name, settings))
    return found


def render(packages: Sequence[tuple[str, Sequence[Setting]]]) -> str:
    """The markdown of docs/configuration.md."""
    rows = ["| variable | package | default | meaning |", "|---|---|---|---|"]
    seen: dict[str, str] = {}
    for package, settings in packages:
        for setting in settings:
            if setting.variable in seen:
                raise ValueError(f"{setting.variable} is declared by both {seen[setting.variable]} and {package}")
            seen[setting.variable] = package
            default = f"`{setting.default}`" if setting.default else "(unset)"
            rows.append(f"| `{setting.variable}` | {package} | {_cell(default)} | {_cell(setting.meaning)} |")
    return _INTRO + "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def main() -> int:
    # UTF-8 whatever the locale: the text holds characters such as "²".
    sys.stdout.buffer.write(render(discovered()).encode())
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
