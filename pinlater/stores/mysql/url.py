"""MySQL store URLs: ``mysql://user:password@host:port[/database]`` with
PyMySQL's own TLS query names (``?ssl_ca=&ssl_cert=&ssl_key=``), and the TLS
arguments a connect takes. The app-data layer reads its shard map's URLs
with the same parser (through ``pinlater.stores.mysql.public``).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from pinlater.kit.tls import ClientTls
from pinlater.kit.urls import USERINFO_PROBLEM, query_params, tls_from_params, unencoded_userinfo

# (CA, certificate, key) query names.
MYSQL_TLS_NAMES = ("ssl_ca", "ssl_cert", "ssl_key")


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
