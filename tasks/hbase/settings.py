"""Where the two HBase clusters are, and how calls to them are bounded.

Read from the environment (``HBaseSettings.from_env``): the
``PINLATER_HBASE_*`` variables of ``SETTINGS`` below (listed in
docs/configuration.md). The defaults are the clusters ``scripts/services up``
starts; the pool size, timeouts and attempts apply to both servers. A bad
value is a one-line ``SettingError`` naming the variable.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from pinlater.kit.envsettings import (
    Setting,
    parse_address,
    positive_number,
    read_fields,
    text_matching,
    whole_number,
)

DEFAULT_PRIMARY = "127.0.0.1:19090"
DEFAULT_STANDBY = "127.0.0.1:19091"
DEFAULT_PRIMARY_THRIFT2 = "127.0.0.1:19092"
DEFAULT_STANDBY_THRIFT2 = "127.0.0.1:19093"
# The local clusters' web servers with the region servers' JMX: the master's
# in the standalone layout (it hosts the region server), each region
# server's in the distributed one (scripts/hbase, PINLATER_HBASE_LAYOUT).
DEFAULT_PRIMARY_INFO = ("127.0.0.1:16131,127.0.0.1:16132,127.0.0.1:16133"
                        if os.environ.get("PINLATER_HBASE_LAYOUT") == "distributed" else "127.0.0.1:16110")
DEFAULT_STANDBY_INFO = "127.0.0.1:16210"


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str) -> Address:
        """``HOST:PORT`` or ``[v6]:PORT``; a one-line ValueError otherwise."""
        return cls(*parse_address(text))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Addresses:
    """One address or more, comma-separated: every region server of a cluster."""

    items: tuple[Address, ...]

    @classmethod
    def parse(cls, text: str) -> Addresses:
        """``HOST:PORT[,HOST:PORT...]``; a one-line ValueError otherwise."""
        parts = text.split(",")
        if len(parts) > 1024:
            raise ValueError(f"at most 1024 addresses, got {len(parts)}")
        return cls(tuple(Address.parse(part.strip()) for part in parts))

    def __iter__(self) -> Iterator[Address]:
        return iter(self.items)

    def __str__(self) -> str:
        return ",".join(map(str, self.items))


@dataclass(frozen=True, slots=True)
class HBaseSettings:
    primary: Address = Address.parse(DEFAULT_PRIMARY)
    standby: Address = Address.parse(DEFAULT_STANDBY)
    primary_thrift2: Address = Address.parse(DEFAULT_PRIMARY_THRIFT2)
    standby_thrift2: Address = Address.parse(DEFAULT_STANDBY_THRIFT2)
    primary_info: Addresses = Addresses.parse(DEFAULT_PRIMARY_INFO)
    standby_info: Addresses = Addresses.parse(DEFAULT_STANDBY_INFO)
    table_prefix: str = ""
    pool_size: int = 4
    call_timeout_s: float = 10.0
    pool_wait_s: float = 5.0
    attempts: int = 2

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HBaseSettings:
        """Raises SettingError naming the variable at fault."""
        return cls(**read_fields(os.environ if env is None else env, SETTINGS))


SETTINGS: tuple[Setting, ...] = (
    Setting("PINLATER_HBASE_PRIMARY", "primary", Address.parse, DEFAULT_PRIMARY,
            "Thrift1 server of the primary cluster (reads)"),
    Setting("PINLATER_HBASE_STANDBY", "standby", Address.parse, DEFAULT_STANDBY,
            "Thrift1 server of the standby cluster"),
    Setting("PINLATER_HBASE_PRIMARY_THRIFT2", "primary_thrift2", Address.parse, DEFAULT_PRIMARY_THRIFT2,
            "Thrift2 server of the primary (writes, versioned reads, table changes)"),
    Setting("PINLATER_HBASE_STANDBY_THRIFT2", "standby_thrift2", Address.parse, DEFAULT_STANDBY_THRIFT2,
            "Thrift2 server of the standby"),
    Setting("PINLATER_HBASE_PRIMARY_INFO", "primary_info", Addresses.parse, DEFAULT_PRIMARY_INFO,
            "web servers of the primary's region servers, comma-separated (JMX: the feed trimming's counts)"),
    Setting("PINLATER_HBASE_STANDBY_INFO", "standby_info", Addresses.parse, DEFAULT_STANDBY_INFO,
            "web servers of the standby's region servers"),
    Setting("PINLATER_HBASE_TABLE_PREFIX", "table_prefix",
            text_matching(r"[A-Za-z0-9_]+", "letters, digits and _"), "", "prefix of every table name (unset: none)"),
    Setting("PINLATER_HBASE_POOL_SIZE", "pool_size", whole_number(1, 1024), "4",
            "connections per cluster and process"),
    Setting("PINLATER_HBASE_CALL_TIMEOUT_S", "call_timeout_s", positive_number(3600), "10",
            "connect and per-call socket timeout, in seconds"),
    Setting("PINLATER_HBASE_POOL_WAIT_S", "pool_wait_s", positive_number(3600), "5",
            "seconds a call waits for a free pooled connection"),
    Setting("PINLATER_HBASE_ATTEMPTS", "attempts", whole_number(1, 100), "2",
            "tries of a call on a broken connection"),
)
