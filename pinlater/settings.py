"""One typed settings object for the whole job service.

Every value can come from the environment (``Settings.from_env``), so a
process is configured without code: ``PINLATER_SHARDS``,
``PINLATER_CONTROL_URL`` and the rest of ``SETTINGS`` below (listed in
docs/configuration.md).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pinlater.kit.envsettings import (
    Setting,
    comma_separated,
    plain_text,
    positive_number,
    read_fields,
    url,
    whole_number,
)

# SettingError, parse_flag and parse_address are this module's public names
# too; they live in envsettings, which the task packages' settings share.
from pinlater.kit.envsettings import SettingError as SettingError
from pinlater.kit.envsettings import parse_address as parse_address
from pinlater.kit.envsettings import parse_flag as parse_flag
from pinlater.kit.httplimits import HttpLimits
from pinlater.kit.tls import ClientTls, ServerTls, server_tls_of
from pinlater.kit.urls import USERINFO_PROBLEM, redact, unencoded_userinfo
from pinlater.limits import FRAME_BODIES, MAX_READ_BYTES
from pinlater.stores import kind_of, schemes

DEFAULT_SHARDS = "r1=redis://127.0.0.1:16379/0"
_SHARD_ID = re.compile(r"[A-Za-z0-9]+")


@dataclass(frozen=True, slots=True)
class ShardSpec:
    """``id`` appears in descriptors (``QUEUE:sID:pN:LOCALID``), so it must
    never change once jobs exist. ``url``: redis://, mysql:// or memory://."""

    id: str
    url: str

    def __post_init__(self) -> None:
        if not _SHARD_ID.fullmatch(self.id):
            raise ValueError(f"shard id {self.id!r} must be letters and digits only")
        scheme = self.url.split("://", 1)[0]
        if scheme not in schemes():
            raise ValueError(f"shard {self.id}: unsupported URL scheme {scheme!r}")
        if unencoded_userinfo(self.url):
            raise ValueError(f"shard {self.id}: {USERINFO_PROBLEM}")
        try:
            kind_of(self.url, "shard").check_url(self.url)
        except ValueError as exc:
            raise ValueError(f"shard {self.id}: {exc}") from None

    def __repr__(self) -> str:
        # Settings are logged and end up in tracebacks: never the password.
        return f"ShardSpec(id={self.id!r}, url={redact(self.url)!r})"


