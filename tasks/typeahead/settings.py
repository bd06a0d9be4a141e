"""One typed settings object for the typeahead, from the
``PINLATER_TYPEAHEAD_*`` variables of ``SETTINGS`` below (listed, with every
other package's, in docs/configuration.md). Read by ``pinlater.kit.envsettings``:
a blank variable is unset, and a bad value is a one-line ``SettingError``
naming its variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pinlater.kit.envsettings import Setting, read_fields, whole_number
from tasks.appdata.mappings import MAX_PAGE
from tasks.hbase.settings import Address
from tasks.typeahead.sources import DEFAULT_ORDER, parse_order


@dataclass(frozen=True, slots=True)
class TypeaheadSettings:
    source_order: tuple[str, ...] = DEFAULT_ORDER
    tall_scan_limit: int = 100
    rename_page: int = 1000
    http: Address = Address("127.0.0.1", 8091)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TypeaheadSettings:
        """Raises SettingError naming the variable at fault."""
        return cls(**read_fields(os.environ if env is None else env, SETTINGS))


SETTINGS: tuple[Setting, ...] = (
    Setting("PINLATER_TYPEAHEAD_ORDER", "source_order", parse_order, ",".join(DEFAULT_ORDER),
            "source ranking order, each known source once"),
    Setting("PINLATER_TYPEAHEAD_TALL_SCAN_LIMIT", "tall_scan_limit", whole_number(1, 100_000), "100",
            "rows read per tall source and lookup"),
    Setting("PINLATER_TYPEAHEAD_RENAME_PAGE", "rename_page", whole_number(1, MAX_PAGE), "1000",
            "followers (or followees) per rename job"),
    Setting("PINLATER_TYPEAHEAD_HTTP", "http", Address.parse, "127.0.0.1:8091",
            "where `pinlater-typeahead serve` listens (`--host`, `--port` override its halves)"),
)
