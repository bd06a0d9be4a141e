"""Fixtures of the dashboard tests: a two-shard Redis cluster with a workload
of a few thousand jobs (shared by the whole directory: tests compare against
live backend counts, so one test's control does not upset another's check)
and a dashboard serving it, one per module. Headless Chromium (``browser_context``) is
in tests/support/browser.py: one Playwright per process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from dashboards.server import Dashboard
from pinlater import JobService
from tests.dashboards.support import (
    Cluster,
    Workload,
    dashboard_settings,
    flush_dashboard_dbs,
    run_workload,
)


@pytest.fixture(scope="session")
def workload(servers: None) -> Iterator[tuple[JobService, Workload]]:
    flush_dashboard_dbs()
    svc = JobService.from_settings(dashboard_settings(), source="dashboard-test")
    yield svc, run_workload(svc, f"dash_{uuid.uuid4().hex[:8]}")
    svc.close()


@pytest.fixture(scope="module")
def cluster(workload: tuple[JobService, Workload]) -> Iterator[Cluster]:
    """A dashboard per module, over the session's workload: one kept for the
    session went on refreshing, its panels probing, long after the last
    dashboard test of its process."""
    svc, work = workload
    dashboard = Dashboard.from_settings(dashboard_settings(), port=0, refresh_s=0.5).start()
    yield Cluster(svc, dashboard, work)
    dashboard.close()
