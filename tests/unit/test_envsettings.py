"""``pinlater.kit.envsettings``: every value a user did not plan for (other
scripts' digits, "inf", "nan", overflowing numbers, huge integers, blanks,
ports out of range, half addresses) is one ``SettingError`` line naming the
variable, never a bare ValueError or a later OverflowError."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import pinlater.settings
from pinlater.kit.envsettings import (
    Setting,
    SettingError,
    comma_separated,
    one_of,
    parse_address,
    parse_flag,
    plain_text,
    positive_number,
    read,
    read_fields,
    real_number,
    text_matching,
    url,
    whole_number,
)

VAR = "PINLATER_TEST_VALUE"
DEFAULT: object = object()
HUGE = "9" * 5000  # int() refuses more than 4300 digits with a message of its own
# "\uff11" is a fullwidth 1: int() takes it, like "٣".
ODD_NUMBERS = ["²", "٣", "\uff11", "1_000", "0x10", "", "   ", "\n", "inf", "-inf", "nan", "1e400", HUGE, "1 2", "five"]


@pytest.mark.parametrize("text", [*ODD_NUMBERS, "-5", "1.5", "10001", "0"])
def test_whole_numbers_refuse_what_is_not_one_in_range(text: str) -> None:
    problem = one_line_problem(whole_number(1, 10_000), text)
    assert problem.startswith(("expected a whole number, got ", "must be between 1 and 10000, got "))


@pytest.mark.parametrize(("parse", "text"), [
    *((positive_number(1), text) for text in [*ODD_NUMBERS, "0", "-0.5", "1.01", "1e-400"]),
    *((real_number(0, 1), text) for text in [*ODD_NUMBERS, "-0.5", "1.01", "-1e-300"]),
])
def test_real_numbers_refuse_what_is_not_finite_and_in_range(parse: Callable[[str], float], text: str) -> None:
    problem = one_line_problem(parse, text)
    assert problem.startswith(("expected a number, got ", "must be a number above 0 and at most 1, got ",
                               "must be a number from 0 to 1, got "))


@pytest.mark.parametrize("text", [
    "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:99999999999999999999", "host:", ":80", "[]:80", "[::1]", "80",
    "host:²", "host:٣", "host:-1", "host:8 0", "a b:80", "", "  ", HUGE,
])
def test_addresses_refuse_half_addresses_and_ports_out_of_range(text: str) -> None:
    assert one_line_problem(parse_address, text).startswith("must look like HOST:PORT with a port from 1 to 65535")


@pytest.mark.parametrize(("parse", "text", "problem"), [
    (parse_flag, "maybe", "expected a yes/no flag"),
    (parse_flag, "\uff12", "expected a yes/no flag"),
    (one_of(["redis", "mysql"]), "Redis", "expected one of redis, mysql, got 'Redis'"),
    (one_of(["redis", "mysql"]), "", "expected one of redis, mysql, got ''"),
    (text_matching(r"[a-z]+", "lower-case letters"), "ab1", "expected lower-case letters, got 'ab1'"),
    (url(["redis", "rediss"]), "http://h", "expected a URL starting redis:// or rediss://, got 'http'://..."),
    (url(["redis"]), "redis://", "expected a URL starting redis:// and naming a place after it"),
    (url(["redis"]), "localhost:6379", "expected a URL starting redis:// and naming a place after it"),
    (comma_separated(parse_address), "a:1,,b:0", "item 2: must look like HOST:PORT"),
])
def test_flags_and_choices_refuse_anything_else(parse: Callable[[str], object], text: str, problem: str) -> None:
    assert one_line_problem(parse, text).startswith(problem)


def one_line_problem(parse: Callable[[str], object], text: str) -> str:
    """The problem ``parse`` has with ``text``: a one-line ValueError when
    called directly, and the same problem in a SettingError naming the
    variable through ``read`` (blank text is unset there: the default)."""
    with pytest.raises(ValueError) as direct:
        parse(text)
    assert type(direct.value) is ValueError and "\n" not in str(direct.value) and len(str(direct.value)) < 160
    if not text.strip():
        assert read({VAR: text}, VAR, parse, DEFAULT) is DEFAULT
        return str(direct.value)
    with pytest.raises(SettingError) as info:
        read({VAR: text}, VAR, parse, DEFAULT)
    error = info.value
    assert error.variable == VAR and error.problem == str(direct.value)
    assert str(error) == f"{VAR}: {error.problem}"
    return error.problem


@pytest.mark.parametrize(("parse", "text", "value"), [
    (whole_number(0, 2**62), " 42 ", 42),
    (whole_number(-5, 5), "-5", -5),
    (whole_number(0, 65535), "0065535", 65535),
    (whole_number(1, 10), "+3", 3),
    (real_number(0, 1), "0", 0.0),
    (real_number(0, 60_000), "1e3", 1000.0),
    (positive_number(3600), ".5", 0.5),
    (parse_flag, " Yes ", True),
    (parse_flag, "off", False),
    (parse_address, " 127.0.0.1:8090 ", ("127.0.0.1", 8090)),
    (parse_address, "[::1]:65535", ("::1", 65535)),
    (parse_address, "feeds.internal:1", ("feeds.internal", 1)),
    (one_of(["redis", "mysql"]), " mysql ", "mysql"),
    (plain_text, "  any text ", "any text"),
    (text_matching(r"[a-z]+", "lower-case letters"), " ab ", "ab"),
    (url(["redis", "rediss"]), " rediss://:pw@h:6379/0 ", "rediss://:pw@h:6379/0"),
    (comma_separated(parse_address), " a:1, ,[::1]:2,", (("a", 1), ("::1", 2))),
    (comma_separated(plain_text), " , ", ()),
])
def test_good_values_are_read(parse: Callable[[str], object], text: str, value: object) -> None:
    assert read({VAR: text}, VAR, parse, None) == value


def test_unset_and_blank_take_the_default() -> None:
    for env in ({}, {VAR: ""}, {VAR: " \t\n"}):
        assert read(env, VAR, whole_number(1, 10), 7) == 7


def test_a_problem_is_folded_onto_one_line() -> None:
    def parse(text: str) -> str:
        raise ValueError("first line\nsecond line")

    assert str(SettingError(VAR, "first line\n  second line")) == f"{VAR}: first line second line"
    with pytest.raises(SettingError, match=f"^{VAR}: first line second line$"):
        read({VAR: "x"}, VAR, parse, "")


def test_the_job_service_settings_keep_their_names_and_share_the_error() -> None:
    assert pinlater.settings.SettingError is SettingError
    assert pinlater.settings.parse_flag is parse_flag and pinlater.settings.parse_address is parse_address
    with pytest.raises(SettingError, match=r"^PINLATER_SERVER_PORT: expected a whole number, got '٣'$"):
        pinlater.settings.Settings.from_env({"PINLATER_SERVER_PORT": "٣"})
    with pytest.raises(SettingError, match=r"^PINLATER_CONFIG_TTL_S: must be a number above 0 and at most 3600"):
        pinlater.settings.Settings.from_env({"PINLATER_CONFIG_TTL_S": "1e400"})
    assert pinlater.settings.Settings.from_env({"PINLATER_SERVER_HOST": "  "}).server_host == "127.0.0.1"


def test_a_url_with_a_password_is_never_repeated() -> None:
    for text in ("http://u:hunter2@h", "redis//u:hunter2@h", "redis://u:hunter2@ h"):
        with pytest.raises(SettingError) as info:
            read({VAR: text}, VAR, url(["redis"]), "")
        assert "hunter2" not in str(info.value)


def test_read_fields_sets_what_is_set_and_a_later_variable_wins() -> None:
    declared = (
        Setting("A", "size", whole_number(1, 9), "1", "a size"),
        Setting("A_LATER", "size", whole_number(1, 9), "", "the same size, winning"),
        Setting("B", "", plain_text, "", "read by other code"),
    )
    assert read_fields({}, declared) == {}
    assert read_fields({"A": "3", "B": "x"}, declared) == {"size": 3}
    assert read_fields({"A": "3", "A_LATER": "4"}, declared) == {"size": 4}
    with pytest.raises(SettingError, match=r"^A_LATER: must be between 1 and 9, got 10$"):
        read_fields({"A_LATER": "10"}, declared)
