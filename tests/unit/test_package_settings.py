"""Every package's settings refuse what a user did not plan for ("²", "inf",
"nan", "1e400", negative or huge numbers) with one ``SettingError`` line
naming the variable, as their settings objects really read them; and the
typeahead's endpoint listens where PINLATER_TYPEAHEAD_HTTP says."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from pinlater.kit import cli_runner
from pinlater.kit.envsettings import Setting, SettingError, read
from pinlater.kit.settings_doc import discovered
from pinlater.settings import Settings
from tasks.appdata.settings import AppDataSettings
from tasks.feeds.settings import FeedSettings
from tasks.hbase.settings import HBaseSettings
from tasks.typeahead import cli as typeahead_cli
from tasks.typeahead.settings import TypeaheadSettings
from workers.settings import TransportSettings

# How each package reads its environment.
READERS: dict[str, Callable[[Mapping[str, str]], object]] = {
    "pinlater": Settings.from_env,
    "tasks.appdata": AppDataSettings.from_env,
    "tasks.feeds": FeedSettings.from_env,
    "tasks.hbase": HBaseSettings.from_env,
    "tasks.typeahead": TypeaheadSettings.from_env,
    "workers": lambda env: TransportSettings.from_options({}, env),
}
ODD = ["²", "٣", "inf", "-inf", "nan", "1e400", "-1", "9" * 5000, "1_000"]
# Text of the user's choosing: some odd values are good ones (a host "inf",
# a secret "²"); any they refuse is still one SettingError line.
FREE_TEXT = {
    "PINLATER_ADMIN_SECRET", "PINLATER_DASHBOARD_TOKEN", "PINLATER_SERVER_HOST", "PINLATER_DASHBOARD_HOST",
    "PINLATER_BUS_PREFIX", "PINLATER_HBASE_TABLE_PREFIX", "PINLATER_APPDATA_DATABASE_PREFIX",
    "PINLATER_CELERY_IMPORTS",
    # File paths: the files are checked when the server or client loads them.
    "PINLATER_SERVER_TLS_CERT", "PINLATER_SERVER_TLS_KEY", "PINLATER_SERVER_TLS_CLIENT_CA", "PINLATER_SERVER_ROLES",
    "PINLATER_HTTP_TLS_CERT", "PINLATER_HTTP_TLS_KEY", "PINLATER_CLIENT_TLS_CA", "PINLATER_CLIENT_TLS_CERT",
    "PINLATER_CLIENT_TLS_KEY", "PINLATER_FLOWER_AUTH_FILE", "PINLATER_TYPEAHEAD_THRIFT_TLS_CERT",
    "PINLATER_TYPEAHEAD_THRIFT_TLS_KEY", "PINLATER_TYPEAHEAD_THRIFT_TLS_CLIENT_CA", "PINLATER_TYPEAHEAD_THRIFT_ROLES",
}
DECLARED = [(package, setting) for package, settings in discovered() for setting in settings]


def reading(package: str, setting: Setting, text: str) -> object:
    """``text`` as the package reads ``setting``'s variable: through its
    settings object, or, for a variable other code reads, through the
    parser it declares (the one that code uses)."""
    env = {setting.variable: text}
    if setting.field:
        return READERS[package](env)
    return read(env, setting.variable, setting.parse, None)


@pytest.mark.parametrize(("package", "setting"), DECLARED, ids=[s.variable for _, s in DECLARED])
def test_odd_values_are_one_setting_error_line_naming_the_variable(package: str, setting: Setting) -> None:
    refused = 0
    for text in ODD:
        try:
            reading(package, setting, text)
        except SettingError as exc:
            assert exc.variable == setting.variable and str(exc).startswith(f"{setting.variable}: ")
            assert "\n" not in str(exc) and len(str(exc)) < 200, str(exc)[:300]
            refused += 1
    if setting.variable not in FREE_TEXT:
        assert refused == len(ODD)


def test_the_free_text_settings_are_declared() -> None:
    assert {setting.variable for _, setting in DECLARED} >= FREE_TEXT


@pytest.mark.parametrize("variable", ["PINLATER_HBASE_CALL_TIMEOUT_S", "PINLATER_HBASE_POOL_WAIT_S"])
def test_an_hbase_timeout_of_inf_is_refused_when_read_not_at_the_first_call(variable: str) -> None:
    with pytest.raises(SettingError) as info:
        HBaseSettings.from_env({variable: "inf"})
    assert str(info.value) == f"{variable}: must be a number above 0 and at most 3600, got 'inf'"


def test_a_transport_option_is_read_like_its_variable_and_named_in_the_error() -> None:
    env = {"PINLATER_POLL_INTERVAL_S": "0.25", "PINLATER_MAX_BATCH": "7"}
    settings = TransportSettings.from_options({"max_batch": 9}, env)
    assert (settings.poll_interval_s, settings.max_batch) == (0.25, 9)
    with pytest.raises(SettingError, match=r"^broker_transport_options\['poll_interval'\]: must be a number above 0"):
        TransportSettings.from_options({"poll_interval": float("inf")}, env)


def test_secrets_and_urls_are_not_repeated_in_errors() -> None:
    for variable, text in [("PINLATER_ADMIN_SECRET_SHA256", "hunter2"), ("PINLATER_CONTROL_URL", "mysql//u:hunter2@h"),
                           ("PINLATER_SHARDS", "mysql://u:hunter2@h"), ("PINLATER_BUS_URL", "http://u:hunter2@h")]:
        with pytest.raises(SettingError) as info:
            TransportSettings.from_options({}, {variable: text})
        assert "hunter2" not in str(info.value) and info.value.variable == variable


@pytest.mark.parametrize(("env", "args", "address"), [
    ({}, [], ("127.0.0.1", 8091)),
    ({"PINLATER_TYPEAHEAD_HTTP": "0.0.0.0:18091"}, [], ("0.0.0.0", 18091)),
    ({"PINLATER_TYPEAHEAD_HTTP": "[::1]:18092"}, ["--port", "0"], ("::1", 0)),
    ({"PINLATER_TYPEAHEAD_HTTP": "0.0.0.0:18091"}, ["--host", "127.0.0.2"], ("127.0.0.2", 18091)),
])
def test_typeahead_serve_listens_on_pinlater_typeahead_http(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], args: list[str], address: tuple[str, int]
) -> None:
    monkeypatch.delenv("PINLATER_TYPEAHEAD_HTTP", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    served: list[tuple[str, int]] = []

    @contextlib.contextmanager
    def no_index() -> Iterator[Any]:  # the address is chosen without HBase
        yield None

    monkeypatch.setattr(typeahead_cli, "index_lookup", no_index)
    monkeypatch.setattr(cli_runner, "serve_until_signal", lambda prog, host, port, make: served.append((host, port)))
    assert typeahead_cli.main(["serve", *args]) == 0
    assert served == [address]
