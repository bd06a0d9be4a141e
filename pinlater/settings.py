"""One typed settings object for the whole job service.

Every value can come from the environment (``Settings.from_env``), so a
process is configured without code: ``PINLATER_SHARDS``,
``PINLATER_CONTROL_URL`` and the rest below.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_SHARDS = "r1=redis://127.0.0.1:16379/0"
_SHARD_ID = re.compile(r"^[A-Za-z0-9]+$")


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """``id`` appears in descriptors (``QUEUE:sID:pN:LOCALID``), so it must
    never change once jobs exist. ``url``: redis://, mysql:// or memory://."""

    id: str
    url: str

    def __post_init__(self) -> None:
        if not _SHARD_ID.match(self.id):
            raise ValueError(f"shard id {self.id!r} must be letters and digits only")
        scheme = self.url.split("://", 1)[0]
        if scheme not in ("redis", "rediss", "mysql", "memory"):
            raise ValueError(f"shard {self.id}: unsupported URL scheme {scheme!r}")


def parse_shards(text: str) -> tuple[ShardSpec, ...]:
    """``"r1=redis://h:6379/0,m1=mysql://u:p@h:3306/db"`` -> specs."""
    specs: list[ShardSpec] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise ValueError(f"shard entry {part!r} must look like ID=URL")
        shard_id, url = part.split("=", 1)
        specs.append(ShardSpec(shard_id.strip(), url.strip()))
    if not specs:
        raise ValueError("at least one shard is required")
    ids = [s.id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate shard ids in {ids}")
    return tuple(specs)


def default_source() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def parse_flag(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a yes/no flag (1, true, yes, on / 0, false, no, off), got {text!r}")


@dataclass(frozen=True, slots=True)
class Settings:
    shards: tuple[ShardSpec, ...] = field(default_factory=lambda: parse_shards(DEFAULT_SHARDS))
    # Where queue configs and rate buckets live; the first shard by default.
    control_url: str | None = None
    max_body_bytes: int = 1024 * 1024
    default_priorities: int = 3
    # How long a process trusts its cached copy of a queue's config.
    config_ttl_s: float = 1.0
    health_probe_interval_s: float = 1.0
    # Share of the rate a token bucket may hold: bursts stay small.
    rate_burst_s: float = 0.1
    # sha256 hex of the secret that deleteQueue requires; None refuses all.
    admin_secret_sha256: str | None = None
    socket_timeout_s: float = 5.0
    # The Thrift server (`pinlater server`) and its metrics endpoint.
    server_host: str = "127.0.0.1"
    server_port: int = 9010
    metrics_port: int = 9011
    # "host:port" of Thrift servers: when set, connect() returns the Thrift client.
    servers: tuple[str, ...] = ()
    client_timeout_s: float = 10.0
    # A repeated enqueue with the same idempotency key within this window
    # returns the first enqueue's descriptors.
    idempotency_window_ms: int = 600_000
    # The operators' dashboard (`pinlater dashboard`).
    dashboard_host: str = "127.0.0.1"
    dashboard_port: int = 8080
    # sha256 hex of the operator token every dashboard control needs; None
    # (no PINLATER_DASHBOARD_TOKEN) refuses every control. Never defaulted.
    dashboard_token_sha256: str | None = None
    # Ask for the token on the read-only views (JSON API, /metrics) too.
    dashboard_protect_reads: bool = False
    flower_url: str = "http://127.0.0.1:5555"

    @property
    def resolved_control_url(self) -> str:
        return self.control_url or self.shards[0].url

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        kwargs: dict[str, object] = {"shards": parse_shards(env.get("PINLATER_SHARDS", DEFAULT_SHARDS))}
        if env.get("PINLATER_CONTROL_URL"):
            kwargs["control_url"] = env["PINLATER_CONTROL_URL"]
        if env.get("PINLATER_MAX_BODY_BYTES"):
            kwargs["max_body_bytes"] = int(env["PINLATER_MAX_BODY_BYTES"])
        if env.get("PINLATER_DEFAULT_PRIORITIES"):
            kwargs["default_priorities"] = int(env["PINLATER_DEFAULT_PRIORITIES"])
        if env.get("PINLATER_CONFIG_TTL_S"):
            kwargs["config_ttl_s"] = float(env["PINLATER_CONFIG_TTL_S"])
        if env.get("PINLATER_ADMIN_SECRET_SHA256"):
            kwargs["admin_secret_sha256"] = env["PINLATER_ADMIN_SECRET_SHA256"].lower()
        elif env.get("PINLATER_ADMIN_SECRET"):
            kwargs["admin_secret_sha256"] = hash_secret(env["PINLATER_ADMIN_SECRET"])
        if env.get("PINLATER_DASHBOARD_TOKEN_SHA256"):
            kwargs["dashboard_token_sha256"] = env["PINLATER_DASHBOARD_TOKEN_SHA256"].lower()
        elif env.get("PINLATER_DASHBOARD_TOKEN"):
            kwargs["dashboard_token_sha256"] = hash_secret(env["PINLATER_DASHBOARD_TOKEN"])
        if env.get("PINLATER_DASHBOARD_PROTECT_READS"):
            kwargs["dashboard_protect_reads"] = parse_flag(env["PINLATER_DASHBOARD_PROTECT_READS"])
        for name, var, kind in (
            ("dashboard_host", "PINLATER_DASHBOARD_HOST", str),
            ("dashboard_port", "PINLATER_DASHBOARD_PORT", int),
            ("flower_url", "PINLATER_FLOWER_URL", str),
            ("server_host", "PINLATER_SERVER_HOST", str),
            ("server_port", "PINLATER_SERVER_PORT", int),
            ("metrics_port", "PINLATER_METRICS_PORT", int),
            ("client_timeout_s", "PINLATER_CLIENT_TIMEOUT_S", float),
            ("idempotency_window_ms", "PINLATER_IDEMPOTENCY_WINDOW_MS", int),
        ):
            if env.get(var):
                kwargs[name] = kind(env[var])
        if env.get("PINLATER_SERVERS"):
            kwargs["servers"] = tuple(s.strip() for s in env["PINLATER_SERVERS"].split(",") if s.strip())
        return cls(**kwargs)  # type: ignore[arg-type]
