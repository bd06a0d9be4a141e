"""One typed settings object for the typeahead, from the environment:

| variable | default | meaning |
|---|---|---|
| ``PINLATER_TYPEAHEAD_ORDER`` | ``mutual,following,social,address_book,followers`` | source ranking order |
| ``PINLATER_TYPEAHEAD_TALL_SCAN_LIMIT`` | 100 | rows read per tall source and lookup |
| ``PINLATER_TYPEAHEAD_RENAME_PAGE`` | 1000 | followers (or followees) per rename job |
| ``PINLATER_TYPEAHEAD_HTTP`` | ``127.0.0.1:8091`` | where ``pinlater-typeahead serve`` listens |

A bad value is a ``TypeaheadSettingError`` naming its variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from tasks.appdata.mappings import MAX_PAGE
from tasks.errors import SettingError
from tasks.hbase.settings import Address
from tasks.typeahead.sources import DEFAULT_ORDER, UnknownSource, parse_order


class TypeaheadSettingError(SettingError):
    """A PINLATER_TYPEAHEAD_* variable has a value we cannot use."""


@dataclass(frozen=True, slots=True)
class TypeaheadSettings:
    source_order: tuple[str, ...] = DEFAULT_ORDER
    tall_scan_limit: int = 100
    rename_page: int = 1000
    http: Address = Address("127.0.0.1", 8091)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TypeaheadSettings:
        env = os.environ if env is None else env
        default = cls()

        def text(name: str) -> str:
            return env.get(f"PINLATER_TYPEAHEAD_{name}", "").strip()

        def whole(name: str, value: int, low: int, high: int) -> int:
            raw = text(name)
            if not raw:
                return value
            if not raw.isdigit() or not low <= int(raw) <= high:
                problem = f"must be a whole number {low} to {high}, got {raw[:40]!r}"
                raise TypeaheadSettingError(f"PINLATER_TYPEAHEAD_{name}", problem)
            return int(raw)

        order = default.source_order
        if text("ORDER"):
            try:
                order = parse_order(text("ORDER"))
            except UnknownSource as exc:
                raise TypeaheadSettingError("PINLATER_TYPEAHEAD_ORDER", str(exc)) from None
        http = default.http
        if text("HTTP"):
            try:
                http = Address.parse(text("HTTP"), "PINLATER_TYPEAHEAD_HTTP")
            except ValueError as exc:
                raise TypeaheadSettingError("PINLATER_TYPEAHEAD_HTTP", str(exc)) from None
        return cls(
            source_order=order,
            tall_scan_limit=whole("TALL_SCAN_LIMIT", default.tall_scan_limit, 1, 100_000),
            rename_page=whole("RENAME_PAGE", default.rename_page, 1, MAX_PAGE),
            http=http,
        )
