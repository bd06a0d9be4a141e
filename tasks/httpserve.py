"""What the task packages' small GET-only JSON servers share (the feed
endpoint, the typeahead) on top of ``pinlater.kit.httpserver`` (its bounds,
timeouts, loopback default, Host check and one-line errors): ``GET
/healthz``, and the parsing of user ids, counts and query parameters.

A server is a ``pinlater.kit.httpserver.HttpServer`` given a ``JsonHandler``
subclass whose ``route`` answers a decoded path and its query parameters;
every error is a one-line JSON ``{"error": "..."}``.
"""

from __future__ import annotations

import re

from pinlater.kit.httpserver import Answer, HttpHandler, Request, json_answer
from tasks.appdata.ids import InvalidId, ObjectType, expect_type

DIGITS = re.compile(r"[0-9]{1,20}")  # not int(): it takes "+1", " 1", "1_0" and other scripts' digits


def parse_user_id(text: str) -> int:
    """A user id from a path or a command line; ValueError (one line) otherwise."""
    if not DIGITS.fullmatch(text):
        raise ValueError(f"user id must be a decimal number (up to 20 digits), got {text[:40]!r}")
    user_id = int(text)
    try:
        expect_type(user_id, ObjectType.USER)
    except InvalidId as exc:
        raise ValueError(f"not a user id: {exc}") from None
    return user_id


def parse_count(name: str, text: str, high: int) -> int:
    """A whole number in 1..high given as a query parameter; ValueError otherwise."""
    if not DIGITS.fullmatch(text) or not 1 <= int(text) <= high:
        raise ValueError(f"{name} must be a whole number in 1..{high}, got {text[:40]!r}")
    return int(text)


def unique_params(pairs: list[tuple[str, str]], known: frozenset[str]) -> dict[str, str]:
    """Query parameters by name: each known, none repeated; ValueError otherwise."""
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in known:
            raise ValueError(f"unknown parameter {name[:40]!r} (known: {', '.join(sorted(known))})")
        if name in params:
            raise ValueError(f"{name} given more than once")
        params[name] = value
    return params


class JsonHandler(HttpHandler):
    """GET only, no bodies; a subclass answers in ``route``. ``/healthz`` is answered here."""

    def route(self, path: str, pairs: list[tuple[str, str]]) -> Answer:
        raise NotImplementedError

    def answer(self, request: Request) -> Answer:
        if request.path == "/healthz":
            return json_answer(200, {"ok": True})
        return self.route(request.path, request.pairs)
