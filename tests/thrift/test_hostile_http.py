"""Slowloris on the Thrift server's metrics endpoint (``/metrics``, on the
project's one HTTP server): 100 connections from 100 client addresses
trickle a header byte every 1.5 s, more than its 40 connections
(PINLATER_HTTP_MAX_CONNECTIONS here). Those past the 40 are closed at once
(every slot holds a request begun within the second); a scraper is answered
within a second all along, taking the slot of a slow hostile connection
when none is free; both are counted in ``/metrics``."""

from __future__ import annotations

import http.client
import re
import time
from collections.abc import Callable

import pytest

from pinlater.thrift.server import ThriftServer
from tests.http_client import Trickler, timed_get
from tests.thrift.conftest import make_service

HOSTILE = 100
SLOTS = 40


def scrape(address: tuple[str, int]) -> str:
    connection = http.client.HTTPConnection(*address, timeout=5)
    try:
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        assert response.status == 200
        return response.read().decode()
    finally:
        connection.close()


def test_a_scraper_is_answered_within_a_second_while_100_connections_trickle(
    monkeypatch: pytest.MonkeyPatch, start_server: Callable[..., ThriftServer]
) -> None:
    monkeypatch.setenv("PINLATER_HTTP_MAX_CONNECTIONS", str(SLOTS))
    service = make_service("memory")
    try:
        server = start_server(service)
        assert server.metrics is not None
        address = ("127.0.0.1", server.metrics.port)
        with Trickler(address, HOSTILE) as hostile:
            for _ in range(3):
                time.sleep(1.5)  # every hostile request is slow now
                hostile.step()
                status, elapsed = timed_get(address, "/metrics")
                assert status == 200 and elapsed < 1.0, elapsed
            text = scrape(address)
        counts = dict(re.findall(r'^pinlater_http_(\w+){server="metrics"} (\d+)$', text, re.MULTILINE))
        assert int(counts["connections_refused_total"]) == HOSTILE - SLOTS
        # The first scrape took a slow one's slot; later ones found it free again.
        assert int(counts["connections_shed_total"]) >= 1
        assert int(counts["connections_open"]) <= SLOTS
    finally:
        service.close()
