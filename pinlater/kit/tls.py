"""TLS contexts for the Thrift server and its clients, and the identity a
client certificate carries.

Server: TLS 1.2 or later, its certificate and key from files; with a client
CA every client must present a certificate that CA signed (mutual TLS), and
its names (the subject's CN, then the DNS, URI and email names of its SAN)
are the identity that ``pinlater.thrift.access`` maps to a role.

Client: verifies the server against a CA file (the host name it dialled must
be in the server's certificate) and presents its own certificate when given
one.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
from dataclasses import dataclass
from typing import Any

from pinlater.kit.envsettings import SettingError

# The first byte of a TLS record carrying a handshake (a ClientHello).
HANDSHAKE_RECORD = 0x16


class TlsConfigError(ValueError):
    """A certificate, key or CA file cannot be used; the message says which
    file and why, in one line, and never holds key material."""


@dataclass(frozen=True, slots=True)
class ServerTls:
    """Where the server's TLS files are (read again on every ``context``)."""

    cert: str
    key: str
    client_ca: str | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        # No session tickets: nothing resumes sessions here, and a ticket
        # sent after the handshake would make an idle pooled client
        # connection look readable.
        ctx.num_tickets = 0
        _load_chain(ctx, self.cert, self.key)
        if self.client_ca:
            _load_ca(ctx, self.client_ca)
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx


@dataclass(frozen=True, slots=True)
class ClientTls:
    """A client's TLS: the CA that signed the servers' certificates, and its
    own certificate and key for servers that ask for one."""

    ca: str
    cert: str | None = None
    key: str | None = None

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_ca(ctx, self.ca)
        if self.cert:
            _load_chain(ctx, self.cert, self.key or self.cert)
        return ctx


def server_tls_of(prefix: str, roles_variable: str, cert: str, key: str, client_ca: str,
                  roles: str) -> ServerTls | None:
    """A Thrift server's TLS from its ``<prefix>_TLS_CERT``, ``_KEY`` and
    ``_CLIENT_CA`` settings and its roles file's (``roles_variable``), or
    None for plain TCP. Raises SettingError naming the variable at fault."""
    if not cert:
        for variable, value in ((f"{prefix}_TLS_KEY", key), (f"{prefix}_TLS_CLIENT_CA", client_ca),
                                (roles_variable, roles)):
            if value:
                raise SettingError(variable, f"needs {prefix}_TLS_CERT (and its key) to be set")
        return None
    if roles and not client_ca:
        raise SettingError(roles_variable, f"roles need client certificates: set {prefix}_TLS_CLIENT_CA too")
    return ServerTls(cert, key or cert, client_ca or None)


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str) -> None:
    for path in (cert, key):
        if not os.path.isfile(path):
            raise TlsConfigError(f"certificate or key file not found: {path}")
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(f"cannot use the certificate {cert} with the key {key}: {reason(exc)}") from None


def _load_ca(ctx: ssl.SSLContext, ca: str) -> None:
    if not os.path.isfile(ca):
        raise TlsConfigError(f"CA file not found: {ca}")
    try:
        ctx.load_verify_locations(cafile=ca)
    except (ssl.SSLError, OSError) as exc:
        raise TlsConfigError(f"cannot use the CA file {ca}: {reason(exc)}") from None


def reason(exc: BaseException) -> str:
    """Why a TLS operation failed, in a few words (OpenSSL's reason when
    there is one): for loading files and for handshakes alike."""
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    text = str(exc.args[-1]) if exc.args else ""
    return text or type(exc).__name__


def peer_names(sock: ssl.SSLSocket) -> tuple[str, ...]:
    """The verified client certificate's names: subject CN first, then its
    SAN's DNS, URI and email names; () without a certificate."""
    cert: Any = sock.getpeercert()
    if not cert:
        return ()
    names: list[str] = []
    for rdn in cert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                names.append(value)
    for kind, value in cert.get("subjectAltName", ()):
        if kind in ("DNS", "URI", "email") and value not in names:
            names.append(value)
    return tuple(names)


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` stands for is a loopback address
    ("" and the wildcard addresses are not)."""
    text = host.strip("[]")
    if not text:
        return False
    try:
        return ipaddress.ip_address(text.split("%")[0]).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(text, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)
