"""Settings of the Celery side, from the broker's transport options and the
environment (transport options win).

The job service itself is configured as everywhere else, by ``PINLATER_*``
variables (``pinlater.settings.Settings.from_env``); a transport option
``pinlater_env`` (a dict of such variables) overrides them for one app, which
is how tests point an app at their own shards without touching the
process environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pinlater.settings import Settings

DEFAULT_BUS_URL = "redis://127.0.0.1:16379/0"
DEFAULT_BUS_PREFIX = "plk:"


@dataclass(frozen=True, slots=True)
class TransportSettings:
    pinlater: Settings
    # Redis for broadcast traffic (events, remote control, replies) and
    # wake-ups. Pub/sub is not scoped by database, so apps sharing a Redis
    # are kept apart by ``bus_prefix``.
    bus_url: str = DEFAULT_BUS_URL
    bus_prefix: str = DEFAULT_BUS_PREFIX
    # Slow poll of each consumed queue: picks up delayed jobs whose run_after
    # came due, retries, and jobs enqueued by non-Celery clients (which send
    # no wake-up). Wake-ups make the latency of ordinary publishes ~1 ms.
    poll_interval_s: float = 1.0
    # Largest claim per dequeue call; the prefetch window usually caps it first.
    max_batch: int = 100
    # How often held-but-unstarted jobs are heartbeated, as a share of the
    # queue's claim timeout.
    heartbeat_share: float = 1 / 3

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None
    ) -> TransportSettings:
        options = dict(options or {})
        env = dict(os.environ if env is None else env)
        env.update({str(k): str(v) for k, v in (options.get("pinlater_env") or {}).items()})
        return cls(
            pinlater=Settings.from_env(env),
            bus_url=str(options.get("bus_url") or env.get("PINLATER_BUS_URL") or DEFAULT_BUS_URL),
            bus_prefix=str(options.get("bus_prefix") or env.get("PINLATER_BUS_PREFIX") or DEFAULT_BUS_PREFIX),
            poll_interval_s=float(options.get("poll_interval") or env.get("PINLATER_POLL_INTERVAL_S") or 1.0),
            max_batch=int(options.get("max_batch") or env.get("PINLATER_MAX_BATCH") or 100),
        )
