"""Job bodies are compact JSON objects: parsing and the checks every body
type shares (a body that is not JSON, not an object, or has keys that are
missing or unknown is refused with one line naming the body type)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def dump(fields: dict[str, Any]) -> str:
    return json.dumps(fields, separators=(",", ":"))


def load(
    text: str | bytes, what: str, required: Iterable[str], optional: Iterable[str], error: type[ValueError]
) -> dict[str, Any]:
    need, allowed = set(required), set(required) | set(optional)
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise error(f"{what}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise error(f"{what}: expected a JSON object, got {type(data).__name__}")
    missing, unknown = need - set(data), set(data) - allowed
    if missing or unknown:
        parts = [f"missing {sorted(missing)}" if missing else "", f"unknown {sorted(unknown)}" if unknown else ""]
        problem = ", ".join(p for p in parts if p)
        raise error(f"{what}: {problem} (keys {sorted(need)}, optional {sorted(allowed - need)})")
    return data
