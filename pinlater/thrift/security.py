"""The Thrift server's TLS context and roles, as loaded now, and their
reload (SIGHUP): a file that fails to load leaves the loaded ones in place,
new connections take the new context, open ones keep theirs."""

from __future__ import annotations

import logging
import ssl
import threading
from collections.abc import Mapping

from pinlater.kit.tls import ServerTls, TlsConfigError, is_loopback
from pinlater.settings import Settings
from pinlater.thrift.access import ROLES, AccessList, RolesFileError

log = logging.getLogger("pinlater.thrift.server")


class Security:
    def __init__(self, tls: ServerTls | None = None, roles_path: str | None = None,
                 roles: Mapping[str, frozenset[str]] = ROLES) -> None:
        """Raises TlsConfigError or RolesFileError when a file is unusable.
        ``roles``: the roles the file may name and their methods (the job
        service's by default)."""
        if roles_path and (tls is None or not tls.client_ca):
            raise TlsConfigError("roles need TLS with client certificates (a client CA)")
        self.tls = tls
        self.roles_path = roles_path
        self.roles = roles
        self._lock = threading.Lock()
        self.context, self.access = self._load()

    @classmethod
    def from_settings(cls, settings: Settings) -> Security:
        return cls(settings.server_tls, settings.server_roles)

    @property
    def enabled(self) -> bool:
        return self.tls is not None

    def _load(self) -> tuple[ssl.SSLContext | None, AccessList | None]:
        context = self.tls.context() if self.tls is not None else None
        access = AccessList.load(self.roles_path, self.roles) if self.roles_path else None
        return context, access

    def reload(self) -> bool:
        """Reads the certificate, key, CA and roles files again; on any
        error logs it and keeps what was loaded."""
        with self._lock:
            try:
                context, access = self._load()
            except (TlsConfigError, RolesFileError) as exc:
                log.error("reload failed, keeping the TLS settings and roles loaded before: %s", exc)
                return False
            self.context, self.access = context, access
        log.info("reloaded %s", "the TLS certificate" + (", client CA and roles" if access is not None else "")
                 if context is not None else "nothing (no TLS configured)")
        return True


def check_exposure(host: str, security: Security, insecure: bool, prefix: str = "PINLATER_SERVER",
                   roles_variable: str = "PINLATER_SERVER_ROLES") -> None:
    """Refuses an address other than loopback unless every client must
    present a certificate (TLS with a client CA), or told to: with plain
    TCP, or TLS alone, anyone who reaches the port may call every method
    (of the job service's: all but ``deleteQueue``, and guess the admin
    secret of that one). ``prefix``: of the server's TLS settings' names."""
    if insecure or is_loopback(host) or (security.tls is not None and security.tls.client_ca):
        return
    shown = host or "every address"
    if security.enabled:
        raise TlsConfigError(f"refusing to serve TLS without client certificates on {shown}, which is not a "
                             "loopback address (any client could call every method): set "
                             f"{prefix}_TLS_CLIENT_CA (and {roles_variable}), or "
                             f"{prefix}_INSECURE=yes on a network you trust")
    raise TlsConfigError(f"refusing to serve plain TCP on {shown}, which is not a loopback address: set "
                         f"{prefix}_TLS_CERT, {prefix}_TLS_KEY and {prefix}_TLS_CLIENT_CA, "
                         f"or {prefix}_INSECURE=yes on a network you trust")
