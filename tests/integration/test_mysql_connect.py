"""Opening a MySQL connection costs a round trip, not a TLS context: both
connection pools (the job service's and the app data's) turn PyMySQL's
opportunistic TLS off, since no TLS is configured. Left on, every connect
loads the system's CA certificates into a new SSL context (~50 ms of CPU
holding the GIL), and a pool opening connections stalls its whole process."""

from __future__ import annotations

import ssl
from typing import Any, NoReturn

import pytest

from pinlater.states import JobState
from pinlater.stores.mysql.shard import MySQLBackend
from tasks.appdata.db import ServerPool
from tasks.appdata.shardmap import Server
from tests.servers import mysql_url


def _no_tls(*_args: Any, **_kwargs: Any) -> NoReturn:
    raise AssertionError("a connection built an SSL context")


@pytest.fixture
def tls_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ssl, "create_default_context", _no_tls)
    monkeypatch.setattr(ssl, "SSLContext", _no_tls)


def test_the_job_services_pool_connects_without_a_tls_context(tls_refused: None, database: str) -> None:
    backend = MySQLBackend.from_url("tls0", mysql_url(database), socket_timeout_s=5.0)
    try:
        backend.create_queue("plain", 3)
        assert backend.count("plain", 1, JobState.PENDING, False) == 0
    finally:
        backend.close()


def test_the_app_datas_pool_connects_without_a_tls_context(tls_refused: None, database: str) -> None:
    pool = ServerPool(Server.parse("mysql://pinlater:pinlater@127.0.0.1:13306"), socket_timeout_s=5.0)
    try:
        def cipher(cursor: Any) -> Any:
            cursor.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
            return cursor.fetchone()

        assert pool.run(cipher) == ("Ssl_cipher", "")
    finally:
        pool.close()
