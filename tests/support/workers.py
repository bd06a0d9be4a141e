"""The session's ``pinlater server`` processes (a pytest plugin): the worker,
feed, typeahead and consistency tests reach the job service through them in
their "+thrift" variants, as a remote deployment does."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.support.server_process import ServerProcess
from tests.support.tls import Certs, make_certs
from tests.workers.harness import worker_env


@pytest.fixture(scope="session")
def thrift_server(servers: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """``pinlater server`` processes, one per store setup, started when a
    test first needs one and kept for the session: address by setup."""
    started: dict[str, ServerProcess] = {}
    logdir = tmp_path_factory.mktemp("thrift_servers")

    def address(setup: str) -> str:
        if setup not in started:
            env = worker_env(setup, "unused:")
            env["PINLATER_ADMIN_SECRET"] = "secret"
            started[setup] = ServerProcess("--no-monitor", "--grace", "2", env=env, log_path=logdir / f"{setup}.log",
                                           metrics=False)
        return started[setup].address

    yield address
    for server in started.values():
        server.close()


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """The session's CA, server certificate, roles file and one client
    certificate per role (``tests.support.tls``)."""
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="session")
def tls_thrift_server(servers: None, tls_certs: Certs,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], str]]:
    """Like ``thrift_server``, with TLS, client certificates and roles."""
    started: dict[str, ServerProcess] = {}
    logdir = tmp_path_factory.mktemp("tls_thrift_servers")

    def address(setup: str) -> str:
        if setup not in started:
            env = worker_env(setup, "unused:") | tls_certs.server_env()
            env["PINLATER_ADMIN_SECRET"] = "secret"
            started[setup] = ServerProcess("--no-monitor", "--grace", "2", env=env,
                                           log_path=logdir / f"{setup}.log", metrics=False)
        return started[setup].address

    yield address
    for server in started.values():
        server.close()
