"""Helpers shared by the MySQL integration suites."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pymysql

from tests.servers import ensure_services


def raw_connection(database: str | None = None) -> pymysql.connections.Connection[Any]:
    return pymysql.connect(
        host="127.0.0.1", port=13306, user="pinlater", password="pinlater",
        database=database, autocommit=True,
    )


def throwaway_database() -> Iterator[str]:
    """A fresh database name for one test module, dropped at its end
    (MariaDB started by scripts/services if it is not up)."""
    ensure_services(hbase=False)
    name = f"pinlater_test_{uuid.uuid4().hex[:10]}"
    yield name
    conn = raw_connection()
    with conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {name}")
    conn.close()
