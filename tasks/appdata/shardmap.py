"""The shard map (as in Pinterest's MySQL sharding): ranges of shard ids to MySQL servers, each
server holding one database per shard (``<prefix>s00042``), so shards move
between servers without their ids changing. Only this config says where a
shard lives; ids never name a host.

Text form, as in ``PINLATER_APPDATA_SHARDS``::

    0-2047=mysql://user:pass@db1:3306, 2048-4095=mysql://user:pass@db2:3306?ssl_ca=/etc/ca.pem

A single shard is ``N=URL``. Ranges may not overlap; gaps are allowed (a
shard in a gap is unknown: ``UnknownShard``).
"""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass, field

from pinlater.kit.tls import ClientTls
from pinlater.stores.mysql.public import MySQLUrl
from tasks.appdata.errors import UnknownShard
from tasks.appdata.ids import MAX_SHARD

_PREFIX = re.compile(r"[A-Za-z0-9_]{1,50}")
_RANGE = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")  # ASCII: \d takes other scripts' digits
DEFAULT_PREFIX = "appdata_"


@dataclass(frozen=True, slots=True)
class Server:
    """A MySQL server (no database: it holds many shard databases)."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    # The CA (and client certificate) of a TLS connection; None: plain TCP.
    tls: ClientTls | None = None

    @classmethod
    def parse(cls, url: str) -> Server:
        """``mysql://user:password@host:port[?ssl_ca=...&ssl_cert=...&ssl_key=...]``
        (no database path), read by the job service's own MySQL URL parser."""
        parsed = MySQLUrl.parse(url)
        if parsed.database:
            raise ValueError("a server URL names no database (each shard has its own): drop the path")
        if not parsed.host:
            raise ValueError("a server URL needs a host")
        return cls(parsed.host, parsed.port, parsed.user, parsed.password, parsed.tls)

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class ShardRange:
    first: int
    last: int
    server: Server

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last <= MAX_SHARD:
            raise ValueError(f"shard range {self.first}-{self.last} must satisfy 0 <= first <= last <= {MAX_SHARD}")


@dataclass(frozen=True, slots=True)
class ShardLocation:
    shard: int
    server: Server
    database: str


@dataclass(frozen=True, slots=True)
class ShardMap:
    ranges: tuple[ShardRange, ...]
    database_prefix: str = DEFAULT_PREFIX
    _firsts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.ranges:
            raise ValueError("the shard map needs at least one range")
        if not _PREFIX.fullmatch(self.database_prefix):
            raise ValueError(f"database prefix {self.database_prefix!r} must be 1-50 of [A-Za-z0-9_]")
        ordered = tuple(sorted(self.ranges, key=lambda r: r.first))
        for before, after in itertools.pairwise(ordered):
            if after.first <= before.last:
                raise ValueError(
                    f"shard ranges {before.first}-{before.last} and {after.first}-{after.last} overlap"
                )
        object.__setattr__(self, "ranges", ordered)
        object.__setattr__(self, "_firsts", tuple(r.first for r in ordered))

    @classmethod
    def parse(cls, text: str, database_prefix: str = DEFAULT_PREFIX) -> ShardMap:
        ranges: list[ShardRange] = []
        for entry in text.split(","):
            entry = entry.strip()
            if not entry:
                continue
            if "=" not in entry:
                # Not shown: it may be a URL with a password.
                raise ValueError(f"entry {len(ranges) + 1} must look like FIRST-LAST=mysql://user:pass@host:port")
            span, url = (part.strip() for part in entry.split("=", 1))
            match = _RANGE.fullmatch(span)
            if not match:
                raise ValueError(f"{span!r} is not a shard range like 0-511 or a single shard like 7")
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) is not None else first
            try:
                ranges.append(ShardRange(first, last, Server.parse(url)))
            except ValueError as exc:
                raise ValueError(f"range {span}: {exc}") from None
        return cls(tuple(ranges), database_prefix)

    def database(self, shard: int) -> str:
        return f"{self.database_prefix}s{shard:05d}"

    def locate(self, shard: int) -> ShardLocation:
        """Where shard ``shard`` lives; UnknownShard if no range holds it."""
        at = bisect.bisect_right(self._firsts, shard) - 1
        if at >= 0 and self.ranges[at].first <= shard <= self.ranges[at].last:
            return ShardLocation(shard, self.ranges[at].server, self.database(shard))
        raise UnknownShard(f"shard {shard} is in no range of the shard map")

    @property
    def shards(self) -> tuple[int, ...]:
        """Every mapped shard id, ascending."""
        return tuple(s for r in self.ranges for s in range(r.first, r.last + 1))

    @property
    def servers(self) -> tuple[Server, ...]:
        """Distinct servers, in range order."""
        return tuple(dict.fromkeys(r.server for r in self.ranges))
