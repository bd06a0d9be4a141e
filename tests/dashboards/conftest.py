"""Fixtures of the dashboard tests: a two-shard Redis cluster with a workload
of a few thousand jobs and a dashboard serving it (shared by the whole
directory: tests compare against live backend counts, so one test's control
does not upset another's check). Headless Chromium (``browser_context``) is
in tests/support/browser.py: one Playwright per process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from dashboards.server import Dashboard
from pinlater import JobService
from tests.dashboards.support import (
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
