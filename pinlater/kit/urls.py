"""Store URLs, whatever the kind: the one way a URL is shown (password
replaced), the user part a driver would cut short, and the query
parameters naming TLS files (each kind names its own: a store kind's
``url`` module, or ``pinlater.kit.redisconn`` for Redis clients). Any other
query parameter is refused with its name; a value is never repeated in an
error, since a misplaced one may be a secret.
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from pinlater.kit.tls import ClientTls

REDACTED = "***"


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
