"""App-data fixtures (a pytest plugin): 4 shards in two ranges on the one
test MariaDB (so "several databases per server" is exercised), databases
named per test session and dropped at its end. MariaDB is started by
scripts/services if it is not up; tests never skip for it."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.servers import MYSQL, ensure_services

if TYPE_CHECKING:
    from tasks.appdata.store import AppData

PREFIX = f"appdata_test_{uuid.uuid4().hex[:8]}_"
SHARDS = f"0-1={MYSQL},2-3={MYSQL}"
# A statement's timeout well past the production default (5 s): on this
# machine's disk MariaDB stalled for seconds at a time under the parallel
# tiers, and these tests are about what the data is, not how soon it came.
# Tests of a cut-off or a hang set the default back (TIMEOUT_VAR). The
# names are spelled out (a root plugin loads nothing of the apps);
# tests/appdata/test_settings.py checks them against the settings.
ENV = {"PINLATER_APPDATA_SHARDS": SHARDS, "PINLATER_APPDATA_DATABASE_PREFIX": PREFIX,
       "PINLATER_APPDATA_SOCKET_TIMEOUT_S": "20"}


@contextlib.contextmanager
def shard_databases(env: dict[str, str] = ENV) -> Iterator[AppData]:
    """A store over the shard databases of ``env``, made and dropped."""
    from tasks.appdata import schema
    from tasks.appdata.settings import AppDataSettings
    from tasks.appdata.store import AppData

    ensure_services(hbase=False)
    store = AppData(AppDataSettings.from_env(env))
    schema.create_shards(store)
    yield store
    schema.drop_shards(store)
    store.close()


@pytest.fixture(scope="session")
def appdata() -> Iterator[AppData]:
    with shard_databases() as store:
        yield store
