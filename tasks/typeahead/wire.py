"""The Contacts Service's wire (``contacts.thrift``) as thriftpy2 loads
it: what its server (``tasks.typeahead.service``) and its clients
(``tasks.typeahead.updates``) share."""

from __future__ import annotations

import enum
import ssl
from pathlib import Path
from typing import Any

import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory
from thriftpy2.rpc import make_client
from thriftpy2.transport import TFramedTransportFactory

from tasks.typeahead.jobs import RenameJob, SecondJob, UpdateJob

IDL_PATH = Path(__file__).with_name("contacts.thrift")
# The module name must end in "_thrift" for its structs to pickle.
idl: Any = thriftpy2.load(str(IDL_PATH), module_name="contacts_service_thrift")
STRUCTS: dict[str, tuple[Any, Any]] = {
    name: (getattr(idl.ContactsService, f"{name}_args"), getattr(idl.ContactsService, f"{name}_result"))
    for name in idl.ContactsService.thrift_services
}


_BINARY = TBinaryProtocolFactory()  # type: ignore[no-untyped-call]


def connect(host: str, port: int, *, timeout_ms: int, ssl_context: ssl.SSLContext | None = None) -> Any:
    """A client of the Contacts Service at ``host:port`` (framed, binary), connected."""
    return make_client(idl.ContactsService, host, port, trans_factory=TFramedTransportFactory(),
                       proto_factory=_BINARY, timeout=timeout_ms, ssl_context=ssl_context)


class ErrorCode(enum.IntEnum):
    """The IDL's ContactsErrorCode."""

    INVALID_REQUEST = 1
    UNAVAILABLE = 2
    PERMISSION_DENIED = 3
    TOO_LARGE = 4
    INTERNAL = 5


def rename_page_of(job: RenameJob | None) -> Any:
    """A rename job as the wire's RenamePage (its cluster is the call's)."""
    if job is None:
        return None
    return idl.RenamePage(userId=job.user_id, nameAt=job.name_at, phase=job.phase, cursor=job.cursor,
                          users=None if job.users is None else list(job.users))


def rename_job_of(cluster: str, page: Any) -> RenameJob | None:
    """The wire's RenamePage on ``cluster`` as a rename job (InvalidTypeaheadJob when it is not one)."""
    if page is None:
        return None
    return RenameJob(cluster, page.userId, page.nameAt, page.phase, page.cursor,
                     None if page.users is None else tuple(page.users))


def account_page_of(job: UpdateJob) -> Any:
    """An account job as the wire's AccountPage (its cluster is the call's)."""
    after = job.after
    return idl.AccountPage(account=job.fields["account"], change=job.fields["change"],
                           afterUser=None if after is None else after[0],
                           afterSource=None if after is None else after[1])


def account_job_of(cluster: str, page: Any) -> UpdateJob | None:
    """The wire's AccountPage on ``cluster`` as an account job (InvalidTypeaheadJob when it is not one)."""
    if page is None:
        return None
    after = None if page.afterUser is None and page.afterSource is None else (page.afterUser, page.afterSource)
    return UpdateJob.account(cluster, page.account, page.change, after)


def second_page_of(job: SecondJob | None) -> Any:
    """A second_degree job as the wire's SecondPage (its cluster is the call's)."""
    if job is None:
        return None
    return idl.SecondPage(userId=job.user_id, atMs=job.at_ms, change=job.change, cursor=job.cursor,
                          users=None if job.users is None else list(job.users), renamed=job.renamed)


def second_job_of(cluster: str, page: Any) -> SecondJob | None:
    """The wire's SecondPage on ``cluster`` as a second_degree job (InvalidTypeaheadJob when it is not one)."""
    if page is None:
        return None
    return SecondJob(cluster, page.userId, page.atMs, page.change, page.cursor,
                     None if page.users is None else tuple(page.users), page.renamed)
