"""Fixtures shared by the integration suites that talk to one server each.

MySQL suites (test_mysql_*): ``database``, a throwaway database per module;
``backend``, a MySQL shard on it; ``queue``, a fresh 3-priority queue there.
Redis suites (test_redis_*): ``raw``, a client of their Redis db, flushed
before each test; ``be``, a Redis shard on it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pinlater.stores.mysql.shard import MySQLBackend
from pinlater.stores.redis.shard import RedisBackend
from tests.integration.mysql_support import throwaway_database
from tests.integration.private_mariadb import PrivateMariaDB
from tests.integration.redis_support import URL, ensure_redis
from tests.servers import mysql_url


@pytest.fixture(scope="module")
def database() -> Iterator[str]:
    yield from throwaway_database()


@pytest.fixture
def backend(database: str) -> Iterator[MySQLBackend]:
    b = MySQLBackend.from_url("d1", mysql_url(database), socket_timeout_s=5.0)
    yield b
    b.close()


@pytest.fixture
def queue(backend: MySQLBackend) -> str:
    name = f"t_{uuid.uuid4().hex[:12]}"
    backend.create_queue(name, 3)
    return name


@pytest.fixture(scope="module")
def redis_server() -> None:
    ensure_redis()


@pytest.fixture
def raw(redis_server: None) -> Iterator[redis.Redis[bytes]]:
    client: redis.Redis[bytes] = redis.Redis.from_url(URL)
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def be(raw: redis.Redis[bytes]) -> Iterator[RedisBackend]:
    backend = RedisBackend.from_url("r9", URL, socket_timeout_s=5.0)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def private_mariadb(servers: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateMariaDB]:
    """A MariaDB of the module's own (``tests.integration.private_mariadb``)."""
    mariadb = PrivateMariaDB(Path(tmp_path_factory.mktemp("mariadb")))
    mariadb.start()
    yield mariadb
    mariadb.stop()