def parse_shards(text: str) -> tuple[ShardSpec, ...]:
    """``"r1=redis://h:6379/0,m1=mysql://u:p@h:3306/db"`` -> specs."""
    specs: list[ShardSpec] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:  # not shown: it may be a URL with a password
            raise ValueError(f"shard entry {len(specs) + 1} must look like ID=URL")
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
    # Out of repr: it may hold a password.
    control_url: str | None = field(default=None, repr=False)
    max_body_bytes: int = 1024 * 1024
    default_priorities: int = 3
    # How long a process trusts its cached copy of a queue's config.
    config_ttl_s: float = 1.0
    health_probe_interval_s: float = 1.0
    # Share of the rate a token bucket may hold: bursts stay small.
    rate_burst_s: float = 0.1
    # sha256 hex of the secret that deleteQueue requires; None refuses all.
    admin_secret_sha256: str | None = field(default=None, repr=False)
    # Wrong admin secrets allowed within the window, per caller and per
    # process, before attempts are refused unchecked (pinlater.kit.secret_throttle).
    admin_secret_max_failures: int = 5
    admin_secret_max_failures_all: int = 20
    admin_secret_window_s: float = 60.0
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
    dashboard_token_sha256: str | None = field(default=None, repr=False)
    # Ask for the token on the read-only views (JSON API, /metrics) too.
    dashboard_protect_reads: bool = False
    # Out of repr: it may hold a password (Flower's basic auth).
    flower_url: str = field(default="http://127.0.0.1:5555", repr=False)
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
    # Body bytes one lookup or scan may return (see read_budget_bytes);
    # None: FRAME_BODIES bodies of the largest size.
    max_read_bytes: int | None = None
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
    # TLS of the Thrift server (see pinlater.kit.tls): certificate and key files;
    # a client CA turns on client certificates, and a roles file maps their
    # names to roles (pinlater.thrift.access).
    server_tls_cert: str | None = None
    server_tls_key: str | None = None
    server_tls_client_ca: str | None = None
    server_roles: str | None = None
    # Serve an address other than loopback without client certificates anyway.
    server_insecure: bool = False
    # HTTPS of the small HTTP endpoints (dashboard, feeds, typeahead, metrics).
    http_tls_cert: str | None = None
    http_tls_key: str | None = None
    # What one client may hold of them (see pinlater.kit.httplimits): a request
    # whole within this of its first byte, an idle keep-alive connection
    # kept this long, connections in all and per client address.
    http_request_timeout_s: float = 5.0
    http_idle_timeout_s: float = 30.0
    http_max_connections: int = 128
    http_max_connections_per_client: int = 32
    # TLS of the Thrift client (PINLATER_SERVERS): on when a CA is given.
    client_tls_ca: str | None = None
    client_tls_cert: str | None = None
    client_tls_key: str | None = None

    @property
    def server_tls(self) -> ServerTls | None:
        """The server's TLS files, or None for plain TCP."""
        return server_tls_of("PINLATER_SERVER", "PINLATER_SERVER_ROLES", self.server_tls_cert or "",
                             self.server_tls_key or "", self.server_tls_client_ca or "", self.server_roles or "")

    @property
    def http_tls(self) -> ServerTls | None:
        """The HTTP endpoints' certificate, or None for plain HTTP."""
        if not self.http_tls_cert:
            if self.http_tls_key:
                raise SettingError("PINLATER_HTTP_TLS_KEY", "needs PINLATER_HTTP_TLS_CERT to be set")
            return None
        return ServerTls(self.http_tls_cert, self.http_tls_key or self.http_tls_cert)

    @property
    def http_limits(self) -> HttpLimits:
        """What one client may hold of each HTTP endpoint."""
        return HttpLimits(self.http_request_timeout_s, self.http_idle_timeout_s, self.http_max_connections,
                          self.http_max_connections_per_client)

    @property
    def client_tls(self) -> ClientTls | None:
        """The Thrift client's TLS, or None for plain TCP."""
        if not self.client_tls_ca:
            if self.client_tls_cert or self.client_tls_key:
                raise SettingError("PINLATER_CLIENT_TLS_CERT", "needs PINLATER_CLIENT_TLS_CA, the CA that "
                                   "signed the servers' certificates")
            return None
        return ClientTls(self.client_tls_ca, self.client_tls_cert, self.client_tls_key)

    @property
    def read_budget_bytes(self) -> int:
        """Body bytes one lookup or scan may return: a reply must fit a
        frame the client accepts, and one job's body must always fit."""
        if self.max_read_bytes is None:
            return min(FRAME_BODIES * self.max_body_bytes, MAX_READ_BYTES)
        if self.max_read_bytes < self.max_body_bytes:
            raise SettingError("PINLATER_MAX_READ_BYTES", f"must be at least PINLATER_MAX_BODY_BYTES "
                               f"({self.max_body_bytes}): a lookup must be able to return any one job's body")
        return self.max_read_bytes

    @property
    def resolved_control_url(self) -> str:
        return self.control_url or self.shards[0].url

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Raises SettingError naming the variable at fault."""
        return cls(**read_fields(os.environ if env is None else env, SETTINGS))


def _sha256_hex(text: str) -> str:
    # The text is not repeated: it stands for a secret.
    value = text.strip().lower()
    if not _SHA256.fullmatch(value):
        raise ValueError(f"expected a sha256 as 64 hexadecimal digits, got {len(value)} characters")
    return value


def _address_text(text: str) -> str:
    parse_address(text)
    return text.strip()


_SHA256 = re.compile(r"[0-9a-f]{64}")
_PORT = whole_number(0, 65535)
MAX_SERVER_PROCESSES = 64
parse_server_processes = whole_number(1, MAX_SERVER_PROCESSES)
def _url_without_unencoded_userinfo(schemes: tuple[str, ...]) -> Callable[[str], str]:
    """``url(schemes)``, refusing a user part a driver would cut short
    (a piece of the password would show as the host, port or path)."""
    parse_url = url(schemes)

    def parse(text: str) -> str:
        value = parse_url(text)
        if unencoded_userinfo(value):
            raise ValueError(USERINFO_PROBLEM)
        return value

    return parse


def parse_store_url(text: str) -> str:
    """A URL of a registered store kind (``pinlater.stores``), as its kind
    checks it."""
    value = _url_without_unencoded_userinfo(schemes())(text)
    kind_of(value, "store").check_url(value)
    return value
_D = Settings()
# Every variable of the job service (docs/configuration.md is made from this:
# python -m pinlater.kit.settings_doc). Of a secret and its _SHA256, the _SHA256
# wins: it comes later.
SETTINGS: tuple[Setting, ...] = (
    Setting("PINLATER_SHARDS", "shards", parse_shards, DEFAULT_SHARDS,
            "the shards, ID=URL,... (redis://, rediss://, mysql:// or memory://); an ID must never change"),
    Setting("PINLATER_CONTROL_URL", "control_url", parse_store_url, "",
            "where queue configs and rate buckets live (unset: the first shard)"),
    Setting("PINLATER_STORE_TIMEOUT_S", "socket_timeout_s", positive_number(300), "5",
            "how long a call to a shard or the control store may wait for its connection and answer, in seconds: "
            "a shard silent this long is taken out of rotation (docs/operating.md)"),
    Setting("PINLATER_ADMIN_SECRET", "admin_secret_sha256", hash_secret, "",
            "the secret deleteQueue requires (unset: every delete is refused); the CLI sends it too"),
    Setting("PINLATER_ADMIN_SECRET_SHA256", "admin_secret_sha256", _sha256_hex, "",
            "sha256 hex of that secret, instead of the secret itself"),
    Setting("PINLATER_ADMIN_SECRET_MAX_FAILURES", "admin_secret_max_failures", whole_number(1, 1_000_000),
            str(_D.admin_secret_max_failures),
            "wrong admin secrets one caller (a client certificate's name, or address) may send within the window; "
            "past it, its attempts are refused without being checked (the dashboard's operator token is "
            "throttled alike, per client address)"),
    Setting("PINLATER_ADMIN_SECRET_MAX_FAILURES_ALL", "admin_secret_max_failures_all", whole_number(1, 1_000_000),
            str(_D.admin_secret_max_failures_all),
            "wrong admin secrets a process takes from all callers within the window; past it, every attempt "
            "is refused without being checked"),
    Setting("PINLATER_ADMIN_SECRET_WINDOW_S", "admin_secret_window_s", positive_number(86_400), "60",
            "the window of those counts, in seconds: a refused caller may try again when its oldest wrong "
            "secret in it is this old"),
    Setting("PINLATER_MAX_BODY_BYTES", "max_body_bytes", whole_number(1, 64 * 1024 * 1024),
            str(_D.max_body_bytes), "largest job body, in bytes (at most 64 MiB)"),
    Setting("PINLATER_DEFAULT_PRIORITIES", "default_priorities", whole_number(1, 100),
            str(_D.default_priorities), "priorities of a queue created without a number of them (1 to 100)"),
    Setting("PINLATER_CONFIG_TTL_S", "config_ttl_s", positive_number(3600), "1",
            "how long a process trusts its cached copy of a queue's config, in seconds"),
    Setting("PINLATER_SERVER_HOST", "server_host", plain_text, _D.server_host,
            "where `pinlater server` listens"),
    Setting("PINLATER_SERVER_PORT", "server_port", _PORT, str(_D.server_port), "its Thrift port"),
    Setting("PINLATER_METRICS_PORT", "metrics_port", _PORT, str(_D.metrics_port), "its metrics endpoint's port"),
    Setting("PINLATER_SERVER_PROCESSES", "server_processes", parse_server_processes, str(_D.server_processes),
            f"server processes sharing the port (1 to {MAX_SERVER_PROCESSES})"),
    Setting("PINLATER_SERVERS", "servers", comma_separated(_address_text), "",
            "HOST:PORT,... of Thrift servers: when set, connect() calls them (unset: in-process)"),
    Setting("PINLATER_CLIENT_TIMEOUT_S", "client_timeout_s", positive_number(3600), "10",
            "how long the Thrift client of PINLATER_SERVERS waits on a server for one try of a call, in seconds;"
            " a call whose reply was lost is tried again only where running it twice is harmless (reads, ACKs,"
            " checkpoints, enqueues with an idempotency key): up to 3 more tries, none begun more than 30 s after"
            " the first, so such a call can take up to 30 s plus one timeout"),
    Setting("PINLATER_IDEMPOTENCY_WINDOW_MS", "idempotency_window_ms", whole_number(1, 30 * 86_400_000),
            str(_D.idempotency_window_ms),
            "a repeated enqueue with the same idempotency key within this window returns the first's descriptors"),
    Setting("PINLATER_DASHBOARD_HOST", "dashboard_host", plain_text, _D.dashboard_host,
            "where `pinlater dashboard` listens"),
    Setting("PINLATER_DASHBOARD_PORT", "dashboard_port", _PORT, str(_D.dashboard_port), "its port"),
    Setting("PINLATER_DASHBOARD_TOKEN", "dashboard_token_sha256", hash_secret, "",
            "the operator token every dashboard control needs (unset: every control is refused)"),
    Setting("PINLATER_DASHBOARD_TOKEN_SHA256", "dashboard_token_sha256", _sha256_hex, "",
            "sha256 hex of that token, instead of the token itself"),
    Setting("PINLATER_DASHBOARD_PROTECT_READS", "dashboard_protect_reads", parse_flag, "no",
            "ask for the token on the read-only views (JSON API, /metrics) too"),
    Setting("PINLATER_FLOWER_URL", "flower_url", _url_without_unencoded_userinfo(("http", "https")), _D.flower_url,
            "Flower, linked from the dashboard"),
    Setting("PINLATER_MAX_JOBS_PER_CALL", "max_jobs_per_call", whole_number(1, 100_000),
            str(_D.max_jobs_per_call),
            "jobs (or ACKs, checkpoints) in one call: bounds how long a caller holds a shard"),
    Setting("PINLATER_REGEX_MAX_BODIES", "regex_max_bodies", whole_number(1, 100_000_000),
            str(_D.regex_max_bodies), "bodies a body-regex count, scan or delete examines at most"),
    Setting("PINLATER_REGEX_BUDGET_S", "regex_budget_s", positive_number(3600), "2",
            "seconds a body-regex count, scan or delete runs at most"),
    Setting("PINLATER_MAX_READ_BYTES", "max_read_bytes", whole_number(1, MAX_READ_BYTES), "",
            f"body bytes one lookup or scan may return, at least PINLATER_MAX_BODY_BYTES (unset: {FRAME_BODIES} "
            f"times it, at most {MAX_READ_BYTES // 2**20} MiB); past it the call is refused"),
    Setting("PINLATER_SERVER_MAX_CONNECTIONS", "server_max_connections", whole_number(1, 100_000),
            str(_D.server_max_connections), "Thrift connections a server process accepts"),
    Setting("PINLATER_SERVER_MAX_CONNECTIONS_PER_CLIENT", "server_max_connections_per_client",
            whole_number(1, 100_000), str(_D.server_max_connections_per_client), "of them from one client address"),
    Setting("PINLATER_SERVER_MAX_BUFFERED_BYTES", "server_max_buffered_bytes", whole_number(1024 * 1024, 2**40),
            str(_D.server_max_buffered_bytes), "request bytes the Thrift server holds across connections"),
    Setting("PINLATER_SERVER_FRAME_TIMEOUT_S", "server_frame_timeout_s", positive_number(3600), "30",
            "seconds a client may take to send a whole request"),
    Setting("PINLATER_SERVER_IDLE_TIMEOUT_S", "server_idle_timeout_s", positive_number(86_400), "600",
            "seconds an idle connection is kept"),
    Setting("PINLATER_SERVER_COALESCE", "server_coalesce", parse_flag, "yes",
            "merge concurrent enqueues and same-source dequeues of a queue into one shard call each"),
    Setting("PINLATER_SERVER_COALESCE_ACKS", "server_coalesce_acks", parse_flag, "no",
            "merge ACKs of different callers too (costs CPU on MySQL)"),
    Setting("PINLATER_SERVER_TLS_CERT", "server_tls_cert", plain_text, "",
            "PEM certificate (chain) of the Thrift server: set, it speaks TLS 1.2+ only; reloaded on SIGHUP"),
    Setting("PINLATER_SERVER_TLS_KEY", "server_tls_key", plain_text, "",
            "PEM private key of that certificate (unset: in the certificate's file)"),
    Setting("PINLATER_SERVER_TLS_CLIENT_CA", "server_tls_client_ca", plain_text, "",
            "PEM CA file: set, every client must present a certificate it signed (mutual TLS)"),
    Setting("PINLATER_SERVER_ROLES", "server_roles", plain_text, "",
            "roles file, one line an identity: <certificate CN or SAN> <role> [queue ...] (unset: "
            "any client certificate may call everything); reloaded on SIGHUP"),
    Setting("PINLATER_SERVER_INSECURE", "server_insecure", parse_flag, "no",
            "let the Thrift server listen on an address other than loopback without client certificates "
            "(plain TCP, or TLS without PINLATER_SERVER_TLS_CLIENT_CA)"),
    Setting("PINLATER_HTTP_TLS_CERT", "http_tls_cert", plain_text, "",
            "PEM certificate: set, the dashboard, feed and typeahead endpoints and the metrics endpoint serve HTTPS"),
    Setting("PINLATER_HTTP_TLS_KEY", "http_tls_key", plain_text, "",
            "PEM private key of that certificate (unset: in the certificate's file)"),
    Setting("PINLATER_HTTP_REQUEST_TIMEOUT_S", "http_request_timeout_s", positive_number(3600), "5",
            "seconds a client of an HTTP endpoint may take to send a whole request (line, headers, body) from its "
            "first byte, and to take each answer"),
    Setting("PINLATER_HTTP_IDLE_TIMEOUT_S", "http_idle_timeout_s", positive_number(86_400), "30",
            "seconds an HTTP endpoint keeps an idle keep-alive connection"),
    Setting("PINLATER_HTTP_MAX_CONNECTIONS", "http_max_connections", whole_number(1, 10_000),
            str(_D.http_max_connections), "connections an HTTP endpoint keeps open, a thread each; when all are "
            "taken, an idle or stalled one is closed for a new one"),
    Setting("PINLATER_HTTP_MAX_CONNECTIONS_PER_CLIENT", "http_max_connections_per_client",
            whole_number(1, 10_000), str(_D.http_max_connections_per_client),
            "of them from one client address (a reverse proxy is one address)"),
    Setting("PINLATER_CLIENT_TLS_CA", "client_tls_ca", plain_text, "",
            "PEM CA file that signed the servers' certificates: set, the Thrift client speaks TLS"),
    Setting("PINLATER_CLIENT_TLS_CERT", "client_tls_cert", plain_text, "",
            "PEM client certificate the Thrift client presents (for servers with client certificates)"),
    Setting("PINLATER_CLIENT_TLS_KEY", "client_tls_key", plain_text, "",
            "PEM private key of that certificate (unset: in the certificate's file)"),
)
