"""What the typeahead tasks keep of their own in a process, over the
process's ``TaskRuntime`` (its app-data store and HBase pair): settings,
the index tables ensured on a cluster the first time the process uses it,
its id lookups' cache, and where the jobs' updates go
(``tasks.typeahead.updates``)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field

from tasks.appdata.accountcache import AccountCache
from tasks.appdata.store import AppData
from tasks.hbase import ClusterPair, ClusterPool
from tasks.hbase.tables import EnsuredTables
from tasks.runtime import TaskRuntime, current
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.tables import defined_tables
from tasks.typeahead.updates import IndexUpdates, LocalUpdates, ServiceUpdates


@dataclass
class TypeaheadRuntime:
    settings: TypeaheadSettings
    store: AppData
    pair: ClusterPair
    env: Mapping[str, str] = field(default_factory=dict)
    tables: EnsuredTables = field(init=False)

    def __post_init__(self) -> None:
        self.tables = EnsuredTables(self.pair)

    @classmethod
    def on(cls, shared: TaskRuntime) -> TypeaheadRuntime:
        """The typeahead tasks' view of ``shared`` (settings from its environment)."""
        return cls(TypeaheadSettings.from_env(shared.env), shared.store, shared.pair, shared.env)

    def ready(self, cluster: str) -> ClusterPool:
        """``cluster``'s pool with the index tables ensured (HBaseError while
        it is down: the job is retried)."""
        return self.tables.ready(cluster, *defined_tables())

    @functools.cached_property
    def accounts(self) -> AccountCache:
        """This process's id lookups (checked against MySQL after each write)."""
        s = self.settings
        return AccountCache(s.account_cache, s.account_hit_ttl_ms, s.account_miss_ttl_ms)

    @functools.cached_property
    def updates(self) -> IndexUpdates:
        """Through the Contacts Service of ``PINLATER_TYPEAHEAD_SERVICE``, or in this process."""
        if self.settings.service is None:
            return LocalUpdates(self)
        from pinlater.settings import Settings  # the job service's client settings: its TLS

        return ServiceUpdates(self.settings.service, Settings.from_env(self.env).client_tls)


def runtime(shared: TaskRuntime | None = None) -> TypeaheadRuntime:
    """The typeahead tasks' view of ``shared``, by default this process's runtime."""
    return (current() if shared is None else shared).view(TypeaheadRuntime.on)
