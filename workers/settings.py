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
from dataclasses import dataclass, field
from typing import Any

from pinlater.kit.envsettings import (
    Setting,
    comma_separated,
    plain_text,
    positive_number,
    read,
    read_fields,
    text_matching,
    url,
    whole_number,
)
from pinlater.settings import Settings

DEFAULT_BUS_URL = "redis://127.0.0.1:16379/0"
# Celery's result backend: results of the tasks that keep them (``ignore_result=False``).
DEFAULT_RESULT_URL = "redis://127.0.0.1:16379/2"
DEFAULT_RESULT_EXPIRES_S = 86_400
DEFAULT_BUS_PREFIX = "plk:"


@dataclass(frozen=True, slots=True)
class TransportSettings:
    pinlater: Settings
    # Redis for broadcast traffic (events, remote control, replies) and
    # wake-ups. Pub/sub is not scoped by database, so apps sharing a Redis
    # are kept apart by ``bus_prefix``.
    bus_url: str = field(default=DEFAULT_BUS_URL, repr=False)  # may hold a password
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
        """Raises SettingError naming the variable, or the transport option, at fault."""
        options = dict(options or {})
        env = dict(os.environ if env is None else env)
        env.update({str(k): str(v) for k, v in (options.get("pinlater_env") or {}).items()})
        fields = read_fields(env, SETTINGS)
        for option, setting in _OPTIONS.items():
            if options.get(option) is not None:  # read as its variable would be, but named as the option
                label = f"broker_transport_options[{option!r}]"
                fields[setting.field] = read({label: str(options[option])}, label, setting.parse, None)
        return cls(pinlater=Settings.from_env(env), **fields)


# Task modules are dotted Python names.
parse_imports = comma_separated(text_matching(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*", "a dotted module name"))
SETTINGS: tuple[Setting, ...] = (
    Setting("PINLATER_BUS_URL", "bus_url", url(("redis", "rediss")), DEFAULT_BUS_URL,
            "Redis for events, remote control, replies and wake-ups (transport option bus_url)"),
    Setting("PINLATER_BUS_PREFIX", "bus_prefix", plain_text, DEFAULT_BUS_PREFIX,
            "prefix of the bus's channels and keys: keeps apart apps sharing a Redis (option bus_prefix)"),
    Setting("PINLATER_POLL_INTERVAL_S", "poll_interval_s", positive_number(3600), "1",
            "slow poll of each consumed queue, in seconds: delayed jobs coming due, retries, raw enqueues "
            "(option poll_interval)"),
    Setting("PINLATER_MAX_BATCH", "max_batch", whole_number(1, 100_000), "100",
            "largest claim per dequeue call (option max_batch)"),
    Setting("PINLATER_CELERY_IMPORTS", "", parse_imports, "",
            "comma-separated task modules the workers import in place of the installed apps' (unset: every "
            "app's, from its manifest; workers.builtin_tasks always)"),
    Setting("PINLATER_RESULT_URL", "", url(("redis", "rediss")), DEFAULT_RESULT_URL,
            "Celery's result backend, for the tasks that keep results (ignore_result=False): AsyncResult.get(), "
            "group results, chords"),
    Setting("PINLATER_RESULT_EXPIRES_S", "", whole_number(1, 10 * 365 * 86_400), str(DEFAULT_RESULT_EXPIRES_S),
            "how long a kept task result stays in the result backend, in seconds"),
    Setting("PINLATER_FLOWER_AUTH_FILE", "", plain_text, "",
            "file of user:password lines, Flower's basic auth (python -m workers.flower); unset, and no "
            "FLOWER_BASIC_AUTH, Flower does not start"),
)
_OPTIONS = {option: next(s for s in SETTINGS if s.field == field)
            for option, field in (("bus_url", "bus_url"), ("bus_prefix", "bus_prefix"),
                                  ("poll_interval", "poll_interval_s"), ("max_batch", "max_batch"))}


def app_setting(variable: str, env: Mapping[str, str] | None = None) -> Any:
    """One of ``SETTINGS`` that the Celery app reads itself (no field), from
    ``env`` (the process's by default), or its default."""
    setting = next(s for s in SETTINGS if s.variable == variable)
    return read(os.environ if env is None else env, variable, setting.parse, setting.parse(setting.default))
