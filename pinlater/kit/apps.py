"""Apps: the packages built on the job service (the feeds, the typeahead, the
backfill), each declared by one manifest and found through one entry-point
group, ``pinlater.apps``, so that nothing below an app names it.

An entry point's name is the app's, its value an ``App``:

    [project.entry-points."pinlater.apps"]
    feeds = "tasks.feeds.app:APP"

The manifest says what the app brings, and each part is read by the layer
that needs it: workers import its ``task_modules`` (``workers.app``), the
dashboard shows its ``panel`` (``dashboards.panels``), ``pinlater-hbase
tables`` checks its ``tables``, the backfill runs its ``backfill_kinds``,
docs/configuration.md lists its ``settings`` (``pinlater.kit.settings_doc``),
``pinlater app NAME`` runs its ``cli``.
Parts other than the queues are named as ``module:attribute`` and loaded
only where used, so a manifest imports cheaply and a worker loads no
dashboard panel, nor the dashboard any Celery.

An app whose manifest cannot be loaded (its extra is not installed) is left
out with one line in the log; ``installed`` says which and why.
"""

from __future__ import annotations

import argparse
import logging
import pkgutil
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from pinlater.kit.cli_output import one_line
from pinlater.queue_config import QueueConfig

log = logging.getLogger(__name__)

GROUP = "pinlater.apps"
_REFERENCE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_MODULE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@dataclass(frozen=True, slots=True)
class App:
    name: str
    # Its PinLater queues, each with the config it gets when first created
    # (priorities, rate, claim timeout, retry policy); after that they are
    # the operators'.
    queues: tuple[QueueConfig, ...] = ()
    # Modules of its Celery tasks: every worker imports them.
    task_modules: tuple[str, ...] = ()
    # ``module:attribute`` of each part, or None (or ()) when it has none:
    tables: str | None = None  # a tuple of tasks.hbase.tables.TableDef
    settings: str | None = None  # its SETTINGS (pinlater.kit.envsettings.Setting)
    panel: str | None = None  # a dashboard panel factory make(*, interval_s) -> Panel
    backfill_kinds: tuple[str, ...] = ()  # each a tasks.backfill.kinds.BackfillKind
    cli: str | None = None  # its command's main(argv) -> int

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"app name {self.name!r} must be an identifier")
        for module in self.task_modules:
            if not _MODULE.fullmatch(module):
                raise ValueError(f"app {self.name}: task module {module!r} is not a dotted module name")
        for reference in (self.tables, self.settings, self.panel, self.cli, *self.backfill_kinds):
            if reference is not None and not _REFERENCE.fullmatch(reference):
                raise ValueError(f"app {self.name}: {reference!r} is not module:attribute")
        names = [q.name for q in self.queues]
        if len(set(names)) != len(names):
            raise ValueError(f"app {self.name}: a queue is declared twice in {names}")

    def queue(self, name: str) -> QueueConfig:
        for config in self.queues:
            if config.name == name:
                return config
        raise KeyError(f"app {self.name} has no queue {name!r}")

    @property
    def queue_names(self) -> tuple[str, ...]:
        return tuple(q.name for q in self.queues)


def load(reference: str) -> Any:
    """What a manifest's ``module:attribute`` names (imports the module)."""
    return pkgutil.resolve_name(reference)


@dataclass(frozen=True, slots=True)
class Unavailable:
    """An app left out, and why (one line)."""

    name: str
    error: str


def installed() -> tuple[list[App], list[Unavailable]]:
    """The installed apps, by name, and those whose manifest could not be loaded."""
    apps: list[App] = []
    unavailable: list[Unavailable] = []
    for entry in sorted(entry_points(group=GROUP), key=lambda e: e.name):
        try:
            app = entry.load()
            if not isinstance(app, App):
                raise TypeError(f"{entry.value} is a {type(app).__name__}, not an App")
            if app.name != entry.name:
                raise ValueError(f"{entry.value} is app {app.name!r}, registered as {entry.name!r}")
        except Exception as exc:  # noqa: BLE001 -- one app's missing extra must not stop the others
            reason = one_line(f"{type(exc).__name__}: {exc}")
            log.warning("app %s left out: %s", entry.name, reason)
            unavailable.append(Unavailable(entry.name, reason))
            continue
        apps.append(app)
    return apps, unavailable


def apps() -> list[App]:
    """The installed apps that load."""
    return installed()[0]


def task_modules(found: Sequence[App] | None = None) -> tuple[str, ...]:
    """Every task module of ``found`` (default: the installed apps), once each."""
    return tuple(dict.fromkeys(m for app in (apps() if found is None else found) for m in app.task_modules))


def add_app_command(sub: Any) -> None:
    """``pinlater app``: the installed apps and their parts; ``pinlater app
    NAME ARGS...`` runs the command the app's manifest names (``cli``), so an
    app's entry point alone makes its command reachable."""
    p = sub.add_parser("app", help="list the installed apps, or run one's command: pinlater app NAME ARGS...",
                       description="Without NAME, list the installed apps; with it, run that app's command.")
    p.add_argument("name", nargs="?", help="an installed app")
    p.add_argument("args", nargs=argparse.REMAINDER, help="its command's arguments (NAME --help for them)")
    p.set_defaults(run=_run_app)


def _run_app(args: argparse.Namespace) -> int:
    found, unavailable = installed()
    if args.name is None:
        for each in found:
            parts = [f"queues: {', '.join(each.queue_names) or '-'}"]
            parts += [name for name in ("tables", "panel", "settings") if getattr(each, name)]
            parts += [f"command: pinlater app {each.name}"] if each.cli else []
            print(f"{each.name}  {'  '.join(parts)}")
        for left_out in unavailable:
            print(f"{left_out.name}  (unavailable: {left_out.error})")
        return 0
    named = {app.name: app for app in found}
    app = named.get(args.name)
    if app is None:
        gone = next((g for g in unavailable if g.name == args.name), None)
        if gone is not None:
            raise ValueError(f"app {args.name!r} is unavailable: {gone.error}")
        raise ValueError(f"no app {args.name!r} is installed (installed: {', '.join(sorted(named)) or 'none'})")
    if app.cli is None:
        raise ValueError(f"app {app.name!r} has no command")
    main = load(app.cli)
    return int(main(list(args.args)))
