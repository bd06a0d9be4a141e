"""The stores over TLS with passwords, against scripts/services' TLS-only
Redis (an ACL user, the default user off) and TLS-required MariaDB: every
connection verified against the CA that signed the server's certificate;
a wrong password, another CA or a plain client each one clear line within
a second; and no password or key in what the job service shows (the CLI,
logs, the dashboard's JSON and /metrics, exceptions and tracebacks)."""

from __future__ import annotations

import json
import logging
import os
import ssl
import subprocess
import sys
import time
import traceback
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from dashboards.server import Dashboard
from pinlater import Job
from pinlater.kit.devcerts import DevCA
from pinlater.kit.tls import ClientTls
from pinlater.operators import Monitor
from pinlater.service import JobService
from pinlater.settings import ShardSpec, hash_secret, parse_shards
from pinlater.stores import open_backend
from pinlater.stores.base import ShardUnavailable
from pinlater.stores.mysql.pool import ConnectionPool, MySQLAddress, Session
from pinlater.stores.redis.pool import open_redis
from tasks.appdata.db import ServerPool
from tasks.appdata.shardmap import Server
from tests.servers import (
    MYSQL_TLS_PASSWORD,
    MYSQL_TLS_PORT,
    MYSQL_TLS_USER,
    REDIS_TLS_PASSWORD,
    REDIS_TLS_PORT,
    REDIS_TLS_USER,
    STORE_CA,
    STORE_CLIENT_KEY,
    mysql_tls_url,
    redis_db,
    redis_tls_url,
)
from tests.support.kinds.mysql import TLS_DATABASES as MYSQL_TLS_DATABASES
from tests.support.stores import settings_for

SHARD_DB, CONTROL_DB = redis_db(7), redis_db(8)
WRONG_PASSWORD = "wrong-pw-7d1f"
# Nothing the job service shows may carry any of these.
SECRETS = (REDIS_TLS_PASSWORD, MYSQL_TLS_PASSWORD, WRONG_PASSWORD, "PRIVATE KEY")
QUICK_S = 1.0  # the stores' socket timeout is 5 s: a failure must not wait for it
DATABASE = MYSQL_TLS_DATABASES["d1"]  # dropped with the session's others


