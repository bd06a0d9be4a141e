"""Who may use the dashboard: reads protected by the operator token when
the settings say so, controls off without one, the Host check, the Flower
link shown only to a token's holder, token guesses throttled per address,
and the settings that say all this from the environment."""

from __future__ import annotations

import http.client
import json
import uuid

import pytest

from dashboards.server import Dashboard
from pinlater import JobService
from pinlater.settings import Settings, hash_secret, parse_shards
from tests.dashboards.http import call


def test_protected_reads_disabled_controls_and_host_check(servers: None) -> None:
    memory = dict(shards=parse_shards("m1=memory://"), control_url=f"memory://{uuid.uuid4().hex}")
    with pytest.raises(ValueError, match="PROTECT_READS needs"):
        Dashboard.from_settings(Settings(**memory, dashboard_protect_reads=True), port=0)  # type: ignore[arg-type]

    settings = Settings(**memory, dashboard_protect_reads=True, dashboard_token_sha256=hash_secret("s3"))  # type: ignore[arg-type]
    svc = JobService.from_settings(settings)
    svc.create_queue("q")
    dash = Dashboard(svc, settings, port=0).start()
    try:
        assert call(dash.url + "/api/overview")[0] == 401
        assert call(dash.url + "/metrics")[0] == 401
        assert call(dash.url + "/api/hbase")[0] == 401
        assert call(dash.url + "/api/overview", headers={"Authorization": "Bearer s3"})[0] == 200
        assert call(dash.url + "/metrics", token="s3")[0] == 200
        status, config = call(dash.url + "/api/config")  # what the page needs to ask for the token
        assert status == 200 and config["reads_protected"] is True
        status, page = call(dash.url + "/")
        assert status == 200 and "<title>PinLater status</title>" in page
        # DNS rebinding: a page of another site reaching 127.0.0.1 under its own name.
        assert call(dash.url + "/api/config", headers={"Host": "evil.example"})[0] == 421
    finally:
        dash.close()
        svc.close()

    open_settings = Settings(**memory)  # type: ignore[arg-type]
    svc = JobService.from_settings(open_settings)
    dash = Dashboard(svc, open_settings, port=0).start()
    try:
        status, body = call(dash.url + "/api/queues/q/pause", {}, token="anything")
        assert status == 403 and body["error"]["code"] == "CONTROLS_DISABLED"
        assert call(dash.url + "/api/config")[1]["controls_enabled"] is False
    finally:
        dash.close()
        svc.close()


def test_the_flower_link_goes_only_to_a_caller_with_the_token(servers: None) -> None:
    """/api/config is open (the page learns from it to ask for the token),
    so Flower's address, a way to every task's arguments and to remote
    control of the workers, is in it only for a caller with the token."""
    memory = dict(shards=parse_shards("m1=memory://"), control_url=f"memory://{uuid.uuid4().hex}")
    flower = "http://flower:Fl0wer-pw@flower.internal:5555/flower"
    settings = Settings(**memory, flower_url=flower, dashboard_token_sha256=hash_secret("s3"))  # type: ignore[arg-type]
    svc = JobService.from_settings(settings)
    dash = Dashboard(svc, settings, port=0).start()
    try:
        for headers in ({}, {"X-PinLater-Token": "wrong"}, {"Authorization": "Bearer wrong"}):
            status, config = call(dash.url + "/api/config", headers=headers)
            assert status == 200 and config["flower_url"] is None and config["controls_enabled"] is True
            assert "flower.internal" not in json.dumps(config)
        for headers in ({"X-PinLater-Token": "s3"}, {"Authorization": "Bearer s3"}):
            status, config = call(dash.url + "/api/config", headers=headers)
            assert status == 200 and config["flower_url"] == "http://flower:***@flower.internal:5555/flower"
    finally:
        dash.close()
        svc.close()


def test_operator_token_guesses_are_throttled_per_address(servers: None) -> None:
    """The operator token is guessed no faster than the admin secret: after
    3 wrong tokens from an address within the window, its attempts (the
    right token too) are refused unchecked with 429, while another
    address's right token still works."""
    memory = dict(shards=parse_shards("m1=memory://"), control_url=f"memory://{uuid.uuid4().hex}")
    settings = Settings(**memory, dashboard_token_sha256=hash_secret("s3"),  # type: ignore[arg-type]
                        admin_secret_max_failures=3, admin_secret_max_failures_all=10)
    svc = JobService.from_settings(settings)
    svc.create_queue("q")
    dash = Dashboard(svc, settings, port=0).start()
    try:
        for _ in range(3):
            status, body = call(dash.url + "/api/queues/q/pause", {}, token="wrong")
            assert status == 403 and body["error"]["code"] == "TOKEN_INVALID"
        for token in ("wrong", "s3"):
            status, body = call(dash.url + "/api/queues/q/pause", {}, token=token)
            assert status == 429 and body["error"]["code"] == "TOO_MANY_WRONG_TOKENS", body
            assert "too many wrong operator tokens from '127.0.0.1'" in body["error"]["message"]
        assert not svc.queue_config("q", fresh=True).paused
        # Another client address: its right token works.
        port = int(dash.url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=("127.0.0.2", 0))
        try:
            conn.request("POST", "/api/queues/q/pause", b"{}", {
                "Content-Type": "application/json", "X-PinLater-Operator": "op", "X-PinLater-Token": "s3"})
            response = conn.getresponse()
            assert response.status == 200, response.read()
        finally:
            conn.close()
        assert svc.queue_config("q", fresh=True).paused
    finally:
        dash.close()
        svc.close()


def test_settings_from_the_environment() -> None:
    s = Settings.from_env({})
    assert (s.dashboard_host, s.dashboard_port, s.dashboard_token_sha256) == ("127.0.0.1", 8080, None)
    assert s.dashboard_protect_reads is False and s.flower_url == "http://127.0.0.1:5555"
    s = Settings.from_env({"PINLATER_DASHBOARD_TOKEN": "t", "PINLATER_DASHBOARD_PROTECT_READS": "yes",
                           "PINLATER_DASHBOARD_PORT": "9020", "PINLATER_FLOWER_URL": "http://127.0.0.1:5556"})
    assert s.dashboard_token_sha256 == hash_secret("t") and "'t'" not in repr(s)
    assert s.dashboard_protect_reads is True and s.dashboard_port == 9020
    with pytest.raises(ValueError, match="flag"):
        Settings.from_env({"PINLATER_DASHBOARD_PROTECT_READS": "maybe"})
