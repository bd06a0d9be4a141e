"""The contract suite runs on every setup, and on the stores over TLS with
passwords too (``TLS_SETUPS``: scripts/services' TLS-only Redis with an ACL
user and a client certificate, and its MariaDB that requires TLS)."""

from __future__ import annotations

from tests.support.stores import SETUPS, TLS_SETUPS, setup_fixture

setup = setup_fixture(SETUPS + TLS_SETUPS)
