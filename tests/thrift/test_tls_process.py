"""TLS and roles in a real ``pinlater server`` process: SIGHUP reloads the
roles and the certificate without dropping open connections (one process
and several), a reload that fails keeps what was loaded, and the settings
that cannot work are refused at start in one line."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pinlater.errors import PasswordInvalid, ShardConnectionFailed
from pinlater.kit.devcerts import DevCA
from pinlater.kit.tls import ClientTls
from tests.servers import REPO
from tests.support.server_process import ServerProcess, cli, server_env
from tests.support.tls import Certs, client_tls_env, make_certs

pytestmark = pytest.mark.usefixtures("servers")


@pytest.fixture
def certs(tmp_path: Path) -> Certs:
    return make_certs(tmp_path / "tls")


def _until(check: Callable[[], bool], what: str, server: ServerProcess, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}; the server's log:\n{server.log()}"
        time.sleep(0.05)


def _denied(client: Any) -> bool:
    try:
        client.queue_names()
    except PasswordInvalid:
        return True
    return False


@pytest.mark.parametrize("processes", ["1", "2"])
def test_sighup_reloads_roles_and_certificate_and_keeps_open_connections(
        certs: Certs, tmp_path: Path, processes: str) -> None:
    env = server_env(**certs.server_env())
    with ServerProcess("--processes", processes, env=env) as server:
        worker = server.client("w", tls=certs.client("tls-worker"), retries=0, pool_size=1)
        admin = server.client("a", tls=certs.client("tls-admin"), retries=0, pool_size=1)
        try:
            worker.queue_names()
            admin.queue_names()
            handshakes = server.stats()["tls_handshakes"]
            # The worker's line goes: its next call on the same connection is refused.
            Path(certs.roles).write_text("tls-admin admin\n")
            server.p.send_signal(signal.SIGHUP)
            # Every process, before the next signal: a process told twice before
            # it got round to the first reloads once, with the files as they are then.
            _until(lambda: server.log().count("reloaded the TLS") == int(processes), "every process reloaded",
                   server)
            _until(lambda: _denied(worker), "the worker's role revoked", server)
            # A new server certificate from a new CA: new connections need it,
            # open ones carry on.
            new_ca = DevCA("rotated CA")
            new_ca.issue("rotated", server_names=("127.0.0.1",)).write(
                certs.directory / "server.pem", certs.directory / "server.key")
            (tmp_path / "new-ca.pem").write_bytes(new_ca.cert_pem)
            server.p.send_signal(signal.SIGHUP)
            _until(lambda: server.log().count("reloaded the TLS") == 2 * int(processes),
                   "every process reloaded twice", server)
            new_trust = ClientTls(str(tmp_path / "new-ca.pem"), *_cert("tls-admin", certs))
            for _ in range(2 * int(processes)):
                assert _verifies(server, new_trust)
                assert not _verifies(server, certs.client("tls-admin"))
            assert isinstance(admin.queue_names(), set)  # the open connection still works
            stats = server.stats()
            assert stats["calls_denied"] >= 1
            assert stats["connections_open"] >= 2, "the worker and admin connections were not dropped"
            assert stats["tls_handshakes"] > handshakes
        finally:
            worker.close()
            admin.close()
        assert "reloaded" in server.log()


def _cert(identity: str, certs: Certs) -> tuple[str, str]:
    return str(certs.directory / f"{identity}.pem"), str(certs.directory / f"{identity}.key")


def _verifies(server: ServerProcess, tls: ClientTls) -> bool:
    """Whether a new connection trusting ``tls``'s CA verifies the server."""
    client = server.client("new", tls=tls, retries=0)
    try:
        client.queue_names()
    except ShardConnectionFailed as exc:
        assert "CERTIFICATE_VERIFY_FAILED" in str(exc)
        return False
    finally:
        client.close()
    return True


def test_a_reload_that_fails_keeps_what_was_loaded(certs: Certs) -> None:
    with ServerProcess(env=server_env(**certs.server_env())) as server:
        worker = server.client("w", tls=certs.client("tls-worker"), retries=0)
        try:
            worker.queue_names()
            Path(certs.roles).write_text("tls-worker no-such-role\n")
            server.p.send_signal(signal.SIGHUP)
            _until(lambda: "reload failed" in server.log(), "the failed reload logged", server)
            assert "unknown role 'no-such-role'" in server.log()
            assert isinstance(worker.queue_names(), set)
        finally:
            worker.close()
        assert server.p.poll() is None


