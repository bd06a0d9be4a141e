"""Panels: the parts of the dashboard that other packages add (the HBase
clusters of the feeds, the backfill runs, ...): each installed app's
``panel`` (its manifest, ``pinlater.kit.apps``), and any entry point of the
``pinlater.dashboard_panels`` group (a panel that is no app's), so that the
dashboard imports nothing of the packages it shows. With no panel installed
the dashboard shows the job service alone.

A panel is named by a factory ``make(*, interval_s) -> Panel``
(``interval_s``: how often the page refreshes, and so how often a panel's
background reads need to run). A ``Panel`` gives:

- ``name``: its short name; its files are served under
  ``/static/panels/<name>/``;
- ``routes``: each GET path of its JSON API (``/api/<something>``) and the
  view answering it, from the snapshot the rest of the page shows
  (``dashboards.snapshot``), so a request reads nothing more from the shards;
- ``static_dir``: its part of the page, a directory holding ``panel.html``
  (its section, put into the page where panels go) and any ``*.js`` and
  ``*.css`` (linked from the page head, after the dashboard's own);
- ``start()`` and ``close()``: its background work, if any.

A panel's script registers itself with ``PL.panels.push({path, render,
failed})``: the page then polls ``path`` with everything else and hands
``render`` the answer, or ``failed`` the one-line reason it could not be read.

A panel that cannot be loaded (its extra is not installed, its factory
fails) is left out, logged in one line and listed in ``/api/config``'s
``unavailable_panels``; the rest of the dashboard works.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pinlater.kit import apps
from pinlater.kit.cli_output import one_line

log = logging.getLogger(__name__)

GROUP = "pinlater.dashboard_panels"
PAGE_SECTION = "panel.html"
_NAME = re.compile(r"[a-z0-9-]{1,40}")
CONTENT_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8"}

View = Callable[[Mapping[str, Any]], Mapping[str, Any]]  # the dashboard's snapshot -> a JSON-ready answer


@runtime_checkable
class Panel(Protocol):
    name: str
    routes: Mapping[str, View]
    static_dir: Path

    def start(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Unavailable:
    """A panel left out, and why (one line)."""

    name: str
    error: str


def load_panels(interval_s: float) -> tuple[list[Panel], list[Unavailable]]:
    """The installed panels, by name, and those that could not be made."""
    panels: list[Panel] = []
    unavailable: list[Unavailable] = []
    found, apps_unavailable = apps.installed()
    unavailable += [Unavailable(u.name, u.error) for u in apps_unavailable]
    factories: dict[str, Callable[[], Any]] = {app.name: partial(apps.load, app.panel) for app in found if app.panel}
    for entry in entry_points(group=GROUP):
        factories.setdefault(entry.name, entry.load)
    for name, factory in sorted(factories.items()):
        try:
            panels.append(factory()(interval_s=interval_s))
        except Exception as exc:  # noqa: BLE001 -- one panel's missing extra or bad settings must not stop the rest
            reason = one_line(f"{type(exc).__name__}: {exc}")
            log.warning("dashboard panel %s left out: %s", name, reason)
            unavailable.append(Unavailable(name, reason))
    return panels, unavailable


@dataclass(frozen=True, slots=True)
class PanelFiles:
    """What the panels add to the page: files served by path, the tags that
    link them from the head, and the sections in the page's body."""

    static: dict[str, tuple[bytes, str]]
    head: str
    sections: str


def panel_files(panels: Sequence[Panel]) -> PanelFiles:
    static: dict[str, tuple[bytes, str]] = {}
    head: list[str] = []
    sections: list[str] = []
    for panel in panels:
        for path in sorted(p for p in panel.static_dir.iterdir() if p.suffix in CONTENT_TYPES):
            url = f"/static/panels/{panel.name}/{path.name}"
            static[url] = (path.read_bytes(), CONTENT_TYPES[path.suffix])
            head.append(f'<script src="{url}" defer></script>' if path.suffix == ".js"
                        else f'<link rel="stylesheet" href="{url}">')
        section = panel.static_dir / PAGE_SECTION
        if section.exists():
            sections.append(section.read_text(encoding="utf-8").strip())
    return PanelFiles(static, "\n".join(head), "\n\n  ".join(sections))


def check_routes(panels: Sequence[Panel], taken: Iterable[str], reserved_prefix: str) -> None:
    """ValueError (one line) for a panel name that is not a short lower-case
    word, a name or path two panels claim, or a path the dashboard's own
    (``taken``, or under ``reserved_prefix``)."""
    seen = set(taken)
    names: set[str] = set()
    for panel in panels:
        if not _NAME.fullmatch(panel.name) or panel.name in names:
            raise ValueError(f"dashboard panel name {panel.name[:40]!r} is taken or not [a-z0-9-]{{1,40}}")
        names.add(panel.name)
        for path in panel.routes:
            if path in seen or path.startswith(reserved_prefix) or not path.startswith("/"):
                raise ValueError(f"dashboard panel {panel.name!r} claims {path[:100]!r}, which is not free")
            seen.add(path)
