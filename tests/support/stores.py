"""The job service's stores for tests (a pytest plugin of the root conftest).

``cluster`` builds a JobService over one of the setups every registered
store kind supplies (``pinlater.stores``): each kind's test module
(``tests/support/kinds/<name>``, or the one its ``StoreKind.testing``
names) maps setup names to a ``Setup``. The setups over TLS with passwords
(``TLS_SETUPS``) are not in ``SETUPS``: a directory or module adds them
through ``setup_fixture``, as the contract suite does. Every test gets fresh
queue names, so tests never see each other's jobs. ``servers`` starts Redis
and MariaDB only (the TLS ones too): the job service's tests need no JVM.

``PINLATER_TEST_KINDS`` (kind names, comma-separated) keeps only those
kinds' setups: how a new kind runs the contract suite on its own.
"""

from __future__ import annotations

import importlib
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType

import pytest

from pinlater.service import JobService
from pinlater.settings import Settings, parse_shards
from pinlater.stores import StoreKind, kinds
from tests.servers import PrivateRedis, ensure_services

# Every test uses fresh queue names, so sessions share servers without
# stepping on each other; a kind's databases may be per session, dropped at
# its end (its test module's ``cleanup``).
SESSION = uuid.uuid4().hex[:8]


@dataclass(frozen=True)
class Setup:
    """One way to run the job service on a kind: ``shards()`` is the
    PINLATER_SHARDS text, ``control()`` the control store's URL (called per
    test: a kind may hand out a fresh store each time). ``servers``: needs
    the local servers; ``tls``: over TLS with passwords (``TLS_SETUPS``)."""

    shards: Callable[[], str]
    control: Callable[[], str]
    servers: bool = True
    tls: bool = False


def kind_tests(kind: StoreKind) -> ModuleType:
    """The test module of ``kind``."""
    return importlib.import_module(kind.testing or f"tests.support.kinds.{kind.name}")


def selected_kinds() -> list[StoreKind]:
    wanted = [name.strip() for name in os.environ.get("PINLATER_TEST_KINDS", "").split(",") if name.strip()]
    found = [kind for kind in kinds() if not wanted or kind.name in wanted]
    missing = set(wanted) - {kind.name for kind in found}
    if missing:
        raise ValueError(f"PINLATER_TEST_KINDS names no registered store kind: {sorted(missing)}")
    return found


ALL_SETUPS: dict[str, Setup] = {
    name: setup for kind in selected_kinds() for name, setup in kind_tests(kind).SETUPS.items()
}
SETUPS = [name for name, setup in ALL_SETUPS.items() if not setup.tls]
TLS_SETUPS = [name for name, setup in ALL_SETUPS.items() if setup.tls]


def settings_for(setup: str, **overrides: object) -> Settings:
    chosen = ALL_SETUPS[setup]
    fields: dict[str, object] = {
        "shards": parse_shards(chosen.shards()),
        "control_url": chosen.control(),
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
    for kind in kinds():
        cleanup = getattr(kind_tests(kind), "cleanup", None)
        if cleanup is not None:
            cleanup()


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
        if ALL_SETUPS[request.param].servers:
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
