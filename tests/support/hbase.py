"""HBase fixtures (a pytest plugin): the two real clusters ``scripts/services
up`` starts (never skipped: started, or the session fails loudly) and a
per-session table prefix so sessions never share tables."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from tests.servers import (
    HBASE_PRIMARY,
    HBASE_PRIMARY_THRIFT2,
    HBASE_STANDBY,
    HBASE_STANDBY_THRIFT2,
    ensure_services,
    hbase_report,
)

if TYPE_CHECKING:
    from tasks.hbase import ClusterPair, ClusterPool, HBaseSettings
    from tests.support.topology.relay import Relay

PREFIX = f"t{uuid.uuid4().hex[:8]}"


def test_settings(**overrides: object) -> HBaseSettings:
    from tasks.hbase import HBaseSettings
    from tasks.hbase.settings import Address

    fields: dict[str, object] = {
        "primary": Address.parse(HBASE_PRIMARY),
        "standby": Address.parse(HBASE_STANDBY),
        "primary_thrift2": Address.parse(HBASE_PRIMARY_THRIFT2),
        "standby_thrift2": Address.parse(HBASE_STANDBY_THRIFT2),
        "table_prefix": PREFIX,
        "call_timeout_s": 20.0,
    }
    fields.update(overrides)
    return HBaseSettings(**fields)  # type: ignore[arg-type]


test_settings.__test__ = False  # type: ignore[attr-defined]  # not a test, despite its name


def relayed(pool: ClusterPool, thrift1: Relay, thrift2: Relay) -> ClusterPool:
    """``pool``'s cluster reached through the relays (its Thrift1 and Thrift2
    servers), with the defaults a deployment starts from."""
    from tasks.hbase import ClusterPool, HBaseSettings
    from tasks.hbase.settings import Address

    return ClusterPool.for_cluster(pool.name, Address(*thrift1.address), HBaseSettings(table_prefix=pool.table_prefix),
                                   thrift2_address=Address(*thrift2.address))


@contextlib.contextmanager
def tables_pair(prefix: str = PREFIX) -> Iterator[ClusterPair]:
    """Both clusters with the tables of ``prefix``, dropped at the end."""
    from tasks.hbase import ClusterPair, HBaseError, drop_table, ensure_tables
    from tasks.hbase.tables import installed_tables

    ensure_services()
    pair = ClusterPair.from_settings(test_settings(table_prefix=prefix))
    try:
        ensure_tables(pair, installed_tables())
    except HBaseError as exc:
        # Say why here: the clusters are torn down before anyone reads their logs.
        raise RuntimeError(f"{exc}\n{hbase_report(exc.cluster, mention=prefix)}") from exc
    yield pair
    for pool in pair:
        names = pool.run("list tables", lambda connection: [t.decode() for t in connection.tables()])
        for name in names:
            drop_table(pool, name)
    pair.close()


@pytest.fixture(scope="session")
def pair() -> Iterator[ClusterPair]:
    with tables_pair() as made:
        yield made