@pytest.fixture(scope="module")
def other_ca(servers: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that did not sign the servers' certificates."""
    path = tmp_path_factory.mktemp("other_ca") / "ca.pem"
    path.write_bytes(DevCA("some other CA").cert_pem)
    return path


def assert_secret_free(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} shown in: {text[:2000]}"
    assert STORE_CLIENT_KEY.read_text().strip().splitlines()[1] not in text


def test_redis_over_tls_with_an_acl_user_and_a_client_certificate(servers: None) -> None:
    client = open_redis(redis_tls_url(SHARD_DB, client_cert=True), 5.0)
    key = f"tls-{uuid.uuid4().hex}"
    client.set(key, b"v", ex=60)
    assert client.get(key) == b"v"
    assert client.acl_whoami() == REDIS_TLS_USER
    client.connection_pool.disconnect()


def test_the_celery_bus_takes_the_same_url(servers: None) -> None:
    from workers.transport import bus_client  # the bus: redis-py's own from_url

    bus = bus_client(redis_tls_url(CONTROL_DB, client_cert=True))
    assert bus.ping() is True
    assert bus.acl_whoami() == REDIS_TLS_USER


def _ssl_version(session: Session) -> str:
    session.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
    return str(session.fetchone()[1])


def test_mysql_sessions_are_encrypted_with_one_context_per_pool(
        servers: None, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[object] = []  # PyMySQL's own contexts
    ours: list[object] = []  # the pool's (pinlater.kit.tls.ClientTls)
    original, original_ours = ssl.create_default_context, ClientTls.context

    def counting(*args: Any, **kwargs: Any) -> ssl.SSLContext:
        made.append(args)
        return original(*args, **kwargs)

    def counting_ours(self: ClientTls) -> ssl.SSLContext:
        ours.append(self)
        return original_ours(self)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    monkeypatch.setattr(ClientTls, "context", counting_ours)
    pool = ConnectionPool(MySQLAddress.parse(mysql_tls_url(DATABASE, client_cert=True)), socket_timeout_s=5.0,
                          prepare=lambda s: None, unavailable=lambda e: ShardUnavailable(str(e)))
    try:
        # Nested: three connections open at once.
        versions = pool.run(lambda a: (_ssl_version(a), pool.run(lambda b: (
            _ssl_version(b), pool.run(_ssl_version)))))
    finally:
        pool.close()
    assert str(versions).count("TLSv1.") == 3, versions
    assert len(ours) == 1 and not made  # the pool's own, made once; PyMySQL made none


def test_app_data_shard_servers_take_the_same_url(servers: None) -> None:
    url = f"mysql://{MYSQL_TLS_USER}:{MYSQL_TLS_PASSWORD}@127.0.0.1:{MYSQL_TLS_PORT}?ssl_ca={STORE_CA}"
    pool = ServerPool(Server.parse(url))
    try:
        def version(cursor: Any) -> str:
            cursor.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
            return str(cursor.fetchone()[1])

        assert pool.run(version).startswith("TLSv1.")
    finally:
        pool.close()


def _plain_redis() -> str:
    return f"redis://{REDIS_TLS_USER}:{REDIS_TLS_PASSWORD}@127.0.0.1:{REDIS_TLS_PORT}/{SHARD_DB}"


def _plain_mysql() -> str:
    return f"mysql://{MYSQL_TLS_USER}:{MYSQL_TLS_PASSWORD}@127.0.0.1:{MYSQL_TLS_PORT}/{DATABASE}"


FAILURES: dict[str, tuple[Any, str]] = {
    "redis-wrong-password": (lambda ca: redis_tls_url(SHARD_DB, password=WRONG_PASSWORD),
                             "invalid username-password pair"),
    "redis-other-ca": (lambda ca: redis_tls_url(SHARD_DB, ca=ca), "certificate verify failed"),
    "redis-plain-to-tls-port": (lambda ca: _plain_redis(), "127.0.0.1:16390"),
    "mysql-wrong-password": (lambda ca: mysql_tls_url(DATABASE, password=WRONG_PASSWORD), "Access denied"),
    "mysql-other-ca": (lambda ca: mysql_tls_url(DATABASE, ca=ca), "certificate verify failed"),
    "mysql-plain-to-tls-port": (lambda ca: _plain_mysql(), "if the server requires TLS, add ?ssl_ca="),
}


@pytest.mark.parametrize("case", list(FAILURES))
def test_a_refused_connection_is_one_quick_clear_line_without_secrets(case: str, other_ca: Path) -> None:
    make_url, expected = FAILURES[case]
    backend = open_backend(ShardSpec("x1", make_url(other_ca)), socket_timeout_s=5.0)
    started = time.monotonic()
    try:
        with pytest.raises(ShardUnavailable) as caught:
            backend.ping()
    finally:
        backend.close()
    assert time.monotonic() - started < QUICK_S
    message = str(caught.value)
    assert "\n" not in message and expected in message, message
    assert_secret_free(message)
    assert_secret_free("".join(traceback.format_exception(caught.value)))  # the driver's errors chained in


@pytest.fixture
def mixed_settings(other_ca: Path) -> Iterator[dict[str, str]]:
    """Settings naming good and refused TLS stores, each URL with a password."""
    shards = ",".join([
        f"r1={redis_tls_url(SHARD_DB, client_cert=True)}",
        f"d1={mysql_tls_url(DATABASE)}",
        f"r2={redis_tls_url(SHARD_DB, password=WRONG_PASSWORD)}",
        f"d2={mysql_tls_url(DATABASE, password=WRONG_PASSWORD)}",
        f"r3={redis_tls_url(SHARD_DB, ca=other_ca)}",
    ])
    yield {"PINLATER_SHARDS": shards, "PINLATER_CONTROL_URL": redis_tls_url(CONTROL_DB, client_cert=True)}


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PINLATER_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "pinlater.cli", *args], capture_output=True, text=True,
                          env=full, timeout=60, stdin=subprocess.DEVNULL)


