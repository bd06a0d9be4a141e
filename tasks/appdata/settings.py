"""One typed settings object for the app-data layer, from the
``PINLATER_APPDATA_*`` variables of ``SETTINGS`` below (listed, with every
other package's, in docs/configuration.md). A bad value is a one-line
``SettingError`` naming its variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from pinlater.kit.envsettings import Setting, positive_number, read, text_matching
from tasks.appdata.shardmap import DEFAULT_PREFIX, ShardMap

DEFAULT_SHARDS = "0-3=mysql://pinlater:pinlater@127.0.0.1:13306"
SHARDS_VAR = "PINLATER_APPDATA_SHARDS"
PREFIX_VAR = "PINLATER_APPDATA_DATABASE_PREFIX"
TIMEOUT_VAR = "PINLATER_APPDATA_SOCKET_TIMEOUT_S"


@dataclass(frozen=True, slots=True)
class AppDataSettings:
    shard_map: ShardMap = field(default_factory=lambda: ShardMap.parse(DEFAULT_SHARDS))
    socket_timeout_s: float = 5.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AppDataSettings:
        """Raises SettingError naming the variable at fault."""
        env = os.environ if env is None else env
        # The shard map names its databases with the prefix: read it first.
        prefix = read(env, PREFIX_VAR, _prefix, DEFAULT_PREFIX)
        return cls(
            shard_map=read(env, SHARDS_VAR, lambda text: ShardMap.parse(text, prefix),
                           ShardMap.parse(DEFAULT_SHARDS, prefix)),
            socket_timeout_s=read(env, TIMEOUT_VAR, _TIMEOUT, 5.0),
        )


_TIMEOUT = positive_number(3600)
# What ShardMap takes as a prefix, refused here in words that never repeat
# a long value in full.
_prefix = text_matching(r"[A-Za-z0-9_]{1,50}", "1 to 50 of [A-Za-z0-9_]")
SETTINGS: tuple[Setting, ...] = (
    Setting(SHARDS_VAR, "shard_map", ShardMap.parse, DEFAULT_SHARDS,
            "the shard map: FIRST-LAST=mysql://user:password@host:port,... (one database per shard)"),
    Setting(PREFIX_VAR, "", _prefix, DEFAULT_PREFIX,
            "shard N lives in database <prefix>s<N:05d> (1 to 50 of A-Z, a-z, 0-9, _)"),
    Setting(TIMEOUT_VAR, "socket_timeout_s", _TIMEOUT, "5",
            "connect, read and write timeout per statement, in seconds"),
)
