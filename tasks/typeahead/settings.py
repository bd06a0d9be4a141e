"""One typed settings object for the typeahead, from the environment:

| variable | default | meaning |
|---|---|---|
| ``PINLATER_TYPEAHEAD_ORDER`` | ``mutual,following,social,address_book,followers`` | source ranking order |
| ``PINLATER_TYPEAHEAD_TALL_SCAN_LIMIT`` | 100 | rows read per tall source and lookup |
| ``PINLATER_TYPEAHEAD_RENAME_PAGE`` | 1000 | followers (or followees) per rename job |
| ``PINLATER_TYPEAHEAD_HTTP`` | ``127.0.0.1:8091`` | where ``pinlater-typeahead serve`` listens |

Read by ``pinlater.envsettings``: a blank variable is unset, and a bad
value is a ``SettingError`` (``TypeaheadSettingError``) naming its variable
in one line.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pinlater.envsettings import SettingError, parse_address, read, whole_number
from tasks.appdata.mappings import MAX_PAGE
from tasks.hbase.settings import Address
from tasks.typeahead.sources import DEFAULT_ORDER, parse_order

TypeaheadSettingError = SettingError  # the name it had before every setting shared one error type


@dataclass(frozen=True, slots=True)
class TypeaheadSettings:
    source_order: tuple[str, ...] = DEFAULT_ORDER
    tall_scan_limit: int = 100
    rename_page: int = 1000
    http: Address = Address("127.0.0.1", 8091)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TypeaheadSettings:
        env = os.environ if env is None else env
        d = cls()
        return cls(
            source_order=read(env, "PINLATER_TYPEAHEAD_ORDER", parse_order, d.source_order),
            tall_scan_limit=read(env, "PINLATER_TYPEAHEAD_TALL_SCAN_LIMIT", whole_number(1, 100_000),
                                 d.tall_scan_limit),
            rename_page=read(env, "PINLATER_TYPEAHEAD_RENAME_PAGE", whole_number(1, MAX_PAGE), d.rename_page),
            http=read(env, "PINLATER_TYPEAHEAD_HTTP", lambda text: Address(*parse_address(text)), d.http),
        )
