"""Wrong settings and unusable stores, as a user meets them: the CLI prints
one line naming the setting or shard at fault and exits non-zero, and the
Python API raises PinLaterErrors, never a driver's exception."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from pinlater import Job
from pinlater.errors import NoHealthyShards, PinLaterError, ShardConnectionFailed
from pinlater.service import JobService
from pinlater.settings import SettingError, Settings, parse_shards
from tests.servers import MYSQL, REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, redis_url

GOOD_CONTROL = redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB)
WRONG_PASSWORD = MYSQL.replace("pinlater:pinlater@", "pinlater:wrong@") + "/pinlater_cli_errors"
NO_SUCH_DB = redis_url(REDIS_PORTS[0], 4096)  # past the test servers' dbs (scripts/services: 128)
REDIS_ON_MYSQL_PORT = "redis://127.0.0.1:13306/0"


def run_cli(args: list[str], env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("PINLATER_")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "pinlater.cli", *args],
        capture_output=True, text=True, env=full, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize(
    ("shards", "control", "needles"),
    [
        (f"d1={WRONG_PASSWORD}", None, ["control store", "1045", "Access denied"]),
        (f"d1={WRONG_PASSWORD}", GOOD_CONTROL, ["shard d1", "1045", "Access denied"]),
        (f"r1={NO_SUCH_DB}", None, ["control store", "DB index is out of range"]),
        (f"r1={NO_SUCH_DB}", GOOD_CONTROL, ["shard r1", "DB index is out of range"]),
        (f"r1={REDIS_ON_MYSQL_PORT}", None, ["control store", "not a Redis server?"]),
        (f"r1={REDIS_ON_MYSQL_PORT}", GOOD_CONTROL, ["shard r1", "not a Redis server?"]),
        ("r1=bogus://nowhere", None, ["PINLATER_SHARDS", "unsupported URL scheme 'bogus'"]),
    ],
    # Ids without the URLs: the control store's db differs between test processes.
    ids=["mysql-wrong-password", "mysql-wrong-password-shard", "redis-no-such-db", "redis-no-such-db-shard",
         "redis-on-mysql-port", "redis-on-mysql-port-shard", "bogus-scheme"],
)
def test_an_unusable_store_is_one_line_naming_it(
    servers: None, queue_name: str, shards: str, control: str | None, needles: list[str]
) -> None:
    env = {"PINLATER_SHARDS": shards}
    if control:
        env["PINLATER_CONTROL_URL"] = control
    assert_one_line(run_cli(["create-queue", queue_name], env), *needles)


@contextlib.contextmanager
def _serving(handle: Callable[[socket.socket], None]) -> Iterator[int]:
    """A loopback port whose connections each get ``handle`` in a thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                conn, _ = listener.accept()
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    listener.close()


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A server of another kind that answers RESP in RESP: it echoes."""

    def echo(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(65536):
                conn.sendall(data)

    with _serving(echo) as port:
        yield port


@pytest.mark.parametrize("where", ["control store", "shard r1"])
def test_an_echo_server_on_a_redis_port_is_named_not_a_redis_server(
    servers: None, queue_name: str, echo_port: int, where: str
) -> None:
    echo = f"redis://127.0.0.1:{echo_port}/0"
    env = {"PINLATER_SHARDS": f"r1={echo if where == 'shard r1' else redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)}",
           "PINLATER_CONTROL_URL": echo if where == "control store" else GOOD_CONTROL}
    assert_one_line(run_cli(["create-queue", queue_name], env), where, "not a Redis server?")


@pytest.fixture
def banner_port() -> Iterator[int]:
    """A server of another kind that speaks first, as SSH does."""

    def greet(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n")

    with _serving(greet) as port:
        yield port


@pytest.mark.parametrize("where", ["control store", "shard d1"])
def test_a_server_of_another_kind_on_a_mysql_port_is_named_in_one_timeout(
    servers: None, queue_name: str, banner_port: int, where: str
) -> None:
    """Redis waits for its client to speak, as MySQL's client does: a MySQL
    URL pointing at it meets silence, which costs one socket timeout, not
    one per resend of DDL that was never sent. A server that speaks first
    (SSH) is not a MySQL server, at once."""
    good = MYSQL + "/pinlater_cli_errors"
    for port, needle in ((REDIS_PORTS[0], "no MySQL greeting"), (banner_port, "not a MySQL server?")):
        wrong = MYSQL.rsplit(":", 1)[0] + f":{port}/pinlater_cli_errors"
        env = {"PINLATER_SHARDS": f"d1={wrong if where == 'shard d1' else good}",
               "PINLATER_CONTROL_URL": wrong if where == "control store" else good,
               "PINLATER_STORE_TIMEOUT_S": "1"}
        assert_one_line(run_cli(["create-queue", queue_name], env), where, needle)
        settings = Settings.from_env(env)
        svc = JobService.from_settings(settings)
        try:
            started = time.monotonic()
            with pytest.raises(PinLaterError, match=needle.replace("?", r"\?")):
                svc.create_queue(queue_name)
            assert time.monotonic() - started < 1.8  # one timeout (was three)
        finally:
            svc.close()


@pytest.mark.parametrize(
    ("command", "variable", "value", "needle"),
    [
        (["server", "--port", "0"], "PINLATER_SERVER_PORT", "abc", "expected a whole number, got 'abc'"),
        (["dashboard", "--port", "0"], "PINLATER_DASHBOARD_PROTECT_READS", "maybe", "expected a yes/no flag"),
        (["queues"], "PINLATER_MAX_BODY_BYTES", "-5", "must be between 1 and"),
        (["queues"], "PINLATER_CONFIG_TTL_S", "nan", "must be a number above 0"),
        (["queues"], "PINLATER_SERVERS", "localhost", "must look like HOST:PORT"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(
    command: list[str], variable: str, value: str, needle: str
) -> None:
    assert_one_line(run_cli(command, {variable: value}, timeout=30), variable, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["set-rate", "q", "inf"], "'inf' is not a rate"),
        (["set-rate", "q", "nan"], "'nan' is not a rate"),
        (["set-rate", "q", "1e309"], "'1e309' is not a rate"),
        (["create-queue", "q", "--rate", "nan"], "'nan' is not a rate"),
        (["create-queue", "q", "--rate", "-1"], "'-1' is not a rate"),
        (["set-concurrency", "q", "0"], "'0' is not a concurrency cap"),
        (["set-concurrency", "q", "2.5"], "'2.5' is not a concurrency cap"),
        (["set-concurrency", "q", "99999999999"], "'99999999999' is not a concurrency cap"),
        (["set-concurrency", "q", "nan"], "'nan' is not a concurrency cap"),
        (["set-key-limits", "q", "--rate", "nan"], "'nan' is not a per-key rate"),
        (["set-key-limits", "q", "--rate", "0"], "'0' is not a per-key rate"),
        (["set-key-limits", "q", "--rate", "1e309"], "'1e309' is not a per-key rate"),
        (["set-key-limits", "q", "--max-running", "0"], "'0' is not a concurrency cap"),
    ],
)
def test_non_finite_rates_are_refused_by_the_cli(args: list[str], needle: str) -> None:
    result = run_cli(args, {"PINLATER_SHARDS": "m1=memory://"})
    assert result.returncode == 2
    assert needle in result.stderr and "Traceback" not in result.stderr


def test_priorities_zero_is_refused_not_replaced(servers: None, queue_name: str) -> None:
    env = {"PINLATER_SHARDS": f"r1={redis_url(REDIS_PORTS[0], REDIS_SHARD_DB)}", "PINLATER_CONTROL_URL": GOOD_CONTROL}
    assert_one_line(run_cli(["create-queue", queue_name, "--priorities", "0"], env),
                    "priorities must be a whole number from 1 to 100")
    assert queue_name not in run_cli(["--json", "queues"], env).stdout


def test_the_python_api_raises_pinlater_errors_for_unusable_stores(servers: None, queue_name: str) -> None:
    for shard_url in (WRONG_PASSWORD, NO_SUCH_DB, REDIS_ON_MYSQL_PORT):
        settings = Settings(shards=parse_shards(f"s1={shard_url}"), control_url=GOOD_CONTROL, socket_timeout_s=2.0)
        with JobService.from_settings(settings, source="bad-store") as service:
            with pytest.raises(ShardConnectionFailed) as created:
                service.create_queue(queue_name)
            assert "shard s1" in created.value.message
            with pytest.raises(NoHealthyShards):  # taken out of rotation, not retried forever
                service.enqueue(queue_name, [Job(b"x")])
        control_only = Settings(shards=parse_shards("m1=memory://"), control_url=shard_url, socket_timeout_s=2.0)
        with JobService.from_settings(control_only, source="bad-control") as service:
            with pytest.raises(PinLaterError) as listed:
                service.queue_names()
            assert "control store" in listed.value.message


def test_settings_errors_name_the_variable() -> None:
    with pytest.raises(SettingError) as info:
        Settings.from_env({"PINLATER_SERVER_PORT": "70000"})
    assert info.value.variable == "PINLATER_SERVER_PORT"
    assert str(info.value) == "PINLATER_SERVER_PORT: must be between 0 and 65535, got 70000"
