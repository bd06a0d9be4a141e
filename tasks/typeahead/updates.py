"""Where the typeahead's jobs write the index: in their own process (the
functions of ``tasks.typeahead.sync`` on the process's app data and HBase
pair), or through the Contacts Service when ``PINLATER_TYPEAHEAD_SERVICE``
names one (``tasks.typeahead.service``), whose updates are those same
functions in its process. Either way an update settles places from the
app data as it is when it runs, so the index ends as the truth says
whichever path and order the jobs took.

Through the service, an answer of ``UNAVAILABLE`` and a connection that
fails are ``TryLater`` (the job runs again on its queue's retry policy);
``INVALID_REQUEST`` and ``TOO_LARGE`` refuse the job as its own checks
would; a refused role or an internal error is retried too, so that a
fixed roles file or server takes the jobs up again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from thriftpy2.thrift import TException

from pinlater.kit.tls import ClientTls
from tasks.appdata.accountcache import AccountCache
from tasks.appdata.store import AppData
from tasks.errors import TryLater
from tasks.hbase import ClusterPool
from tasks.hbase.settings import Address
from tasks.typeahead import sync
from tasks.typeahead.jobs import InvalidTypeaheadJob, RenameJob, SecondJob, UpdateJob
from tasks.typeahead.second import Limits
from tasks.typeahead.settings import TypeaheadSettings
from tasks.typeahead.sources import Source
from tasks.typeahead.wire import (
    ErrorCode,
    account_job_of,
    account_page_of,
    connect,
    idl,
    rename_job_of,
    rename_page_of,
    second_job_of,
    second_page_of,
)

T = TypeVar("T")
# A rebuild of 500 owners on a loaded machine takes seconds; a call past this is retried.
TIMEOUT_MS = 60_000


class IndexUpdates(Protocol):
    def follow_changed(self, cluster: str, follower: int, followee: int, at_ms: int) -> int: ...

    def source_changed(self, cluster: str, owner: int, source: Source) -> int: ...

    def rename_page(self, job: RenameJob) -> sync.RenameStep: ...

    def account_page(self, job: UpdateJob) -> sync.AccountStep: ...

    def rebuild(self, cluster: str, owners: Sequence[int]) -> int: ...

    def second_page(self, job: SecondJob) -> sync.SecondStep: ...

    def rebuild_second(self, cluster: str, owners: Sequence[int]) -> int: ...


class Writer(Protocol):
    """What updates in this process need (``TypeaheadRuntime`` is one)."""

    store: AppData
    settings: TypeaheadSettings

    @property
    def accounts(self) -> AccountCache: ...

    def ready(self, cluster: str) -> ClusterPool: ...


class LocalUpdates:
    """The updates in this process (a worker's, or the Contacts Service's)."""

    def __init__(self, rt: Writer) -> None:
        self.rt = rt

    def follow_changed(self, cluster: str, follower: int, followee: int, at_ms: int) -> int:
        return sync.follow_changed(self.rt.store, self.rt.ready(cluster), follower, followee, at_ms)

    def source_changed(self, cluster: str, owner: int, source: Source) -> int:
        return sync.source_changed(self.rt.store, self.rt.ready(cluster), owner, source, self.rt.accounts)

    def rename_page(self, job: RenameJob) -> sync.RenameStep:
        s = self.rt.settings
        return sync.rename_page(self.rt.store, self.rt.ready(job.cluster), job, s.rename_page, Limits.of(s))

    def account_page(self, job: UpdateJob) -> sync.AccountStep:
        return sync.account_page(self.rt.store, self.rt.ready(job.cluster), job, self.rt.settings.account_page,
                                 self.rt.accounts)

    def rebuild(self, cluster: str, owners: Sequence[int]) -> int:
        return sync.rebuild(self.rt.store, self.rt.ready(cluster), owners, self.rt.accounts)

    def second_page(self, job: SecondJob) -> sync.SecondStep:
        s = self.rt.settings
        return sync.second_page(self.rt.store, self.rt.ready(job.cluster), job, s.second_page, Limits.of(s))

    def rebuild_second(self, cluster: str, owners: Sequence[int]) -> int:
        return sync.rebuild_second(self.rt.store, self.rt.ready(cluster), owners, Limits.of(self.rt.settings))


class ServiceUpdates:
    """The updates through the Contacts Service at ``address``: one
    connection per thread, opened at its first call and again after one
    fails."""

    def __init__(self, address: Address, tls: ClientTls | None = None, timeout_ms: int = TIMEOUT_MS) -> None:
        self.address = address
        self.tls = tls
        self.timeout_ms = timeout_ms
        self._local = threading.local()

    def _client(self) -> Any:
        client = getattr(self._local, "client", None)
        if client is None:
            client = self._local.client = connect(
                self.address.host, self.address.port, timeout_ms=self.timeout_ms,
                ssl_context=self.tls.context() if self.tls is not None else None,
            )
        return client

    def _drop(self) -> None:
        client = getattr(self._local, "client", None)
        self._local.client = None
        if client is not None:
            with contextlib.suppress(Exception):  # a broken connection may fail to close; it is dropped either way
                client.close()

    def _call(self, call: Callable[[Any], T]) -> T:
        try:
            return call(self._client())
        except idl.ContactsException as exc:
            if exc.errorCode in (ErrorCode.INVALID_REQUEST, ErrorCode.TOO_LARGE):
                raise InvalidTypeaheadJob(f"the contacts service refused it: {exc.message}") from None
            raise TryLater(f"contacts service at {self.address}: {ErrorCode(exc.errorCode).name}: "
                           f"{exc.message}") from None
        except (TException, OSError) as exc:  # the connection: refused, reset, timed out
            self._drop()
            raise TryLater(f"contacts service at {self.address}: {type(exc).__name__}: {exc}") from None

    def follow_changed(self, cluster: str, follower: int, followee: int, at_ms: int) -> int:
        return self._call(lambda c: int(c.followChanged(cluster, follower, followee, at_ms)))

    def source_changed(self, cluster: str, owner: int, source: Source) -> int:
        return self._call(lambda c: int(c.sourceChanged(cluster, owner, source.name)))

    def rename_page(self, job: RenameJob) -> sync.RenameStep:
        page = rename_page_of(job)
        step = self._call(lambda c: c.renamePage(job.cluster, page))
        return sync.RenameStep(step.entries, rename_job_of(job.cluster, step.usersPage),
                               rename_job_of(job.cluster, step.nextPage), tuple(step.secondActors or ()))

    def account_page(self, job: UpdateJob) -> sync.AccountStep:
        page = account_page_of(job)
        step = self._call(lambda c: c.accountChanged(job.cluster, page))
        return sync.AccountStep(step.entries, account_job_of(job.cluster, step.nextPage))

    def rebuild(self, cluster: str, owners: Sequence[int]) -> int:
        return self._call(lambda c: int(c.rebuild(cluster, list(owners))))

    def second_page(self, job: SecondJob) -> sync.SecondStep:
        page = second_page_of(job)
        step = self._call(lambda c: c.secondPage(job.cluster, page))
        return sync.SecondStep(step.entries, second_job_of(job.cluster, step.usersPage),
                               second_job_of(job.cluster, step.nextPage))

    def rebuild_second(self, cluster: str, owners: Sequence[int]) -> int:
        return self._call(lambda c: int(c.rebuildSecond(cluster, list(owners))))
