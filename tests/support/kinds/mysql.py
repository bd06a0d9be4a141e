"""The MySQL kind's test setups: one shard, two, and over TLS with a
password (scripts/services' MariaDB that requires TLS). The databases are
this session's own, dropped at its end (``cleanup``)."""

from __future__ import annotations

import pymysql

from pinlater.kit.tls import ClientTls
from tests.servers import MYSQL_TLS_PASSWORD, MYSQL_TLS_PORT, MYSQL_TLS_USER, STORE_CA, mysql_tls_url, mysql_url
from tests.support.stores import SESSION, Setup

DATABASES = {name: f"pinlater_test_{SESSION}_{name}" for name in ("d1", "d2", "ctl", "kombu_d1", "kombu_ctl")}
TLS_DATABASES = {name: f"pinlater_test_{SESSION}_tls_{name}" for name in ("d1", "ctl")}

SETUPS = {
    "mysql": Setup(lambda: f"d1={mysql_url(DATABASES['d1'])}", lambda: mysql_url(DATABASES["ctl"])),
    "mysql_sharded": Setup(
        lambda: f"d1={mysql_url(DATABASES['d1'])},d2={mysql_url(DATABASES['d2'])}",
        lambda: mysql_url(DATABASES["ctl"]),
    ),
    "mysql_tls": Setup(
        lambda: f"d1={mysql_tls_url(TLS_DATABASES['d1'])}", lambda: mysql_tls_url(TLS_DATABASES["ctl"]), tls=True
    ),
}


def cleanup() -> None:
    """Drop this session's databases."""
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater")
    with conn.cursor() as cur:
        for database in DATABASES.values():
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
    conn.close()
    conn = pymysql.connect(host="127.0.0.1", port=MYSQL_TLS_PORT, user=MYSQL_TLS_USER, password=MYSQL_TLS_PASSWORD,
                           ssl=ClientTls(str(STORE_CA)).context())
    with conn.cursor() as cur:
        for database in TLS_DATABASES.values():
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
    conn.close()
