"""Store URLs: the TLS files their query names, and the one way a URL is
shown (password replaced).

Redis takes redis-py's own query names (``rediss://...?ssl_ca_certs=&ssl_certfile=&ssl_keyfile=``),
MySQL PyMySQL's (``mysql://...?ssl_ca=&ssl_cert=&ssl_key=``). Any other
query parameter is refused with its name; a value is never repeated in an
error, since a misplaced one may be a secret.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from pinlater.kit.tls import ClientTls

REDACTED = "***"
# (CA, certificate, key) query names of each kind of store.
REDIS_TLS_NAMES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
MYSQL_TLS_NAMES = ("ssl_ca", "ssl_cert", "ssl_key")


def redact(url: str) -> str:
    """``url`` with the password of its user part replaced by ``***``; works
    on URLs too broken to parse (a bad port), since those are shown in errors.

    A password may hold a "/", "?", "#" or "@" its writer did not
    percent-encode, so the user part is taken to run to the URL's last "@",
    not to the first "/", "?" or "#" as a parser would: an "@" in a query
    value then hides too much, never too little."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    userinfo, at, hostpart = rest.rpartition("@")
    if not at:
        return url
    user, colon, _ = userinfo.partition(":")
    return f"{scheme}://{user}{colon and ':' + REDACTED}@{hostpart}"


def unencoded_userinfo(url: str) -> bool:
    """Whether an "@" comes after the first "/", "?" or "#" of ``url``: a
    user or password holding one of those unencoded, which a driver cuts
    at that character, so part of the password would be read as the host,
    port, path or query and shown in their errors."""
    rest = url.partition("://")[2]
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return "@" in rest[end:]


USERINFO_PROBLEM = ("a '/', '?', '#' or '@' in its user or password must be percent-encoded "
                    "(%2F, %3F, %23, %40); the value is not shown")


def query_params(url: str, known: tuple[str, ...], kind: str) -> dict[str, str]:
    """The query parameters of ``url``, each one of ``known``, once, with a value."""
    query = url.partition("#")[0].partition("?")[2]
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"{kind} URL: its query is not NAME=VALUE&... (known names: {', '.join(known)})") from None
    params: dict[str, str] = {}
    for name, value in pairs:
        if name not in known:
            raise ValueError(f"{kind} URL: unknown query parameter {name[:40]!r} (known: {', '.join(known)})")
        if name in params:
            raise ValueError(f"{kind} URL: query parameter {name} given twice")
        if not value.strip():
            raise ValueError(f"{kind} URL: query parameter {name} is empty")
        params[name] = value
    return params


def tls_from_params(params: dict[str, str], names: tuple[str, str, str], kind: str) -> ClientTls | None:
    """The CA that must have signed the server's certificate, and optionally
    a client certificate and its key, as a URL's query names them."""
    ca_name, cert_name, key_name = names
    ca, cert, key = params.get(ca_name), params.get(cert_name), params.get(key_name)
    if (cert is None) != (key is None):
        raise ValueError(f"{kind} URL: {cert_name} and {key_name} go together")
    if ca is None:
        if cert is not None:
            raise ValueError(f"{kind} URL: a client certificate ({cert_name}) needs {ca_name} too")
        return None
    return ClientTls(ca, cert, key)


def mysql_tls(url: str) -> ClientTls | None:
    """The TLS files of a ``mysql://`` URL; None when it has no ``ssl_ca``
    (plain TCP, as before TLS was supported)."""
    return tls_from_params(query_params(url, MYSQL_TLS_NAMES, "MySQL"), MYSQL_TLS_NAMES, "MySQL")


@dataclass(frozen=True, slots=True)
class MySQLUrl:
    """``mysql://user:password@host:port[/database][?ssl_ca=...&ssl_cert=...&ssl_key=...]``,
    the one parser of the job service's MySQL stores and the app-data shard map."""

    host: str  # "" when the URL names none
    port: int
    user: str
    password: str = field(repr=False)
    database: str  # "" when the URL names none
    tls: ClientTls | None

    @classmethod
    def parse(cls, url: str) -> MySQLUrl:
        url = url.strip()
        scheme = url.partition("://")[0]
        if scheme != "mysql":
            raise ValueError(f"not a mysql:// URL: {scheme[:12]!r}")
        if unencoded_userinfo(url):
            raise ValueError(f"MySQL URL: {USERINFO_PROBLEM}")
        parts = urlsplit(url)
        try:
            port = parts.port or 3306
        except ValueError:
            raise ValueError("MySQL URL: the port is not a number in 0..65535") from None
        return cls(
            host=parts.hostname or "",
            port=port,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            database=parts.path.strip("/"),
            tls=mysql_tls(url),
        )


def mysql_connect_options(tls: ssl.SSLContext | None) -> dict[str, Any]:
    """PyMySQL's TLS arguments: the context (TLS required, its CA only,
    host name checked), or TLS off. Left to itself PyMySQL offers TLS on
    every connect, loading the system's CA certificates into a new context
    each time: ~50 ms of CPU holding the GIL, which stalls every thread of
    the process while a pool opens connections. So a pool makes its context
    once, and without one TLS is off."""
    return {"ssl": tls} if tls is not None else {"ssl_disabled": True}


def redis_tls(url: str) -> ClientTls | None:
    """The TLS files of a ``rediss://`` URL (None: the system's CAs); a
    ``redis://`` URL may name none."""
    params = query_params(url, REDIS_TLS_NAMES, "Redis")
    if not url.startswith("rediss://"):
        if params:
            raise ValueError(f"Redis URL: {', '.join(params)} needs rediss:// (TLS), not redis://")
        return None
    return tls_from_params(params, REDIS_TLS_NAMES, "Redis")