def _start(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli("server", "--port", "0", "--metrics-port", "-1", *args), env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("processes", ["1", "2"])
def test_plain_tcp_off_the_loopback_refuses_to_start_in_one_line(processes: str) -> None:
    done = _start(server_env(), "--host", "0.0.0.0", "--processes", processes)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to serve plain TCP on 0.0.0.0" in lines[0], done.stderr
    assert "PINLATER_SERVER_INSECURE" in lines[0]


def test_tls_without_client_certificates_off_the_loopback_refuses_to_start_in_one_line(certs: Certs) -> None:
    tls = certs.server(client_certs=False, roles=False)
    env = server_env(PINLATER_SERVER_TLS_CERT=tls.cert, PINLATER_SERVER_TLS_KEY=tls.key or tls.cert)
    done = _start(env, "--host", "0.0.0.0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to serve TLS without client certificates on 0.0.0.0" in lines[0], done.stderr
    assert "PINLATER_SERVER_TLS_CLIENT_CA" in lines[0] and "PINLATER_SERVER_INSECURE" in lines[0]


def test_insecure_lets_it_listen_off_the_loopback() -> None:
    with subprocess.Popen(cli("server", "--host", "0.0.0.0", "--port", "0", "--metrics-port", "-1"),
                          env=server_env(PINLATER_SERVER_INSECURE="yes"), cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, text=True) as proc:
        try:
            assert proc.stdout is not None
            assert "listening on 0.0.0.0:" in proc.stdout.readline()
        finally:
            proc.terminate()
            proc.wait(20)


@pytest.mark.parametrize("settings, problem", [
    ({"PINLATER_SERVER_ROLES": "roles"}, "PINLATER_SERVER_ROLES: needs PINLATER_SERVER_TLS_CERT"),
    ({"PINLATER_SERVER_TLS_CERT": "server.pem", "PINLATER_SERVER_ROLES": "roles"},
     "roles need client certificates"),
    ({"PINLATER_SERVER_TLS_CERT": "missing.pem"}, "certificate or key file not found: /"),
    ({"PINLATER_SERVER_TLS_CERT": "server.pem", "PINLATER_SERVER_TLS_KEY": "tls-producer.key"},
     "cannot use the certificate"),
    ({"PINLATER_SERVER_TLS_CERT": "server.pem", "PINLATER_SERVER_TLS_KEY": "server.key",
      "PINLATER_SERVER_TLS_CLIENT_CA": "ca.pem", "PINLATER_SERVER_ROLES": "ca.pem"}, "ca.pem:1: unknown role"),
])
def test_unusable_tls_settings_are_refused_at_start_in_one_line(
        certs: Certs, settings: dict[str, str], problem: str) -> None:
    done = _start(server_env(**{k: str(certs.directory / v) for k, v in settings.items()}))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and problem in lines[0], done.stderr
    key = (certs.directory / "server.key").read_text().splitlines()[1]
    assert key not in done.stderr


def test_dev_certs_gives_a_working_tls_setup_in_one_command(tmp_path: Path) -> None:
    done = subprocess.run(cli("dev-certs", str(tmp_path / "dev")), cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    env = server_env(**_env_file(tmp_path / "dev" / "server.env"))
    with ServerProcess(env=env) as server:
        for role in ("producer", "worker", "operator", "admin"):
            tls = _env_file(tmp_path / "dev" / f"{role}.env")
            client = server.client(role, tls=ClientTls(tls["PINLATER_CLIENT_TLS_CA"], tls["PINLATER_CLIENT_TLS_CERT"],
                                                      tls["PINLATER_CLIENT_TLS_KEY"]), retries=0)
            try:
                assert isinstance(client.queue_names(), set)
                if role == "producer":
                    with pytest.raises(PasswordInvalid, match="'dev-producer' \\(producer\\) may not call getJobCount"):
                        client.count("any_queue", "pending")
            finally:
                client.close()
    assert (tmp_path / "dev" / "server.key").stat().st_mode & 0o077 == 0, "a private key readable by others"


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line)


def test_the_cli_calls_a_tls_server_with_its_certificate(certs: Certs, queue_name: str) -> None:
    """``pinlater --server`` goes through the server, as the identity of
    PINLATER_CLIENT_TLS_*: an operator's count works, a producer's is
    refused in one line, and the stores-only commands say so."""
    with ServerProcess(env=server_env(**certs.server_env())) as server:
        admin = server.client("admin", tls=certs.client("tls-admin"), retries=0)
        try:
            admin.create_queue(queue_name)
        finally:
            admin.close()

        def run(identity: str, *args: str) -> subprocess.CompletedProcess[str]:
            env = server_env(**client_tls_env(certs.client(identity)))
            return subprocess.run(cli("--json", "--server", server.address, *args), env=env, cwd=REPO,
                                  capture_output=True, text=True, timeout=60)

        done = run("tls-producer", "enqueue", queue_name, "a", "b")
        assert done.returncode == 0, done.stderr
        done = run("tls-operator", "count", queue_name, "pending")
        assert done.returncode == 0 and '"count": 2' in done.stdout, done.stderr
        done = run("tls-producer", "count", queue_name, "pending")
        assert done.returncode == 2
        assert done.stderr.strip() == ("error (PASSWORD_INVALID): 'tls-producer' (producer) may not call "
                                       "getJobCount"), done.stderr
        done = run("tls-operator", "queues")
        assert done.returncode == 0 and queue_name in done.stdout, done.stderr
        done = run("tls-operator", "shards")
        assert done.returncode == 2 and "works on the stores themselves" in done.stderr
