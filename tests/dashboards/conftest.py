"""Fixtures of the dashboard tests: a two-shard Redis cluster with a workload
of a few thousand jobs and a dashboard serving it (shared by the whole
directory: tests compare against live backend counts, so one test's control
does not upset another's check), and headless Chromium."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboards.server import Dashboard
from pinlater import JobService
from tests.dashboards.support import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    Cluster,
    dashboard_settings,
    flush_dashboard_dbs,
    run_workload,
)


@pytest.fixture(scope="session")
def cluster(servers: None) -> Iterator[Cluster]:
    flush_dashboard_dbs()
    settings = dashboard_settings()
    svc = JobService.from_settings(settings, source="dashboard-test")
    work = run_workload(svc, f"dash_{uuid.uuid4().hex[:8]}")
    dashboard = Dashboard.from_settings(settings, port=0, refresh_s=0.5).start()
    yield Cluster(svc, dashboard, work)
    dashboard.close()
    svc.close()


@pytest.fixture(scope="session")
def browser_context(servers: None) -> Iterator[Any]:
    """Debian's Chromium through Playwright, with a new empty profile."""
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: run scripts/services up (it installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pl-chromium-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800},
        )
        context.set_default_timeout(15_000)
        yield context
        context.close()
