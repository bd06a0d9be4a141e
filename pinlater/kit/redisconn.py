"""Redis client URLs: redis-py's own TLS query names
(``rediss://...?ssl_ca_certs=&ssl_certfile=&ssl_keyfile=``) checked before
the first command. The job service's Redis stores open their pools with it,
and so do the workers' bus clients.
"""

from __future__ import annotations

from typing import Any

from pinlater.kit.tls import ClientTls
from pinlater.kit.urls import query_params, tls_from_params

# (CA, certificate, key) query names.
REDIS_TLS_NAMES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")


def redis_tls(url: str) -> ClientTls | None:
    """The TLS files of a ``rediss://`` URL (None: the system's CAs); a
    ``redis://`` URL may name none."""
    params = query_params(url, REDIS_TLS_NAMES, "Redis")
    if not url.startswith("rediss://"):
        if params:
            raise ValueError(f"Redis URL: {', '.join(params)} needs rediss:// (TLS), not redis://")
        return None
    return tls_from_params(params, REDIS_TLS_NAMES, "Redis")


def tls_options(url: str) -> dict[str, Any]:
    """redis-py's TLS arguments of ``url``; a bad query or an unreadable
    TLS file is a ValueError here, not a failure at the first command."""
    tls = redis_tls(url)
    if tls is not None:
        tls.context()  # only to check the files now: redis-py loads them per connection
    if not url.startswith("rediss://"):
        return {}
    # redis-py's defaults today, stated so that no upgrade turns them off:
    # the server's certificate is verified and names the host we dialled.
    return {"ssl_cert_reqs": "required", "ssl_check_hostname": True}
