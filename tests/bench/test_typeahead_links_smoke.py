"""A short run of bench/typeahead_links.py, so the benchmark cannot rot between full runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench.smoke import run_smoke

PATHS = ("source_jobs", "fixup", "fixup_service", "rebuild", "rebuild_cached")


@pytest.mark.slow
def test_typeahead_links_benchmark_smoke(servers: None, tmp_path: Path) -> None:
    stdout, report = run_smoke("typeahead_links.py", tmp_path)
    assert report["importers"] == 120 and report["rounds"] == 1
    for path in PATHS:
        assert report[f"{path}_importers_per_s"] > 0 and len(report["seconds"][path]) == 1
    # Every path wrote cells: a fix-up rewrites each importer's shared contact, twice (link, unlink).
    assert report["cells_written"]["fixup"][0] >= 2 * report["importers"]
    assert report["cells_written"]["fixup_service"] == report["cells_written"]["fixup"]
    pages = -(-report["importers"] // report["account_page"])
    assert report["service_calls"]["accountChanged"]["requests"] == 2 * pages  # a link and an unlink
    assert report["ratio_fixup"] > 0 and report["ratio_fixup_service"] > 0 and report["ratio_rebuild_cached"] > 0
    assert "ratio (fix-up / settling each import whole):" in stdout
