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
``one_of(choices)``. Numbers are ASCII decimal and finite: ``int()`` and
``float()`` also take other scripts' digits ("٣") and underscores
("1_000"), ``float()`` takes "inf" and "nan" and makes "1e400" inf, and
``str.isdigit()`` takes "²", which ``int()`` then refuses.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

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
