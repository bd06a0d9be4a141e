"""Store URLs without servers: their TLS query parameters (redis-py's names
for Redis, PyMySQL's for MySQL and the app-data shard map), a clear error
naming a parameter that is not one of them, and the password redacted
wherever a URL is shown."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path

import pytest

from pinlater import cli
from pinlater.kit.devcerts import DevCA
from pinlater.kit.redisconn import redis_tls
from pinlater.kit.tls import ClientTls
from pinlater.kit.urls import redact
from pinlater.settings import Settings
from pinlater.stores.mysql.pool import MySQLAddress
from pinlater.stores.mysql.url import MySQLUrl, mysql_connect_options
from pinlater.stores.redis.pool import open_redis
from tasks.appdata.shardmap import Server, ShardMap

SECRET = "s3cr%2Ft-pw"  # %2F: a quoted "/" must not confuse the redaction


@pytest.fixture(scope="module")
def ca_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    directory = tmp_path_factory.mktemp("ca")
    ca = DevCA()
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    ca.issue("client").write(directory / "client.pem", directory / "client.key")
    return directory / "ca.pem", directory / "client.pem", directory / "client.key"


@pytest.mark.parametrize(("url", "shown"), [
    (f"rediss://user:{SECRET}@h:6380/0?ssl_ca_certs=/ca.pem", "rediss://user:***@h:6380/0?ssl_ca_certs=/ca.pem"),
    (f"redis://:{SECRET}@h:6379/0", "redis://:***@h:6379/0"),
    (f"mysql://u:{SECRET}@h:3306/db", "mysql://u:***@h:3306/db"),
    ("mysql://u:p@ss@h:3306/db", "mysql://u:***@h:3306/db"),  # an unquoted @ in the password
    (f"mysql://u:{SECRET}@h:notaport/db", "mysql://u:***@h:notaport/db"),  # unparseable, still redacted
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("redis://user@h:6379/0", "redis://user@h:6379/0"),
    ("memory://x", "memory://x"),
    ("not a url", "not a url"),
])
def test_redact_hides_the_password_only(url: str, shown: str) -> None:
    assert redact(url) == shown


# Passwords holding what a URL parser cuts at, unencoded: each character of
# theirs must be hidden, whichever of them comes first.
RAW_PASSWORDS = ["Pw/Q7x", "Pw?Q7=x", "Pw#Q7x", "Pw@Q7x", "P/w?Q#7@x", "Pw:Q7/x"]
WHERE = ["h:6379/0", "h:6380/0?ssl_ca_certs=/ca.pem", "h:3306/db?ssl_ca=/ca.pem", "h"]


@pytest.mark.parametrize("password", RAW_PASSWORDS)
@pytest.mark.parametrize(("scheme", "user"), [("redis", ""), ("rediss", "alice"), ("mysql", "u"), ("mysql", "")])
def test_redact_hides_a_password_with_unencoded_separators(scheme: str, user: str, password: str) -> None:
    for where in WHERE:
        shown = redact(f"{scheme}://{user}:{password}@{where}")
        assert shown == f"{scheme}://{user}:***@{where}"
        assert "Pw" not in shown and "Q7" not in shown


@pytest.mark.parametrize("password", [p for p in RAW_PASSWORDS if set(p) & set("/?#")])
def test_a_url_whose_password_a_driver_would_cut_is_refused_without_showing_it(password: str) -> None:
    """Drivers end the user part at the first "/", "?" or "#": a piece of
    the password would be read as the port ("Port could not be cast to
    integer value as 'Pw'") or the query, and named in the error. (An "@"
    alone is fine: they split at the last one.)"""
    settings = Settings.from_env({"PINLATER_SHARDS": "r1=redis://:Pw@Q7x@127.0.0.1:1/0",
                                  "PINLATER_FLOWER_URL": "http://u:Pw@Q7x@127.0.0.1:5555/"})
    assert "Pw" not in repr(settings) and "Q7" not in repr(settings)
    env = {"PINLATER_SHARDS": f"r1=redis://:{password}@127.0.0.1:1/0", "PINLATER_CONTROL_URL": "memory://x"}
    attempts: list[Callable[[], object]] = [
        lambda: open_redis(f"redis://:{password}@127.0.0.1:1/0", 1.0),
        lambda: MySQLAddress.parse(f"mysql://u:{password}@127.0.0.1:1/db"),
        lambda: Settings.from_env(env),
        lambda: Settings.from_env({"PINLATER_CONTROL_URL": f"mysql://u:{password}@127.0.0.1:1/db"}),
        lambda: Settings.from_env({"PINLATER_FLOWER_URL": f"http://u:{password}@127.0.0.1:5555/"}),
    ]
    for attempt in attempts:
        with pytest.raises(ValueError, match="must be percent-encoded") as refused:
            attempt()
        message = str(refused.value)
        assert "\n" not in message and "Pw" not in message and "Q7" not in message, message


def test_mysql_url_reads_tls_files() -> None:
    parsed = MySQLUrl.parse(f"mysql://u:{SECRET}@db1:3307/jobs?ssl_ca=/ca.pem&ssl_cert=/c.pem&ssl_key=/c.key")
    assert (parsed.host, parsed.port, parsed.user, parsed.password, parsed.database) == (
        "db1", 3307, "u", "s3cr/t-pw", "jobs")
    assert parsed.tls == ClientTls("/ca.pem", "/c.pem", "/c.key")
    assert SECRET not in repr(parsed) and "s3cr/t-pw" not in repr(parsed)
    assert MySQLUrl.parse("mysql://u:p@db1/jobs").tls is None


@pytest.mark.parametrize(("query", "problem"), [
    ("?sslca=/ca.pem", "unknown query parameter 'sslca'"),
    ("?ssl_ca_certs=/ca.pem", "unknown query parameter 'ssl_ca_certs'"),  # Redis's name, not MySQL's
    ("?ssl_ca=/a&ssl_ca=/b", "ssl_ca given twice"),
    ("?ssl_ca=", "ssl_ca is empty"),
    ("?ssl_ca", "not NAME=VALUE"),
    ("?ssl_ca=/ca.pem&ssl_cert=/c.pem", "ssl_cert and ssl_key go together"),
    ("?ssl_cert=/c.pem&ssl_key=/c.key", "needs ssl_ca"),
])
def test_a_bad_mysql_query_is_one_clear_line_without_the_password(query: str, problem: str) -> None:
    for parse in (lambda q: MySQLAddress.parse(f"mysql://u:{SECRET}@h:3306/db{q}"),
                  lambda q: ShardMap.parse(f"0-3=mysql://u:{SECRET}@h:3306{q}")):
        with pytest.raises(ValueError, match=problem) as caught:
            parse(query)
        assert "\n" not in str(caught.value) and SECRET not in str(caught.value)


def test_the_shard_map_and_the_job_service_share_one_parser() -> None:
    url = "mysql://u:p@h:3307?ssl_ca=/ca.pem"
    assert Server.parse(url) == Server("h", 3307, "u", "p", ClientTls("/ca.pem"))
    assert MySQLAddress.parse("mysql://u:p@h:3307/db?ssl_ca=/ca.pem").tls == Server.parse(url).tls
    assert Server.parse("mysql://u:p@h:3306").tls is None


def test_mysql_without_tls_stays_plain_and_with_it_verifies(ca_files: tuple[Path, Path, Path]) -> None:
    assert mysql_connect_options(None) == {"ssl_disabled": True}
    ca, cert, key = ca_files
    context = ClientTls(str(ca), str(cert), str(key)).context()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert mysql_connect_options(context) == {"ssl": context}


def test_unreadable_tls_files_are_one_line(tmp_path: Path, ca_files: tuple[Path, Path, Path]) -> None:
    with pytest.raises(ValueError, match=r"CA file not found: .*missing\.pem"):
        ClientTls(str(tmp_path / "missing.pem")).context()
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ValueError, match="cannot use the CA file"):
        ClientTls(str(garbage)).context()
    ca, cert, _ = ca_files
    with pytest.raises(ValueError, match="cannot use the certificate"):
        ClientTls(str(ca), str(cert), str(garbage)).context()


def test_redis_takes_redis_py_names_on_rediss_only() -> None:
    assert redis_tls("rediss://u:p@h:6380/0?ssl_ca_certs=/ca.pem&ssl_certfile=/c&ssl_keyfile=/k") == ClientTls(
        "/ca.pem", "/c", "/k")
    assert redis_tls("rediss://u:p@h:6380/0") is None  # the system's CAs
    assert redis_tls("redis://h:6379/0") is None
    with pytest.raises(ValueError, match="ssl_ca_certs needs rediss://"):
        redis_tls("redis://h:6379/0?ssl_ca_certs=/ca.pem")
    with pytest.raises(ValueError, match="unknown query parameter 'ssl_cert_reqs'"):
        redis_tls("rediss://h:6380/0?ssl_cert_reqs=none")  # verification cannot be turned off
    with pytest.raises(ValueError, match="unknown query parameter 'db'"):
        redis_tls("redis://h:6379?db=3")


def test_open_redis_verifies_the_server_and_its_name(ca_files: tuple[Path, Path, Path]) -> None:
    ca, cert, key = ca_files
    client = open_redis(f"rediss://u:{SECRET}@127.0.0.1:1/0?ssl_ca_certs={ca}&ssl_certfile={cert}&ssl_keyfile={key}",
                        1.0)  # no connection yet: redis-py connects on the first command
    options = client.connection_pool.connection_kwargs
    assert options["ssl_cert_reqs"] == "required" and options["ssl_check_hostname"] is True
    assert (options["ssl_ca_certs"], options["ssl_certfile"], options["ssl_keyfile"]) == (str(ca), str(cert), str(key))
    assert SECRET not in repr(client) and SECRET not in repr(client.connection_pool)
    with pytest.raises(ValueError, match=r"CA file not found: /nonexistent/ca\.pem"):
        open_redis("rediss://u:p@127.0.0.1:1/0?ssl_ca_certs=/nonexistent/ca.pem", 1.0)


def test_settings_never_show_a_store_password() -> None:
    """Settings end up in logs and tracebacks (a repr in a frame's locals)."""
    from pinlater.settings import Settings
    from workers.settings import TransportSettings

    settings = Settings.from_env({"PINLATER_SHARDS": f"r1=redis://u:{SECRET}@127.0.0.1:1/0",
                                  "PINLATER_CONTROL_URL": f"mysql://u:{SECRET}@127.0.0.1:1/ctl",
                                  "PINLATER_ADMIN_SECRET": SECRET})
    assert SECRET not in repr(settings) and "redis://u:***@127.0.0.1:1/0" in repr(settings)
    transport = TransportSettings.from_options({}, {"PINLATER_BUS_URL": f"rediss://u:{SECRET}@127.0.0.1:1/0"})
    assert SECRET not in repr(transport)


def test_a_url_in_a_commands_error_is_shown_redacted(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["server-stats", "--url", "http://stats:Pw-Q7x@127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "cannot read server stats from http://stats:***@127.0.0.1:1" in err and "Q7" not in err
