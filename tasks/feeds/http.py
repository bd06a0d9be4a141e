"""The feed read endpoint: ``GET /v1/feeds/<user_id>?limit=N&cursor=C``
answered from a ``FeedReader`` as one JSON object, and ``GET /healthz``.

The server is a ``pinlater.kit.httpserver.HttpServer``: bound to 127.0.0.1 unless
told otherwise, each request whole within its deadline, connections capped
in all and per client address (``PINLATER_HTTP_*``). Every error is a one-line JSON
``{"error": "..."}``: 400 for a bad user id, limit or cursor, 404 for an
unknown path, 405 for a method other than GET, 421 for a foreign Host
header, 503 when neither cluster (or the app data) answers. Requests are
logged without query strings; bodies are never logged, tracebacks never sent.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Unpack

from pinlater.kit.cli_output import one_line
from pinlater.kit.httpserver import Answer, HttpServer, ServerOptions, error_answer, json_answer
from tasks.appdata.errors import AppDataError
from tasks.feeds.read import MAX_LIMIT, FeedPage, FeedReader, FeedUnavailable, check_page
from tasks.httpserve import JsonHandler, parse_count, parse_user_id, unique_params

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 50
_FEED_PATH = re.compile(r"/v1/feeds/([^/]+)")
_PARAMS = frozenset({"limit", "cursor"})


def page_json(user_id: int, page: FeedPage) -> dict[str, Any]:
    """The endpoint's answer (``pinlater-feeds read --json`` prints it too).
    Ids also as strings: JavaScript numbers are exact only below 2**53."""
    return {
        "user_id": user_id,
        "user_id_str": str(user_id),
        "pins": [
            {"id": p.id, "id_str": str(p.id), "created_at_ms": p.created_at_ms, "data": p.data} for p in page.pins
        ],
        "next_cursor": page.next_cursor,
        "served_by": page.served_by,
    }


class FeedServer(HttpServer):
    """Serves one ``FeedReader`` and closes it in ``server_close``."""

    def __init__(self, reader: FeedReader,
                 host: str = "127.0.0.1", port: int = 0, **options: Unpack[ServerOptions]) -> None:
        self.reader = reader
        super().__init__("feeds", _Handler, host, port, **options)

    def server_close(self) -> None:
        super().server_close()
        self.reader.close()


class _Handler(JsonHandler):
    server: FeedServer

    def route(self, path: str, pairs: list[tuple[str, str]]) -> Answer:
        match = _FEED_PATH.fullmatch(path)
        if match is None:
            return error_answer(404, f"no such path: {path[:100]}")
        try:
            user_id, cursor, limit = _feed_request(match[1], pairs)
            check_page(cursor, limit)  # the caller's errors, before any ValueError could be ours
        except ValueError as exc:
            return error_answer(400, str(exc))
        try:
            page = self.server.reader.read(user_id, cursor, limit)
        except (FeedUnavailable, AppDataError) as exc:
            what = "feed" if isinstance(exc, FeedUnavailable) else "app data"
            log.warning("feed of %d: %s unavailable: %s", user_id, what, one_line(str(exc)))
            return error_answer(503, f"{what} unavailable: {one_line(str(exc))}")
        except Exception:
            log.exception("feed of %d failed", user_id)
            return error_answer(500, "internal error (see the server's log)")
        return json_answer(200, page_json(user_id, page))


def _feed_request(user_text: str, pairs: list[tuple[str, str]]) -> tuple[int, str | None, int]:
    """User id, cursor and limit of a feed request; ValueError (one line) for a bad one."""
    params = unique_params(pairs, _PARAMS)
    user_id = parse_user_id(user_text)
    limit = parse_count("limit", params["limit"], MAX_LIMIT) if "limit" in params else DEFAULT_LIMIT
    return user_id, params.get("cursor"), limit
