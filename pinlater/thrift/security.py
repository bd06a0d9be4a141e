"""The Thrift server's TLS context and roles, as loaded now, and their
reload (SIGHUP): a file that fails to load leaves the loaded ones in place,
new connections take the new context, open ones keep theirs."""

from __future__ import annotations

import logging
import ssl
import threading

from pinlater.settings import Settings
from pinlater.thrift.access import AccessList, RolesFileError
from pinlater.tls import ServerTls, TlsConfigError, is_loopback

log = logging.getLogger("pinlater.thrift.server")


class Security:
    def __init__(self, tls: ServerTls | None = None, roles_path: str | None = None) -> None:
        """Raises TlsConfigError or RolesFileError when a file is unusable."""
        if roles_path and (tls is None or not tls.client_ca):
            raise TlsConfigError("roles need TLS with client certificates (a client CA)")
        self.tls = tls
        self.roles_path = roles_path
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
        access = AccessList.load(self.roles_path) if self.roles_path else None
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


def check_exposure(host: str, security: Security, insecure: bool) -> None:
    """Refuses plain TCP on an address other than loopback, unless told to."""
    if security.enabled or insecure or is_loopback(host):
        return
    shown = host or "every address"
    raise TlsConfigError(f"refusing to serve plain TCP on {shown}, which is not a loopback address: set "
                         "PINLATER_SERVER_TLS_CERT and PINLATER_SERVER_TLS_KEY, or PINLATER_SERVER_INSECURE=yes "
                         "on a network you trust")
