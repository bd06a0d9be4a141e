"""Certificates for the TLS tests, made by ``pinlater.kit.devcerts.DevCA``: a
server certificate for 127.0.0.1, one client certificate per identity of
``ROLES`` (the roles file they are written into), an identity the file
does not list, an expired certificate, and one from another CA."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pinlater.kit.devcerts import DevCA
from pinlater.kit.tls import ClientTls, ServerTls

# identity -> its line's role and queues in the roles file.
ROLES = {
    "tls-producer": "producer",
    "tls-worker": "worker",
    "tls-operator": "operator",
    "tls-admin": "admin",
    "tls-team-a": "producer tls_team_a*",
}


@dataclass(frozen=True)
class Certs:
    directory: Path

    @property
    def ca(self) -> str:
        return str(self.directory / "ca.pem")

    @property
    def roles(self) -> str:
        return str(self.directory / "roles")

    def server(self, *, client_certs: bool = True, roles: bool = True) -> ServerTls:
        return ServerTls(str(self.directory / "server.pem"), str(self.directory / "server.key"),
                         self.ca if client_certs or roles else None)

    def client(self, identity: str | None = "tls-admin") -> ClientTls:
        """A client of ``identity`` (``stranger``: not in the roles file;
        ``expired``; ``other-ca``: signed by another CA), or without a
        certificate (None)."""
        if identity is None:
            return ClientTls(self.ca)
        return ClientTls(self.ca, str(self.directory / f"{identity}.pem"), str(self.directory / f"{identity}.key"))

    def server_env(self) -> dict[str, str]:
        tls = self.server()
        return {"PINLATER_SERVER_TLS_CERT": tls.cert, "PINLATER_SERVER_TLS_KEY": tls.key,
                "PINLATER_SERVER_TLS_CLIENT_CA": tls.client_ca or "", "PINLATER_SERVER_ROLES": self.roles}


def client_tls_env(tls: ClientTls) -> dict[str, str]:
    """The PINLATER_CLIENT_TLS_* settings of ``tls``."""
    env = {"PINLATER_CLIENT_TLS_CA": tls.ca}
    if tls.cert:
        env |= {"PINLATER_CLIENT_TLS_CERT": tls.cert, "PINLATER_CLIENT_TLS_KEY": tls.key or tls.cert}
    return env


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca = DevCA("pinlater test CA")
    (directory / "ca.pem").write_bytes(ca.cert_pem)
    ca.issue("pinlater-test-server", server_names=("127.0.0.1", "localhost")).write(
        directory / "server.pem", directory / "server.key")
    for identity in (*ROLES, "stranger"):
        ca.issue(identity).write(directory / f"{identity}.pem", directory / f"{identity}.key")
    ca.issue("tls-admin", expired=True).write(directory / "expired.pem", directory / "expired.key")
    DevCA("another CA").issue("tls-admin").write(directory / "other-ca.pem", directory / "other-ca.key")
    (directory / "roles").write_text("# test roles\n" + "".join(f"{k} {v}\n" for k, v in ROLES.items()))
    return Certs(directory)
