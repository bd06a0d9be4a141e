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
import stat
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


class DevCertsError(ValueError):
    """The target directory cannot be used; one line naming it and why."""


def write_dev_certs(directory: Path, *, server_names: tuple[str, ...] = (), days: int = 30) -> list[Path]:
    """Writes ``ca.pem``, ``server.pem``/``server.key``, ``<role>.pem``/``<role>.key``
    for each role, ``roles`` and ``server.env``/``<role>.env`` (the settings
    that use them) into ``directory``; returns the files written.

    ``directory`` is made (0700) if missing; an existing one must be empty,
    this user's, and writable by no one else, and is never followed if it
    is a symbolic link. Each file is created new, never through a link
    (keys 0600, the rest 0644): the keys and the roles file decide who may
    call the server, so nothing already there may choose where they go."""
    dir_fd = _open_own_empty_directory(directory)
    try:
        ca = DevCA(days=days)
        written: list[Path] = []

        def put(name: str, content: bytes, mode: int = 0o644) -> None:
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                             dir_fd=dir_fd)
            except OSError as exc:
                raise DevCertsError(f"cannot create {directory / name}: {exc.strerror} (was something put there "
                                    "meanwhile?)") from None
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            written.append(directory / name)

        def issued(stem: str, issue: Issued) -> None:
            put(f"{stem}.pem", issue.cert_pem)
            put(f"{stem}.key", issue.key_pem, 0o600)

        put("ca.pem", ca.cert_pem)
        names = tuple(dict.fromkeys((*LOOPBACK_NAMES, *server_names)))
        issued("server", ca.issue("pinlater-server", server_names=names, days=days))
        root = directory.resolve()
        for role in ROLE_NAMES:
            issued(role, ca.issue(f"dev-{role}", days=days))
            put(f"{role}.env", f"PINLATER_CLIENT_TLS_CA={root}/ca.pem\nPINLATER_CLIENT_TLS_CERT={root}/{role}.pem\n"
                               f"PINLATER_CLIENT_TLS_KEY={root}/{role}.key\n".encode())
        put("roles", ("# <client certificate CN or SAN> <role>[,<role>] [queue ...]\n"
                      + "".join(f"dev-{role} {role}\n" for role in ROLE_NAMES)).encode())
        put("server.env", f"PINLATER_SERVER_TLS_CERT={root}/server.pem\nPINLATER_SERVER_TLS_KEY={root}/server.key\n"
                          f"PINLATER_SERVER_TLS_CLIENT_CA={root}/ca.pem\nPINLATER_SERVER_ROLES={root}/roles\n".encode())
        return written
    finally:
        os.close(dir_fd)


def _open_own_empty_directory(directory: Path) -> int:
    """A descriptor of ``directory``, made if missing; refused (one line)
    unless it is a directory itself (not a link to one), this user's,
    writable by no one else, and empty."""
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass  # checked below, through the descriptor
    except OSError as exc:
        raise DevCertsError(f"cannot make {directory}: {exc.strerror}") from None
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        what = "is a symbolic link" if os.path.islink(directory) else f"cannot be opened ({exc.strerror})"
        raise DevCertsError(f"{directory} {what}: give a new directory, or an empty one of yours") from None
    try:
        status = os.fstat(dir_fd)
        if status.st_uid != os.geteuid():
            raise DevCertsError(f"{directory} belongs to another user: give a new directory, or an empty one of yours")
        if status.st_mode & 0o022:
            raise DevCertsError(f"{directory} may be written by others (mode {stat.S_IMODE(status.st_mode):o}): "
                                "give a new directory, or an empty one only you may write to")
        if os.listdir(dir_fd):
            raise DevCertsError(f"{directory} is not empty: give a new directory, or an empty one of yours "
                                "(nothing there is replaced)")
    except BaseException:
        os.close(dir_fd)
        raise
    return dir_fd


def add_dev_certs_command(subparsers: Any) -> None:
    text = "make a throwaway local CA, server and per-role client certificates to try TLS (development only)"
    p = subparsers.add_parser("dev-certs", help=text, description=text)
    p.add_argument("directory", type=Path, help="where to write them: a new directory, or an empty one of yours")
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
