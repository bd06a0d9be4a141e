"""Typed values from an environment mapping, shared by every settings object
(``pinlater.settings.Settings``, and the task packages' ``FeedSettings``,
``TypeaheadSettings`` ...), so the same kind of value is read the same way
everywhere.

``read(env, variable, parse, default)``: a variable that is unset, empty or
only white space takes the default; otherwise ``parse`` its text, and a
value it refuses is a ``SettingError`` naming the variable, in one line.

The parsers take text and raise ``ValueError`` with a one-line problem:
``whole_number(low, high)``, ``real_number(low, high)``,
``positive_number(high)``, ``parse_flag``, ``parse_address`` (HOST:PORT) and
``one_of(choices)``, ``plain_text``, ``text_matching(pattern, what)``,
``url(schemes)`` and ``comma_separated(item)``. Numbers are ASCII decimal
and finite: ``int()`` and ``float()`` also take other scripts' digits ("٣")
and underscores ("1_000"), ``float()`` takes "inf" and "nan" and makes
"1e400" inf, and ``str.isdigit()`` takes "²", which ``int()`` then refuses.

Each settings module declares its variables as a tuple ``SETTINGS`` of
``Setting`` records (variable, the field it sets, parser, default, meaning)
and reads them with ``read_fields``; ``pinlater.kit.settings_doc`` makes
docs/configuration.md from those tuples.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

_WHOLE = re.compile(r"[+-]?[0-9]+")
_REAL = re.compile(r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.IGNORECASE)
_HOST = re.compile(r"[A-Za-z0-9._:%-]+")  # a name, IPv4, or IPv6 (bracketed, with a zone)
_PORT = re.compile(r"[0-9]{1,5}")


class SettingError(ValueError):
    """A setting from the environment has a value we cannot use. The message
    is one line, ``VARIABLE: problem``, so it tells an operator what to fix."""

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        self.problem = " ".join(problem.split())
        super().__init__(f"{variable}: {self.problem}")


def _shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for a message: escaped (one line) and cut short."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def read(env: Mapping[str, str], variable: str, parse: Callable[[str], T], default: T) -> T:
    """``parse(env[variable])``, or ``default`` when it is unset or blank;
    a ``ValueError`` of ``parse`` becomes a ``SettingError`` naming ``variable``."""
    text = env.get(variable)
    if text is None or not text.strip():
        return default
    try:
        return parse(text)
    except ValueError as exc:
        raise SettingError(variable, str(exc)) from None


@dataclass(frozen=True, slots=True)
class Setting:
    """One environment variable, as code reads it and docs list it.

    ``field``: the attribute of the settings object that ``read_fields``
    sets ("" when other code reads the variable). ``default``: the value as
    a user would write it, "" when unset has a meaning of its own (said in
    ``meaning``); a default that is a value parses to the settings object's
    default (the docs' test checks). ``meaning``: one line for the docs."""

    variable: str
    field: str
    parse: Callable[[str], Any]
    default: str
    meaning: str


def read_fields(env: Mapping[str, str], settings: Sequence[Setting]) -> dict[str, Any]:
    """``{field: value}`` of each variable of ``settings`` that is set (in
    order: a later variable for the same field wins); unset ones are left
    out, so the settings object keeps its own default."""
    found: dict[str, Any] = {}
    for setting in settings:
        if setting.field:
            value = read(env, setting.variable, setting.parse, _UNSET)
            if value is not _UNSET:
                found[setting.field] = value
    return found


_UNSET: Any = object()


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """A whole number from ``low`` to ``high``."""
    widest = max(len(str(abs(low))), len(str(abs(high))))

    def parse(text: str) -> int:
        number = text.strip()
        if not _WHOLE.fullmatch(number):
            raise ValueError(f"expected a whole number, got {_shown(text)}")
        # Too many digits is out of range: never make int() of them (it
        # refuses more than 4300 digits with a message of its own).
        if len(number.lstrip("+-").lstrip("0")) > widest or not low <= int(number) <= high:
            raise ValueError(f"must be between {low} and {high}, got {_shown(number) if len(number) > 20 else number}")
        return int(number)

    return parse


def real_number(low: float, high: float, *, above_low: bool = False) -> Callable[[str], float]:
    """A finite number from ``low`` (or above it, ``above_low``) to ``high``."""
    bounds = f"above {low:g} and at most {high:g}" if above_low else f"from {low:g} to {high:g}"

    def parse(text: str) -> float:
        if not _REAL.fullmatch(text.strip()):
            raise ValueError(f"expected a number, got {_shown(text)}")
        number = float(text)  # "1e400" is inf: refused below like "inf"
        if not math.isfinite(number) or not (low < number if above_low else low <= number) or not number <= high:
            raise ValueError(f"must be a number {bounds}, got {_shown(text.strip())}")
        return number

    return parse


def positive_number(high: float) -> Callable[[str], float]:
    """A finite number above 0 and at most ``high`` (timeouts, intervals)."""
    return real_number(0, high, above_low=True)


def parse_flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a yes/no flag (1, true, yes, on / 0, false, no, off), got {_shown(text)}")


def parse_address(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port``, port 1 to 65535."""
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not _HOST.fullmatch(host) or not _PORT.fullmatch(port) or not 0 < int(port) < 65536:
        raise ValueError(f"must look like HOST:PORT with a port from 1 to 65535, got {_shown(text)}")
    return host, int(port)


def one_of(choices: Iterable[str]) -> Callable[[str], str]:
    """One of ``choices``, exactly (after trimming white space)."""
    known = tuple(choices)

    def parse(text: str) -> str:
        value = text.strip()
        if value not in known:
            raise ValueError(f"expected one of {', '.join(known)}, got {_shown(text)}")
        return value

    return parse


def plain_text(text: str) -> str:
    """Any text, without the white space around it."""
    return text.strip()


def text_matching(pattern: str, what: str) -> Callable[[str], str]:
    """Trimmed text that ``pattern`` matches in full; ``what`` says what that is."""
    compiled = re.compile(pattern)

    def parse(text: str) -> str:
        value = text.strip()
        if not compiled.fullmatch(value):
            raise ValueError(f"expected {what}, got {_shown(text)}")
        return value

    return parse


def url(schemes: Iterable[str]) -> Callable[[str], str]:
    """A URL of one of ``schemes``, with something after ``://``. The text
    is never repeated in the problem: a URL may carry a password."""
    known = tuple(schemes)
    expected = "expected a URL starting " + " or ".join(f"{scheme}://" for scheme in known)

    def parse(text: str) -> str:
        value = text.strip()
        scheme, sep, rest = value.partition("://")
        if not sep or not rest or any(c.isspace() for c in value):
            raise ValueError(f"{expected} and naming a place after it (the value is not shown)")
        if scheme not in known:
            raise ValueError(f"{expected}, got {_shown(scheme, 12)}://...")
        return value

    return parse


def comma_separated(item: Callable[[str], T]) -> Callable[[str], tuple[T, ...]]:
    """Items separated by commas, each read by ``item``; blank items are
    skipped, and a problem with one names its place (1 is the first)."""

    def parse(text: str) -> tuple[T, ...]:
        parts = [part for part in text.split(",") if part.strip()]
        values = []
        for place, part in enumerate(parts, 1):
            try:
                values.append(item(part))
            except ValueError as exc:
                raise ValueError(f"item {place}: {exc}") from None
        return tuple(values)

    return parse
