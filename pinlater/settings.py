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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

# SettingError, parse_flag and parse_address are this module's public names
# too; they live in envsettings, which the task packages' settings share.
from pinlater.envsettings import SettingError as SettingError
from pinlater.envsettings import parse_address as parse_address
from pinlater.envsettings import parse_flag as parse_flag
from pinlater.envsettings import positive_number as _positive_float
from pinlater.envsettings import read
from pinlater.envsettings import whole_number as _bounded_int

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
    # Server processes sharing the port (see pinlater.thrift.supervisor).
    server_processes: int = 1
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
    # Jobs in one enqueue call (and ACKs or checkpoints in one call):
    # one call is one script or transaction on its shard, so this bounds how
    # long one caller can hold a shard.
    max_jobs_per_call: int = 1000
    # A body-regex count, scan or delete examines at most this many bodies
    # and runs at most this long (reading pages included); past either a
    # count or delete fails with RegexBudgetExceeded, a scan returns its page
    # so far and a continuation. Measured: ~55,000 bodies/s on Redis and
    # MySQL, so the two bounds are about equal for small bodies.
    regex_max_bodies: int = 100_000
    regex_budget_s: float = 2.0
    # Thrift server connection and memory caps (see pinlater.thrift.server).
    server_max_connections: int = 1024
    server_max_connections_per_client: int = 64
    server_max_buffered_bytes: int = 256 * 1024 * 1024
    server_frame_timeout_s: float = 30.0
    server_idle_timeout_s: float = 600.0
    # Merge concurrent enqueues and same-source dequeues of a queue in a server
    # process into one shard call each (see pinlater.thrift.coalesce).
    server_coalesce: bool = True
    # ACKs too (of different callers, into one guarded UPDATE or script per
    # shard). Off by default: with 12 clients on MySQL, merged ACKs cost the
    # server 2.8x the CPU per dequeue+ACK (likely row locks of the merged UPDATE
    # against concurrent claims; not confirmed), for a gain within noise on Redis.
    server_coalesce_acks: bool = False

    @property
    def resolved_control_url(self) -> str:
        return self.control_url or self.shards[0].url

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Raises SettingError naming the variable at fault."""
        env = os.environ if env is None else env
        kwargs: dict[str, object] = {}
        try:
            kwargs["shards"] = parse_shards(env.get("PINLATER_SHARDS", DEFAULT_SHARDS))
        except ValueError as exc:
            raise SettingError("PINLATER_SHARDS", str(exc)) from None
        if env.get("PINLATER_CONTROL_URL"):
            kwargs["control_url"] = env["PINLATER_CONTROL_URL"]
        if env.get("PINLATER_ADMIN_SECRET_SHA256"):
            kwargs["admin_secret_sha256"] = env["PINLATER_ADMIN_SECRET_SHA256"].lower()
        elif env.get("PINLATER_ADMIN_SECRET"):
            kwargs["admin_secret_sha256"] = hash_secret(env["PINLATER_ADMIN_SECRET"])
        if env.get("PINLATER_DASHBOARD_TOKEN_SHA256"):
            kwargs["dashboard_token_sha256"] = env["PINLATER_DASHBOARD_TOKEN_SHA256"].lower()
        elif env.get("PINLATER_DASHBOARD_TOKEN"):
            kwargs["dashboard_token_sha256"] = hash_secret(env["PINLATER_DASHBOARD_TOKEN"])
        for name, var, parse in _FROM_ENV:
            value = read(env, var, parse, None)
            if value is not None:
                kwargs[name] = value
        if env.get("PINLATER_SERVERS"):
            servers = tuple(s.strip() for s in env["PINLATER_SERVERS"].split(",") if s.strip())
            for server in servers:
                try:
                    parse_address(server)
                except ValueError as exc:
                    raise SettingError("PINLATER_SERVERS", str(exc)) from None
            kwargs["servers"] = servers
        return cls(**kwargs)  # type: ignore[arg-type]


def _text(text: str) -> str:
    return text.strip()


_PORT = _bounded_int(0, 65535)
MAX_SERVER_PROCESSES = 64
parse_server_processes = _bounded_int(1, MAX_SERVER_PROCESSES)
_FROM_ENV: tuple[tuple[str, str, Callable[[str], object]], ...] = (
    ("max_body_bytes", "PINLATER_MAX_BODY_BYTES", _bounded_int(1, 64 * 1024 * 1024)),
    ("default_priorities", "PINLATER_DEFAULT_PRIORITIES", _bounded_int(1, 100)),
    ("config_ttl_s", "PINLATER_CONFIG_TTL_S", _positive_float(3600)),
    ("dashboard_protect_reads", "PINLATER_DASHBOARD_PROTECT_READS", parse_flag),
    ("dashboard_host", "PINLATER_DASHBOARD_HOST", _text),
    ("dashboard_port", "PINLATER_DASHBOARD_PORT", _PORT),
    ("flower_url", "PINLATER_FLOWER_URL", _text),
    ("server_host", "PINLATER_SERVER_HOST", _text),
    ("server_port", "PINLATER_SERVER_PORT", _PORT),
    ("metrics_port", "PINLATER_METRICS_PORT", _PORT),
    ("server_processes", "PINLATER_SERVER_PROCESSES", parse_server_processes),
    ("client_timeout_s", "PINLATER_CLIENT_TIMEOUT_S", _positive_float(3600)),
    ("idempotency_window_ms", "PINLATER_IDEMPOTENCY_WINDOW_MS", _bounded_int(1, 30 * 86_400_000)),
    ("max_jobs_per_call", "PINLATER_MAX_JOBS_PER_CALL", _bounded_int(1, 100_000)),
    ("regex_max_bodies", "PINLATER_REGEX_MAX_BODIES", _bounded_int(1, 100_000_000)),
    ("regex_budget_s", "PINLATER_REGEX_BUDGET_S", _positive_float(3600)),
    ("server_max_connections", "PINLATER_SERVER_MAX_CONNECTIONS", _bounded_int(1, 100_000)),
    ("server_max_connections_per_client", "PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT", _bounded_int(1, 100_000)),
    ("server_max_buffered_bytes", "PINLATER_SERVER_MAX_BUFFERED_BYTES", _bounded_int(1024 * 1024, 2**40)),
    ("server_frame_timeout_s", "PINLATER_SERVER_FRAME_TIMEOUT_S", _positive_float(3600)),
    ("server_idle_timeout_s", "PINLATER_SERVER_IDLE_TIMEOUT_S", _positive_float(86_400)),
    ("server_coalesce", "PINLATER_SERVER_COALESCE", parse_flag),
    ("server_coalesce_acks", "PINLATER_SERVER_COALESCE_ACKS", parse_flag),
)

