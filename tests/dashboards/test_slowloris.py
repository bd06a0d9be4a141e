"""Slowloris on the dashboard: 100 connections from 100 client addresses
each trickle a header byte a second and never finish; a normal client is
answered within a second all along, each trickled request is closed at its
deadline (PINLATER_HTTP_REQUEST_TIMEOUT_S, 3 s here) and counted in
``/metrics``."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from dashboards.server import Dashboard
from pinlater import JobService
from tests.dashboards.http import call
from tests.dashboards.support import dashboard_settings
from tests.http_client import Trickler, timed_get

HOSTILE = 100
DEADLINE_S = 3.0


@pytest.fixture
def dashboard(servers: None) -> Iterator[Dashboard]:
    settings = dashboard_settings(http_request_timeout_s=DEADLINE_S)
    service = JobService.from_settings(settings, source="dashboard-slowloris-test")
    d = Dashboard(service, settings, port=0, panels=[], owns_service=True).start()
    yield d
    d.close()


def http_metric(dashboard: Dashboard, name: str) -> int:
    status, text = call(dashboard.url + "/metrics")
    assert status == 200
    match = re.search(rf'^pinlater_http_{name}{{server="dashboard"}} (\d+)$', text, re.MULTILINE)
    assert match, f"no pinlater_http_{name} in /metrics"
    return int(match.group(1))


def test_a_normal_client_is_answered_within_a_second_while_100_connections_trickle(dashboard: Dashboard) -> None:
    address = dashboard.http.address
    # Before the first trickled byte: every deadline is at least DEADLINE_S past it.
    opened = time.monotonic()
    held = 0
    with Trickler(address, HOSTILE) as hostile:
        started = time.monotonic()
        while time.monotonic() - started < DEADLINE_S - 0.5:
            time.sleep(0.5)
            hostile.step()
            for path in ("/healthz", "/"):
                status, elapsed = timed_get(address, path)
                assert status == 200 and elapsed < 1.0, (path, elapsed)
            # Read at once in the server, the last time surely before any
            # deadline: on a loaded machine the loop may end past them.
            if time.monotonic() - opened < DEADLINE_S - 0.5:
                held = dashboard.http.counters["connections_open"]
        assert held >= HOSTILE  # all held: none closed early
        # Past the deadline of their first byte, however they trickle: all closed, counted.
        assert hostile.closed_by_server(within_s=DEADLINE_S + 1.5 - (time.monotonic() - started)) == set(
            range(HOSTILE))
        assert time.monotonic() - started < DEADLINE_S + 2
    assert http_metric(dashboard, "request_timeouts_total") == HOSTILE
    assert timed_get(address, "/healthz")[0] == 200
