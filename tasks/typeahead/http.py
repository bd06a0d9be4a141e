"""The typeahead endpoint and its search page.

    GET /v1/typeahead/<user_id>?q=<query>&limit=<n>&sources=<a,b>   ranked contacts, JSON
    GET /                                             the search page (static/)
    GET /healthz

A ``pinlater.kit.httpserver.HttpServer`` over an injected ``Lookup`` (the CLI wires
``tasks.typeahead.index``; tests a list of candidates), so this module never
imports the index. ``sources`` (optional) limits the lookup to those
contact sources. Errors are one-line JSON: 400 for a bad user id, limit
(1..100, default 10), query (at most 256 characters, required, may be
blank) or sources (known names, at least one), 404, 405, 421 for a foreign Host header, 503 with the cause when
the index raises ``TypeaheadUnavailable``. Queries are never logged.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Protocol, Unpack

from pinlater.kit.cli_output import one_line
from pinlater.kit.httpserver import Answer, HttpServer, ServerOptions, error_answer, json_answer
from tasks.httpserve import JsonHandler, parse_count, parse_user_id, unique_params
from tasks.typeahead.errors import TypeaheadUnavailable
from tasks.typeahead.rank import MAX_LIMIT, LookupResult, Match
from tasks.typeahead.sources import Source, parse_filter

log = logging.getLogger(__name__)



class Lookup(Protocol):
    """(user id, query, limit, sources or None for all) -> ranked matches"""

    def __call__(self, user_id: int, query: str, limit: int, *,
                 sources: frozenset[Source] | None = None) -> LookupResult: ...


DEFAULT_LIMIT = 10
MAX_QUERY_CHARS = 256
NOTHING_LOOKED_UP = "none"  # served_by of a blank query: no cluster was asked
_PATH = re.compile(r"/v1/typeahead/([^/]+)")
_PARAMS = frozenset({"q", "limit", "sources"})
_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/static/typeahead.js": ("typeahead.js", "text/javascript; charset=utf-8"),
    "/static/typeahead.css": ("typeahead.css", "text/css; charset=utf-8"),
}
# The page talks to this server only.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def lookup_json(user_id: int, query: str, result: LookupResult, took_ms: float,
                sources: frozenset[Source] | None = None) -> dict[str, Any]:
    """The endpoint's answer (``pinlater-typeahead lookup --json`` prints it
    too). Ids also as strings: JavaScript numbers are exact only below 2**53.
    ``sources``: the sources asked for, by code order; null for all."""
    return {
        "user_id": user_id,
        "user_id_str": str(user_id),
        "query": query,
        "sources": None if sources is None else [s.name for s in sorted(sources, key=lambda s: s.code)],
        "results": [_match_json(m) for m in result.matches],
        "took_ms": round(took_ms, 1),
        "served_by": result.served_by,
    }


def parse_query(text: str) -> str:
    if len(text) > MAX_QUERY_CHARS:
        raise ValueError(f"q must be at most {MAX_QUERY_CHARS} characters, got {len(text)}")
    return text


def timed_lookup(lookup: Lookup, user_id: int, query: str, limit: int,
                 sources: frozenset[Source] | None = None) -> tuple[LookupResult, float]:
    """The lookup's answer and how long it took (ms); a blank query asks nothing."""
    started = time.perf_counter()
    result = lookup(user_id, query, limit, sources=sources) if query.strip() else LookupResult([], NOTHING_LOOKED_UP)
    return result, (time.perf_counter() - started) * 1000


class TypeaheadServer(HttpServer):
    """Serves one ``Lookup`` and the search page."""

    def __init__(self, lookup: Lookup,
                 host: str = "127.0.0.1", port: int = 0, **options: Unpack[ServerOptions]) -> None:
        self.lookup = lookup
        self.static = _load_static()
        super().__init__("typeahead", _Handler, host, port, **options)


class _Handler(JsonHandler):
    server: TypeaheadServer
    headers_for_all: ClassVar[Mapping[str, str]] = {**JsonHandler.headers_for_all, **_PAGE_HEADERS}

    def route(self, path: str, pairs: list[tuple[str, str]]) -> Answer:
        if path in self.server.static:
            body, content_type = self.server.static[path]
            return Answer(200, body, content_type)
        match = _PATH.fullmatch(path)
        if match is None:
            return error_answer(404, f"no such path: {path[:100]}")
        try:
            params = unique_params(pairs, _PARAMS)
            user_id = parse_user_id(match[1])
            if "q" not in params:
                raise ValueError("q is required (the text typed so far)")
            query = parse_query(params["q"])
            limit = parse_count("limit", params["limit"], MAX_LIMIT) if "limit" in params else DEFAULT_LIMIT
            sources = parse_filter(params["sources"]) if "sources" in params else None
        except ValueError as exc:
            return error_answer(400, str(exc))
        try:
            result, took_ms = timed_lookup(self.server.lookup, user_id, query, limit, sources)
        except TypeaheadUnavailable as exc:
            log.warning("typeahead of %d: index unavailable: %s", user_id, one_line(str(exc)))
            return error_answer(503, f"contacts index unavailable: {one_line(str(exc))}")
        except Exception:
            log.exception("typeahead of %d failed", user_id)  # not the query: people's typing stays out of logs
            return error_answer(500, "internal error (see the server's log)")
        return json_answer(200, lookup_json(user_id, query, result, took_ms, sources))


def _match_json(match: Match) -> dict[str, Any]:
    user_id = match.contact.user_id
    return {
        "name": match.contact.name,
        "key": match.contact.key,
        "user_id": user_id,
        "user_id_str": None if user_id is None else str(user_id),
        "source": match.source,
        "sources": list(match.sources),
        "score": match.score,
    }


def _load_static() -> dict[str, tuple[bytes, str]]:
    # Beside this module (a plain path: the editable install makes the
    # top-level package a namespace that importlib.resources cannot read).
    static = Path(__file__).with_name("static")
    return {path: ((static / name).read_bytes(), ctype) for path, (name, ctype) in _STATIC.items()}
