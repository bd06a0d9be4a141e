"""A throwaway certificate authority for trying TLS locally
(``pinlater dev-certs DIR``): a CA, a server certificate for this machine's
loopback names, and one client certificate per role, with a roles file and
the settings that use them. For development only: the keys are written
unencrypted, and the CA signs whatever it is asked to.

``DevCA`` is also what the tests make their certificates with (another CA,
an expired client certificate).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLE_NAMES = ("producer", "worker", "operator", "admin")
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class Issued:
    cert_pem: bytes
    key_pem: bytes

    def write(self, cert: Path, key: Path) -> None:
        cert.write_bytes(self.cert_pem)
        # Private keys readable by their owner only.
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(self.key_pem)


class DevCA:
    """A CA (an EC P-256 key, self-signed) that issues certificates."""

    def __init__(self, name: str = "pinlater dev CA", *, days: int = 30) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self._name).issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.cert.public_bytes(serialization.Encoding.PEM)

    def issue(self, common_name: str, *, server_names: tuple[str, ...] = (), days: int = 30,
              expired: bool = False) -> Issued:
        """A certificate for ``common_name``: a server's when ``server_names``
        (DNS names or IP addresses) are given, else a client's. ``expired``:
        one whose validity ended yesterday."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        start, end = ((now - datetime.timedelta(days=days + 1), now - datetime.timedelta(days=1)) if expired
                      else (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)))
        sans: list[Any] = [x509.DNSName(common_name)] if not server_names else []
        for name in server_names:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                sans.append(x509.DNSName(name))
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server_names else ExtendedKeyUsageOID.CLIENT_AUTH
        cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .sign(self._key, hashes.SHA256())
        )
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), key_pem)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def write_dev_certs(directory: Path, *, server_names: tuple[str, ...] = (), days: int = 30) -> list[Path]:
    """Writes ``ca.pem``, ``server.pem``/``server.key``, ``<role>.pem``/``<role>.key``
    for each role, ``roles`` and ``server.env``/``<role>.env`` (the settings
    that use them) into ``directory``; returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = DevCA(days=days)
    written: list[Path] = []

    def text(name: str, content: str) -> None:
        path = directory / name
        path.write_text(content)
        written.append(path)

    (directory / "ca.pem").write_bytes(ca.cert_pem)
    written.append(directory / "ca.pem")
    names = tuple(dict.fromkeys((*LOOPBACK_NAMES, *server_names)))
    ca.issue("pinlater-server", server_names=names, days=days).write(directory / "server.pem",
                                                                     directory / "server.key")
    written += [directory / "server.pem", directory / "server.key"]
    root = directory.resolve()
    for role in ROLE_NAMES:
        ca.issue(f"dev-{role}", days=days).write(directory / f"{role}.pem", directory / f"{role}.key")
        written += [directory / f"{role}.pem", directory / f"{role}.key"]
        text(f"{role}.env", f"PINLATER_CLIENT_TLS_CA={root}/ca.pem\nPINLATER_CLIENT_TLS_CERT={root}/{role}.pem\n"
                            f"PINLATER_CLIENT_TLS_KEY={root}/{role}.key\n")
    text("roles", "# <client certificate CN or SAN> <role>[,<role>] [queue ...]\n"
                  + "".join(f"dev-{role} {role}\n" for role in ROLE_NAMES))
    text("server.env", f"PINLATER_SERVER_TLS_CERT={root}/server.pem\nPINLATER_SERVER_TLS_KEY={root}/server.key\n"
                       f"PINLATER_SERVER_TLS_CLIENT_CA={root}/ca.pem\nPINLATER_SERVER_ROLES={root}/roles\n")
    return written


def add_dev_certs_command(subparsers: Any) -> None:
    text = "make a throwaway local CA, server and per-role client certificates to try TLS (development only)"
    p = subparsers.add_parser("dev-certs", help=text, description=text)
    p.add_argument("directory", type=Path, help="where to write them (created if missing)")
    p.add_argument("--host", action="append", default=[], metavar="NAME",
                   help="another name or address for the server certificate (repeatable)")
    p.add_argument("--days", type=int, default=30, choices=range(1, 3651), metavar="DAYS",
                   help="days the certificates are valid (1 to 3650; default 30)")
    p.set_defaults(run=_run_dev_certs)


def _run_dev_certs(args: Any) -> int:
    written = write_dev_certs(args.directory, server_names=tuple(args.host), days=args.days)
    print(f"wrote {len(written)} files to {args.directory}")
    print(f"server: set -a; . {args.directory}/server.env; set +a; pinlater server")
    print(f"client: set -a; . {args.directory}/producer.env; set +a; PINLATER_SERVERS=127.0.0.1:9010 ...")
    return 0
