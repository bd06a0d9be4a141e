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

from pinlater.kit.envsettings import Setting, parse_flag, plain_text, read_fields, whole_number
from pinlater.kit.tls import ServerTls, server_tls_of
from pinlater.settings import MAX_SERVER_PROCESSES, parse_server_processes
from tasks.appdata.mappings import MAX_PAGE
from tasks.hbase.settings import Address
from tasks.typeahead.sources import DEFAULT_ORDER, parse_order


@dataclass(frozen=True, slots=True)
class TypeaheadSettings:
    source_order: tuple[str, ...] = DEFAULT_ORDER
    tall_scan_limit: int = 100
    standby_after_ms: int = 250
    rename_page: int = 1000
    account_page: int = 50
    account_cache: int = 100_000
    account_hit_ttl_ms: int = 60_000
    account_miss_ttl_ms: int = 5_000
    second_followees: int = 200
    second_per_followee: int = 100
    second_cap: int = 50
    second_page: int = 100
    http: Address = Address("127.0.0.1", 8091)
    thrift: Address = Address("127.0.0.1", 9092)
    thrift_metrics_port: int = 9093
    thrift_tls_cert: str = ""
    thrift_tls_key: str = ""
    thrift_tls_client_ca: str = ""
    thrift_roles: str = ""
    thrift_insecure: bool = False
    thrift_processes: int = 1
    service: Address | None = None

    @property
    def thrift_tls(self) -> ServerTls | None:
        """The Contacts Service's TLS files, or None for plain TCP (SettingError if incomplete)."""
        return server_tls_of("PINLATER_TYPEAHEAD_THRIFT", "PINLATER_TYPEAHEAD_THRIFT_ROLES", self.thrift_tls_cert,
                             self.thrift_tls_key, self.thrift_tls_client_ca, self.thrift_roles)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TypeaheadSettings:
        """Raises SettingError naming the variable at fault."""
        return cls(**read_fields(os.environ if env is None else env, SETTINGS))


SETTINGS: tuple[Setting, ...] = (
    Setting("PINLATER_TYPEAHEAD_ORDER", "source_order", parse_order, ",".join(DEFAULT_ORDER),
            "source ranking order, each known source once"),
    Setting("PINLATER_TYPEAHEAD_TALL_SCAN_LIMIT", "tall_scan_limit", whole_number(1, 100_000), "100",
            "rows read per tall source and lookup"),
    Setting("PINLATER_TYPEAHEAD_STANDBY_AFTER_MS", "standby_after_ms", whole_number(0, 60_000), "250",
            "ms a lookup waits on the primary cluster before it asks the standby as well, the first answer "
            "winning (0: the standby only once the primary has failed)"),
    Setting("PINLATER_TYPEAHEAD_RENAME_PAGE", "rename_page", whole_number(1, MAX_PAGE), "1000",
            "followers (or followees) per rename job"),
    Setting("PINLATER_TYPEAHEAD_ACCOUNT_PAGE", "account_page", whole_number(1, MAX_PAGE), "50",
            "imports naming a linked or unlinked account per fix-up job (each import is read whole)"),
    Setting("PINLATER_TYPEAHEAD_ACCOUNT_CACHE", "account_cache", whole_number(0, 10_000_000), "100000",
            "id lookups (email or social id to user) a process keeps, the least recently used going first (0: none)"),
    Setting("PINLATER_TYPEAHEAD_ACCOUNT_HIT_TTL_MS", "account_hit_ttl_ms", whole_number(0, 86_400_000), "60000",
            "how long a found id lookup is kept, in ms"),
    Setting("PINLATER_TYPEAHEAD_ACCOUNT_MISS_TTL_MS", "account_miss_ttl_ms", whole_number(0, 86_400_000), "5000",
            "how long an id lookup that found no user is kept, in ms"),
    Setting("PINLATER_TYPEAHEAD_SECOND_FOLLOWEES", "second_followees", whole_number(1, 1000), "200",
            "an owner's newest followees whose own follows make its second_degree contacts"),
    Setting("PINLATER_TYPEAHEAD_SECOND_PER_FOLLOWEE", "second_per_followee", whole_number(1, 1000), "100",
            "each of those followees' newest follows counted"),
    Setting("PINLATER_TYPEAHEAD_SECOND_CAP", "second_cap", whole_number(1, 1000), "50",
            "second_degree contacts kept per owner, the most shared first"),
    Setting("PINLATER_TYPEAHEAD_SECOND_PAGE", "second_page", whole_number(1, 1000), "100",
            "followers whose second_degree contacts one job recomputes after a follow or unfollow"),
    Setting("PINLATER_TYPEAHEAD_HTTP", "http", Address.parse, "127.0.0.1:8091",
            "where `pinlater-typeahead serve` listens (`--host`, `--port` override its halves)"),
    Setting("PINLATER_TYPEAHEAD_THRIFT", "thrift", Address.parse, "127.0.0.1:9092",
            "where the Contacts Service (`pinlater-typeahead serve-thrift`) listens (`--host`, `--port` override "
            "its halves)"),
    Setting("PINLATER_TYPEAHEAD_THRIFT_METRICS_PORT", "thrift_metrics_port", whole_number(0, 65535), "9093",
            "the Contacts Service's `/metrics` and `/stats.json` port, on its host (0: none)"),
    Setting("PINLATER_TYPEAHEAD_THRIFT_TLS_CERT", "thrift_tls_cert", plain_text, "",
            "the Contacts Service's certificate chain (PEM); unset: plain TCP"),
    Setting("PINLATER_TYPEAHEAD_THRIFT_TLS_KEY", "thrift_tls_key", plain_text, "",
            "its private key (PEM; default: in the certificate file)"),
    Setting("PINLATER_TYPEAHEAD_THRIFT_TLS_CLIENT_CA", "thrift_tls_client_ca", plain_text, "",
            "CA file whose client certificates the Contacts Service requires; unset: any client"),
    Setting("PINLATER_TYPEAHEAD_THRIFT_ROLES", "thrift_roles", plain_text, "",
            "roles file of the Contacts Service's callers (`reader`: lookups); needs the client CA"),
    Setting("PINLATER_TYPEAHEAD_THRIFT_INSECURE", "thrift_insecure", parse_flag, "no",
            "let the Contacts Service listen on an address other than loopback without client certificates"),
    Setting("PINLATER_TYPEAHEAD_THRIFT_PROCESSES", "thrift_processes", parse_server_processes, "1",
            f"Contacts Service processes sharing its port (1 to {MAX_SERVER_PROCESSES}; `--processes` overrides)"),
    Setting("PINLATER_TYPEAHEAD_SERVICE", "service", Address.parse, "",
            "the Contacts Service the typeahead's jobs write the index through (HOST:PORT, with the "
            "PINLATER_CLIENT_TLS_* certificate); unset: in the worker's own process"),
)
