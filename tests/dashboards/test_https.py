"""The dashboard over HTTPS (PINLATER_HTTP_TLS_CERT and _KEY): its page and
API answer a client that trusts the CA, its controls still need the
operator token, and plain HTTP gets no answer."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from dashboards.server import Dashboard
from pinlater import JobService
from pinlater.kit.devcerts import DevCA
from tests.dashboards.support import Workload, dashboard_settings


def test_the_dashboard_serves_https_when_given_a_certificate(
        workload: tuple[JobService, Workload], tmp_path: Path) -> None:
    ca = DevCA()
    ca.issue("dashboard", server_names=("127.0.0.1",)).write(tmp_path / "cert.pem", tmp_path / "key.pem")
    (tmp_path / "ca.pem").write_bytes(ca.cert_pem)
    settings = dashboard_settings(http_tls_cert=str(tmp_path / "cert.pem"), http_tls_key=str(tmp_path / "key.pem"))
    dashboard = Dashboard.from_settings(settings, port=0, refresh_s=0.5).start()
    try:
        assert dashboard.url.startswith("https://127.0.0.1:")
        trusted = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
        with urllib.request.urlopen(dashboard.url + "/healthz", context=trusted, timeout=10) as response:
            assert response.read() == b"ok\n"
        with urllib.request.urlopen(dashboard.url + "/", context=trusted, timeout=10) as response:
            assert b"<html" in response.read().lower()
        pause = urllib.request.Request(dashboard.url + "/api/queues/any_queue/pause", data=b"{}", method="POST",
                                       headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(pause, context=trusted, timeout=10)
        assert refused.value.code in (401, 403)
        assert "token" in refused.value.read().decode().lower()
        with pytest.raises(OSError):
            urllib.request.urlopen(dashboard.url.replace("https", "http") + "/healthz", timeout=10)
    finally:
        dashboard.close()
