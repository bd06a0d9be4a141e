"""What the tasks of one process share, whichever task packages the worker
imports: the app-data store (a MySQL pool per server) and the HBase pair
(Thrift1 and Thrift2 pools per cluster), made on first use and again after
a fork (a pool process must not share its parent's sockets).

Each task package keeps only its own state (its settings, the tables it
has ensured, its caches) in a view of this runtime (``TaskRuntime.view``),
made on first use over the same store and pair. Ensured tables stay per
package: each ensures its own definition of a table (the feed tasks' feed
table carries their cap), which a shared record by name would skip.

Jobs are enqueued through Celery (``apply_async``), whose transport already
holds one job-service client per process (``workers.client``), so none is
held here."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import TypeVar, cast

from tasks.appdata.settings import AppDataSettings
from tasks.appdata.store import AppData
from tasks.hbase import ClusterPair, HBaseSettings
from tasks.per_process import PerProcess

V = TypeVar("V")


class TaskRuntime:
    def __init__(self, store: AppData, pair: ClusterPair, env: Mapping[str, str] | None = None) -> None:
        self.store = store
        self.pair = pair
        self.env: Mapping[str, str] = os.environ if env is None else env  # the task packages' settings
        self._views: dict[Callable[[TaskRuntime], object], object] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TaskRuntime:
        env = os.environ if env is None else env
        hbase = HBaseSettings.from_env(env)
        return cls(AppData(AppDataSettings.from_env(env)), ClusterPair.from_settings(hbase), env)

    def view(self, make: Callable[[TaskRuntime], V]) -> V:
        """The view ``make(self)`` built, once per runtime: ``make`` is its
        key, so a package passes the same function (or classmethod) each
        time. Building one must not do I/O: it runs under a lock."""
        with self._lock:
            if make not in self._views:
                self._views[make] = make(self)
            return cast(V, self._views[make])

    def close(self) -> None:
        """Closes the idle connections of the store and of both clusters;
        views hold no connections of their own."""
        self.store.close()
        self.pair.close()


_current: PerProcess[TaskRuntime] = PerProcess(TaskRuntime.from_env)


def current() -> TaskRuntime:
    """This process's runtime (from the environment)."""
    return _current.get()


def replaced(runtime: TaskRuntime) -> AbstractContextManager[TaskRuntime]:
    """``runtime`` is this process's inside the block (a harness running
    tasks in its own process on stores it made); the one before after it."""
    return _current.replaced(runtime)


def close() -> None:
    """Closes this process's runtime, if it made one; the next ``current``
    makes another."""
    made = _current.discard()
    if made is not None:
        made.close()