def test_the_cli_shows_no_password(mixed_settings: dict[str, str]) -> None:
    shards = _cli(["--json", "-v", "shards"], mixed_settings)
    assert shards.returncode == 0, shards.stderr
    health = {row["shard"]: row for row in json.loads(shards.stdout)}
    assert [s for s, row in health.items() if row["healthy"]] == ["r1", "d1"]
    assert "certificate verify failed" in health["r3"]["last_error"]
    assert_secret_free(shards.stdout + shards.stderr)  # -v: its debug logs too

    refused = _cli(["queues"], {**mixed_settings, "PINLATER_CONTROL_URL": redis_tls_url(
        CONTROL_DB, password=WRONG_PASSWORD)})
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "invalid username-password pair" in refused.stderr
    assert_secret_free(refused.stdout + refused.stderr)

    bad_file = _cli(["shards"], {"PINLATER_SHARDS": f"r1={redis_tls_url(SHARD_DB)}-missing"})
    assert bad_file.returncode == 2 and "CA file not found" in bad_file.stderr, bad_file.stderr
    assert_secret_free(bad_file.stderr)


def _get(url: str, token: str | None = None) -> str:
    request = urllib.request.Request(url, headers={"X-PinLater-Token": token} if token else {})
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.read().decode())


TOKEN = "operator-token-for-tls-test"


def test_logs_the_dashboard_and_metrics_show_no_password(
        mixed_settings: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    # No probe in the background: the refused shards are first met by the
    # create below (which goes on without them, saying why in the log), not
    # by a probe or the dashboard's first pass taking them out beforehand.
    settings = settings_for(
        "redis_tls", shards=parse_shards(mixed_settings["PINLATER_SHARDS"]),
        control_url=mixed_settings["PINLATER_CONTROL_URL"],
        flower_url=f"http://admin:{WRONG_PASSWORD}@127.0.0.1:5555",
        dashboard_token_sha256=hash_secret(TOKEN), health_probe_interval_s=3600.0)
    service = JobService.from_settings(settings, source="tls-test")
    queue = f"t_{uuid.uuid4().hex[:12]}"
    try:
        service.create_queue(queue)
        assert "created without shard" in caplog.text
    except BaseException:
        service.close()
        raise
    dashboard = Dashboard(service, settings, port=0, panels=[], owns_service=True).start()
    try:
        service.operators.shard_status(probe=True)
        for _ in range(20):
            try:
                service.enqueue(queue, [Job(b"x")])
            except Exception as exc:  # noqa: BLE001 -- only what it says matters here
                assert_secret_free(str(exc) + "".join(traceback.format_exception(exc)))
        Monitor(service.operators, interval_s=1).run_once()
        # Flower's address goes only to the token's holder, and redacted even then.
        pages = [_get(dashboard.url + path, TOKEN) for path in
                 ("/api/config", "/api/overview", "/api/shards", "/metrics")]
        anyone = json.loads(_get(dashboard.url + "/api/config"))
    finally:
        dashboard.close()
    assert "admin:***@127.0.0.1:5555" in pages[0] and anyone["flower_url"] is None
    assert "certificate verify failed" in pages[2] and "invalid username-password pair" in pages[2]
    assert_secret_free("\n".join(pages))
    assert "out of rotation" in caplog.text
    assert_secret_free(caplog.text)


def test_the_plain_servers_stay_plain(servers: None) -> None:
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", ssl_disabled=True)
    with conn.cursor() as cursor:
        cursor.execute("SHOW SESSION STATUS LIKE 'Ssl_version'")
        assert cursor.fetchone() == ("Ssl_version", "")
    conn.close()
