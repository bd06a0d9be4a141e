"""Where the two HBase clusters are, and how calls to them are bounded.

Read from the environment (``HBaseSettings.from_env``)::

    PINLATER_HBASE_PRIMARY=127.0.0.1:19090     Thrift1 server of the primary (reads)
    PINLATER_HBASE_STANDBY=127.0.0.1:19091     Thrift1 server of the standby
    PINLATER_HBASE_PRIMARY_THRIFT2=127.0.0.1:19092
                                               Thrift2 server of the primary (writes,
                                               versioned reads, table changes)
    PINLATER_HBASE_STANDBY_THRIFT2=127.0.0.1:19093
                                               Thrift2 server of the standby
    PINLATER_HBASE_PRIMARY_INFO=127.0.0.1:16110
                                               web server of the primary's region
                                               server (JMX: the feed trimming's counts)
    PINLATER_HBASE_STANDBY_INFO=127.0.0.1:16210
                                               web server of the standby's
    PINLATER_HBASE_TABLE_PREFIX=               prefix of every table name ("" = none)
    PINLATER_HBASE_POOL_SIZE=4                 connections per cluster and process
    PINLATER_HBASE_CALL_TIMEOUT_S=10           connect and per-call socket timeout
    PINLATER_HBASE_POOL_WAIT_S=5               wait for a free pooled connection
    PINLATER_HBASE_ATTEMPTS=2                  tries of a call on a broken connection

The defaults are the clusters ``scripts/services up`` starts. A value that
is not HOST:PORT or not a number is a one-line ``ValueError`` naming the
variable. The pool size, timeouts and attempts apply to both servers.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_PRIMARY = "127.0.0.1:19090"
DEFAULT_STANDBY = "127.0.0.1:19091"
DEFAULT_PRIMARY_THRIFT2 = "127.0.0.1:19092"
DEFAULT_STANDBY_THRIFT2 = "127.0.0.1:19093"
DEFAULT_PRIMARY_INFO = "127.0.0.1:16110"
DEFAULT_STANDBY_INFO = "127.0.0.1:16210"


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    @classmethod
    def parse(cls, text: str, what: str = "address") -> Address:
        host, sep, port = text.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{what}: expected HOST:PORT, got {text!r}")
        return cls(host.strip("[]"), int(port))

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class HBaseSettings:
    primary: Address = Address.parse(DEFAULT_PRIMARY)
    standby: Address = Address.parse(DEFAULT_STANDBY)
    primary_thrift2: Address = Address.parse(DEFAULT_PRIMARY_THRIFT2)
    standby_thrift2: Address = Address.parse(DEFAULT_STANDBY_THRIFT2)
    primary_info: Address = Address.parse(DEFAULT_PRIMARY_INFO)
    standby_info: Address = Address.parse(DEFAULT_STANDBY_INFO)
    table_prefix: str = ""
    pool_size: int = 4
    call_timeout_s: float = 10.0
    pool_wait_s: float = 5.0
    attempts: int = 2

    def __post_init__(self) -> None:
        if self.pool_size < 1:
            raise ValueError(f"PINLATER_HBASE_POOL_SIZE must be >= 1, got {self.pool_size}")
        if not self.call_timeout_s > 0 or not self.pool_wait_s > 0:
            raise ValueError("PINLATER_HBASE_CALL_TIMEOUT_S and PINLATER_HBASE_POOL_WAIT_S must be > 0")
        if self.attempts < 1:
            raise ValueError(f"PINLATER_HBASE_ATTEMPTS must be >= 1, got {self.attempts}")
        if self.table_prefix and not self.table_prefix.replace("_", "").isalnum():
            raise ValueError(f"PINLATER_HBASE_TABLE_PREFIX must be letters, digits and _, got {self.table_prefix!r}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HBaseSettings:
        env = os.environ if env is None else env

        def number(name: str, default: float) -> float:
            raw = env.get(name, "").strip()
            try:
                return float(raw) if raw else default
            except ValueError:
                raise ValueError(f"{name}: expected a number, got {raw!r}") from None

        def address(name: str, default: str) -> Address:
            return Address.parse(env.get(name) or default, name)

        return cls(
            primary=address("PINLATER_HBASE_PRIMARY", DEFAULT_PRIMARY),
            standby=address("PINLATER_HBASE_STANDBY", DEFAULT_STANDBY),
            primary_thrift2=address("PINLATER_HBASE_PRIMARY_THRIFT2", DEFAULT_PRIMARY_THRIFT2),
            standby_thrift2=address("PINLATER_HBASE_STANDBY_THRIFT2", DEFAULT_STANDBY_THRIFT2),
            primary_info=address("PINLATER_HBASE_PRIMARY_INFO", DEFAULT_PRIMARY_INFO),
            standby_info=address("PINLATER_HBASE_STANDBY_INFO", DEFAULT_STANDBY_INFO),
            table_prefix=env.get("PINLATER_HBASE_TABLE_PREFIX", "").strip(),
            pool_size=int(number("PINLATER_HBASE_POOL_SIZE", 4)),
            call_timeout_s=number("PINLATER_HBASE_CALL_TIMEOUT_S", 10.0),
            pool_wait_s=number("PINLATER_HBASE_POOL_WAIT_S", 5.0),
            attempts=int(number("PINLATER_HBASE_ATTEMPTS", 2)),
        )
