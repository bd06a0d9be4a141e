"""One typed settings object for the app-data layer, from the environment:

| variable | default | meaning |
|---|---|---|
| ``PINLATER_APPDATA_SHARDS`` | ``0-3=mysql://pinlater:pinlater@127.0.0.1:13306`` | the shard map (see ``shardmap``) |
| ``PINLATER_APPDATA_DATABASE_PREFIX`` | ``appdata_`` | shard N lives in database ``<prefix>s<N:05d>`` |
| ``PINLATER_APPDATA_SOCKET_TIMEOUT_S`` | ``5`` | connect/read/write timeout per statement |
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from tasks.appdata.shardmap import DEFAULT_PREFIX, ShardMap
from tasks.errors import SettingError

DEFAULT_SHARDS = "0-3=mysql://pinlater:pinlater@127.0.0.1:13306"
SHARDS_VAR = "PINLATER_APPDATA_SHARDS"
PREFIX_VAR = "PINLATER_APPDATA_DATABASE_PREFIX"
TIMEOUT_VAR = "PINLATER_APPDATA_SOCKET_TIMEOUT_S"


class AppDataSettingError(SettingError):
    """A PINLATER_APPDATA_* variable has a value we cannot use."""


@dataclass(frozen=True, slots=True)
class AppDataSettings:
    shard_map: ShardMap = field(default_factory=lambda: ShardMap.parse(DEFAULT_SHARDS))
    socket_timeout_s: float = 5.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AppDataSettings:
        env = os.environ if env is None else env
        prefix = env.get(PREFIX_VAR, "").strip() or DEFAULT_PREFIX
        try:
            ShardMap.parse(DEFAULT_SHARDS, prefix)
        except ValueError as exc:
            raise AppDataSettingError(PREFIX_VAR, str(exc)) from None
        try:
            shard_map = ShardMap.parse(env.get(SHARDS_VAR, "").strip() or DEFAULT_SHARDS, prefix)
        except ValueError as exc:
            raise AppDataSettingError(SHARDS_VAR, str(exc)) from None
        timeout = 5.0
        text = env.get(TIMEOUT_VAR, "").strip()
        if text:
            try:
                timeout = float(text)
            except ValueError:
                raise AppDataSettingError(TIMEOUT_VAR, f"expected a number of seconds, got {text!r}") from None
            if not math.isfinite(timeout) or not 0 < timeout <= 3600:
                raise AppDataSettingError(TIMEOUT_VAR, f"must be above 0 and at most 3600, got {text!r}")
        return cls(shard_map=shard_map, socket_timeout_s=timeout)
