"""A tiny HTTP client for the dashboard tests (stdlib only)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from tests.dashboards.support import TOKEN


def call(
    url: str,
    body: object | None = None,
    *,
    token: str | None = None,
    operator: str | None = "test-operator",
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> tuple[int, Any]:
    """GET (or POST when ``body``/``raw`` is given); (status, decoded JSON or text)."""
    h = dict(headers or {})
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
        h.setdefault("Content-Type", "application/json")
    if data is not None and operator is not None:
        h.setdefault("X-PinLater-Operator", operator)
    if token is not None:
        h["X-PinLater-Token"] = token
    request = urllib.request.Request(url, data=data, headers=h, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text, ctype = response.status, response.read().decode(), response.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        status, text, ctype = exc.code, exc.read().decode(), exc.headers["Content-Type"]
    return status, json.loads(text) if ctype and ctype.startswith("application/json") else text


def control(base: str, queue: str, action: str, body: object | None = None, **kw: Any) -> tuple[int, Any]:
    kw.setdefault("token", TOKEN)
    return call(f"{base}/api/queues/{queue}/{action}", {} if body is None else body, **kw)
