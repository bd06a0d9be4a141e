"""The dashboard's panels (``dashboards.panels``): found through entry
points, a broken one left out with its reason, their files put into the
page, and the page whole with no panel at all. No server is started."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import EntryPoint
from pathlib import Path
from typing import Any

import pytest

from dashboards import panels
from dashboards.panels import GROUP, Panel, View, check_routes, load_panels, panel_files
from dashboards.server import HEAD_MARK, SECTIONS_MARK, load_static
from pinlater.kit import apps


class FakePanel:
    name = "fake"

    def __init__(self, static_dir: Path, interval_s: float = 2.0) -> None:
        self.static_dir = static_dir
        self.interval_s = interval_s
        self.routes: Mapping[str, View] = {"/api/fake": lambda snap: {"taken_at_ms": snap["taken_at_ms"]}}

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass


def make_fake(*, interval_s: float) -> FakePanel:
    return FakePanel(Path("/nonexistent"), interval_s)


def make_failing(*, interval_s: float) -> FakePanel:
    raise ValueError("PINLATER_FAKE: must be\na number")


def installed(monkeypatch: pytest.MonkeyPatch, *entries: EntryPoint) -> None:
    def only(*, group: str) -> list[EntryPoint]:
        assert group == GROUP
        return list(entries)

    monkeypatch.setattr(panels, "entry_points", only)
    monkeypatch.setattr(apps, "installed", lambda: ([], []))  # no app's panel either


def test_no_panel_installed_is_a_whole_page(monkeypatch: pytest.MonkeyPatch) -> None:
    installed(monkeypatch)
    found, unavailable = load_panels(interval_s=1.0)
    assert found == [] and unavailable == []
    static = load_static(panel_files(found))
    page = static["/"][0].decode()
    assert HEAD_MARK not in page and SECTIONS_MARK not in page and "/static/panels/" not in page
    assert set(static) == {"/", "/static/app.css", "/static/app.js", "/static/controls.js", "/static/charts.js"}


def test_panels_load_by_name_and_a_broken_one_is_left_out_in_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    installed(monkeypatch,
              EntryPoint("zeta", f"{__name__}:make_fake", GROUP),
              EntryPoint("broken", f"{__name__}:make_failing", GROUP),
              EntryPoint("missing", "pinlater_no_such_extra:make", GROUP))
    found, unavailable = load_panels(interval_s=0.25)
    assert [type(p) for p in found] == [FakePanel] and found[0].interval_s == 0.25  # type: ignore[attr-defined]
    assert [(u.name, u.error) for u in unavailable] == [
        ("broken", "ValueError: PINLATER_FAKE: must be a number"),
        ("missing", "ModuleNotFoundError: No module named 'pinlater_no_such_extra'"),
    ]
    assert "dashboard panel broken left out: ValueError: PINLATER_FAKE: must be a number" in caplog.text


def test_a_panels_files_go_into_the_page(tmp_path: Path) -> None:
    (tmp_path / "fake.js").write_text("PL.panels.push({});\n")
    (tmp_path / "fake.css").write_text("#fake {}\n")
    (tmp_path / "panel.html").write_text('<section id="fake"></section>\n')
    (tmp_path / "notes.txt").write_text("not served\n")
    files = panel_files([FakePanel(tmp_path)])
    assert set(files.static) == {"/static/panels/fake/fake.js", "/static/panels/fake/fake.css"}
    assert files.static["/static/panels/fake/fake.js"][1] == "text/javascript; charset=utf-8"
    page = load_static(files)["/"][0].decode()
    assert '<script src="/static/panels/fake/fake.js" defer></script>' in page
    assert '<link rel="stylesheet" href="/static/panels/fake/fake.css">' in page
    # Its section sits among the page's cards, its scripts after the page's own.
    assert page.index('id="rates"') < page.index('<section id="fake">') < page.index("<h2>Jobs</h2>")
    assert page.index("/static/charts.js") < page.index("/static/panels/fake/fake.js") < page.index("</head>")


@pytest.mark.parametrize(("routes", "name", "says"), [
    ({"/api/overview": None}, "fake", "dashboard panel 'fake' claims '/api/overview', which is not free"),
    ({"/api/queues/x": None}, "fake", "dashboard panel 'fake' claims '/api/queues/x', which is not free"),
    ({"api/x": None}, "fake", "dashboard panel 'fake' claims 'api/x', which is not free"),
    ({"/api/x": None}, "Fake/..", "dashboard panel name 'Fake/..' is taken or not [a-z0-9-]{1,40}"),
])
def test_a_panel_cannot_take_the_dashboards_paths(routes: dict[str, Any], name: str, says: str) -> None:
    panel = FakePanel(Path("/nonexistent"))
    panel.routes, panel.name = routes, name
    with pytest.raises(ValueError) as caught:
        check_routes([panel], ["/api/overview"], reserved_prefix="/api/queues/")
    assert str(caught.value) == says


def test_two_panels_cannot_share_a_name_or_a_path() -> None:
    one, two = FakePanel(Path("/nonexistent")), FakePanel(Path("/nonexistent"))
    with pytest.raises(ValueError, match="'fake' is taken"):
        check_routes([one, two], [], reserved_prefix="/api/queues/")
    two.name = "other"
    with pytest.raises(ValueError, match="claims '/api/fake'"):
        check_routes([one, two], [], reserved_prefix="/api/queues/")


def test_the_installed_panels_are_panels() -> None:
    """Each installed panel, made without starting it, has the shape the
    dashboard needs; its script registers itself with the page."""
    found, unavailable = load_panels(interval_s=1.0)
    try:
        assert unavailable == []
        assert {p.name for p in found} >= {"hbase", "backfills"}
        for panel in found:
            assert isinstance(panel, Panel)
            assert all(path.startswith("/api/") for path in panel.routes)
            scripts = [p for p in panel.static_dir.iterdir() if p.suffix == ".js"]
            assert scripts and any("PL.panels.push(" in p.read_text() for p in scripts)
            assert (panel.static_dir / "panel.html").exists()
    finally:
        for panel in found:
            panel.close()
