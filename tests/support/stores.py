"""The job service's stores for tests (a pytest plugin of the root conftest).

``cluster`` builds a JobService over one of five setups: memory, Redis, MySQL,
and two-shard Redis and MySQL; a directory or module may add the two TLS
setups (``TLS_SETUPS``: Redis and MySQL over TLS with passwords) through
``setup_fixture``, as the contract suite does. Every test gets fresh queue
names, so tests never see each other's jobs. ``servers`` starts Redis and MariaDB only (the TLS ones
too): the job service's tests need no JVM.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pymysql
import pytest

from pinlater.kit.tls import ClientTls
from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from tests.servers import (
    MYSQL_TLS_PASSWORD,
    MYSQL_TLS_PORT,
    MYSQL_TLS_USER,
    REDIS_CONTROL_DB,
    REDIS_PORTS,
    REDIS_SHARD_DB,
    STORE_CA,
    PrivateRedis,
    ensure_services,
    mysql_tls_url,
    mysql_url,
    redis_tls_url,
    redis_url,
)

SETUPS = ["memory", "redis", "mysql", "redis_sharded", "mysql_sharded"]
# The stores over TLS with passwords (scripts/services' TLS Redis and
# MariaDB): a shard and the control store on each. Redis presents a client
# certificate too. Not in SETUPS: the contract suite runs them
# (tests/contract/conftest.py, through ``setup_fixture``).
TLS_SETUPS = ["redis_tls", "mysql_tls"]
# Every test uses fresh queue names, so sessions share Redis without stepping
# on each other; MySQL databases are per session and dropped at its end.
SESSION = uuid.uuid4().hex[:8]
MYSQL_DATABASES = {name: f"pinlater_test_{SESSION}_{name}" for name in ("d1", "d2", "ctl", "kombu_d1", "kombu_ctl")}
MYSQL_TLS_DATABASES = {name: f"pinlater_test_{SESSION}_tls_{name}" for name in ("d1", "ctl")}
SERVER_SETUPS = ["redis", "mysql", "redis_sharded", "mysql_sharded"]


def settings_for(setup: str, **overrides: object) -> Settings:
    if setup == "memory":
        shards, control = "m1=memory://", f"memory://{uuid.uuid4().hex}"
    elif setup == "redis":
        shards = f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)}"
        control = redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB)
    elif setup == "redis_sharded":
        shards = ",".join(
            f"r{i + 1}={redis_url(port, REDIS_SHARD_DB)}" for i, port in enumerate(REDIS_PORTS)
        )
        control = redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB)
    elif setup == "mysql":
        shards, control = f"d1={mysql_url(MYSQL_DATABASES['d1'])}", mysql_url(MYSQL_DATABASES["ctl"])
    elif setup == "mysql_sharded":
        shards = f"d1={mysql_url(MYSQL_DATABASES['d1'])},d2={mysql_url(MYSQL_DATABASES['d2'])}"
        control = mysql_url(MYSQL_DATABASES["ctl"])
    elif setup == "redis_tls":
        shards = f"r1={redis_tls_url(REDIS_SHARD_DB, client_cert=True)}"
        control = redis_tls_url(REDIS_CONTROL_DB, client_cert=True)
    elif setup == "mysql_tls":
        shards = f"d1={mysql_tls_url(MYSQL_TLS_DATABASES['d1'])}"
        control = mysql_tls_url(MYSQL_TLS_DATABASES["ctl"])
    else:
        raise ValueError(setup)
    fields: dict[str, object] = {
        "shards": parse_shards(shards),
        "control_url": control,
        "max_body_bytes": 64 * 1024,
        "admin_secret_sha256": "2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b",  # "secret"
        "health_probe_interval_s": 0.2,
    }
    fields.update(overrides)
    return Settings(**fields)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def servers() -> Iterator[None]:
    ensure_services(hbase=False)
    yield
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater")
    with conn.cursor() as cur:
        for database in MYSQL_DATABASES.values():
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
    conn.close()
    conn = pymysql.connect(host="127.0.0.1", port=MYSQL_TLS_PORT, user=MYSQL_TLS_USER, password=MYSQL_TLS_PASSWORD,
                           ssl=ClientTls(str(STORE_CA)).context())
    with conn.cursor() as cur:
        for database in MYSQL_TLS_DATABASES.values():
            cur.execute(f"DROP DATABASE IF EXISTS {database}")
    conn.close()


@pytest.fixture(scope="module")
def private_redis(servers: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateRedis]:
    """A Redis of this test module's own, which its tests may stop."""
    redis = PrivateRedis(tmp_path_factory.mktemp("private_redis"))
    redis.start()
    yield redis
    redis.stop()


@pytest.fixture
def queue_name() -> str:
    return f"t_{uuid.uuid4().hex[:12]}"


def setup_fixture(setups: list[str]) -> Callable[[pytest.FixtureRequest], str]:
    """A ``setup`` fixture over ``setups``: a module assigns it to ``setup``
    to run its tests on other setups (e.g. ``SETUPS + TLS_SETUPS``)."""

    @pytest.fixture(params=setups)
    def setup(request: pytest.FixtureRequest) -> str:
        if request.param != "memory":
            request.getfixturevalue("servers")
        return str(request.param)

    return setup


setup = setup_fixture(SETUPS)


@pytest.fixture
def cluster(setup: str) -> Iterator[JobService]:
    service = JobService.from_settings(settings_for(setup), source="test-worker-a")
    yield service
    service.close()


@pytest.fixture
def other_worker(cluster: JobService) -> JobService:
    """A second client of the same cluster, with another source."""
    return JobService(cluster.core.sibling(), source="test-worker-b")
