"""The Contacts Service: the typeahead's contacts index over Thrift
(``contacts.thrift``), on the job server's kit (``pinlater.thrift.serving``):
framed binary protocol, TLS, client certificate roles (``reader`` looks
up, ``writer`` updates), frame limits and the protections against hostile
clients, ``/metrics``, and the caller's trace continued.

``ContactsHandler`` turns the wire's requests into calls of a ``Lookup``
(``tasks.typeahead.http``; the index's in ``pinlater-typeahead
serve-thrift``, a fake in tests), so the HTTP endpoint and this service
answer alike, and its updates into the functions the typeahead's jobs run
(``tasks.typeahead.sync``) over a ``Writer`` (the process's app data and
HBase pair); answers and errors go back as the IDL says. ``ContactsServer``
is the server.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any, TypeVar

from pinlater.kit.tls import ServerTls
from pinlater.settings import Settings
from pinlater.thrift.serving import (
    AccessDenied,
    FramedServer,
    Limit,
    Security,
    ServerStats,
    StatsLayout,
    bounds_of,
    check_exposure,
    signatures,
    trace_carrier,
)
from tasks.appdata.errors import AppDataStorageError, AppDataUnavailable, UnknownShard
from tasks.appdata.ids import InvalidId, ObjectType, expect_type
from tasks.errors import TryLater
from tasks.hbase import PRIMARY, STANDBY, HBaseError
from tasks.typeahead.errors import TypeaheadUnavailable
from tasks.typeahead.http import DEFAULT_LIMIT, Lookup, parse_query, timed_lookup
from tasks.typeahead.jobs import InvalidTypeaheadJob, RenameJob, SecondJob, UpdateJob
from tasks.typeahead.rank import MAX_LIMIT, Match
from tasks.typeahead.sources import BY_NAME, Source, source_named
from tasks.typeahead.updates import LocalUpdates, Writer
from tasks.typeahead.wire import (
    IDL_PATH,
    STRUCTS,
    ErrorCode,
    account_job_of,
    account_page_of,
    idl,
    rename_job_of,
    rename_page_of,
    second_job_of,
    second_page_of,
)

__all__ = ["IDL_PATH", "ContactsError", "ContactsHandler", "ContactsServer", "ErrorCode", "Writer", "idl"]

UPDATES = frozenset({"followChanged", "sourceChanged", "renamePage", "accountChanged", "rebuild", "secondPage",
                     "rebuildSecond"})
ROLES: dict[str, frozenset[str]] = {"reader": frozenset({"lookup"}), "writer": UPDATES, "admin": frozenset(STRUCTS)}
# Names in one lookup's sources list; more is refused before decoding.
MAX_SOURCES = len(BY_NAME) * 2
# Owners of one rebuild (a backfill page is 500), users of one rename page.
MAX_OWNERS = 1000
MAX_PAGE_USERS = 10_000
# The largest call is a rename page of 10,000 users (80 KB of ids).
MAX_FRAME_BYTES = 256 * 1024
DEFAULT_PORT = 9092
# The settings an exposed address needs (``check_exposure``'s advice).
EXPOSURE_SETTINGS = ("PINLATER_TYPEAHEAD_THRIFT", "PINLATER_TYPEAHEAD_THRIFT_ROLES")


LAYOUT = StatsLayout(STRUCTS, (code.name for code in ErrorCode), "pinlater_contacts_server")


class ContactsError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _invalid(message: str) -> ContactsError:
    return ContactsError(ErrorCode.INVALID_REQUEST, message)


def _user(value: object, name: str) -> int:
    try:
        expect_type(value, ObjectType.USER)  # type: ignore[arg-type]
    except InvalidId as exc:
        raise _invalid(f"{name} is not a user id: {exc}") from None
    return value  # type: ignore[return-value]


def _owner(value: object) -> int:
    if value is None:
        raise _invalid("owner is required (a user id)")
    return _user(value, "owner")


def _text(value: object, name: str) -> str:
    if isinstance(value, bytes):  # thriftpy2's answer to a string that is not UTF-8
        raise _invalid(f"{name} is not UTF-8 text")
    if not isinstance(value, str):
        raise _invalid(f"{name} is required")
    return value


def _sources(value: object) -> frozenset[Source] | None:
    if value is None:
        return None
    if not value:
        raise _invalid(f"sources, when given, names at least one of {', '.join(BY_NAME)}")
    try:
        return frozenset(source_named(_text(name, "a source")) for name in value)  # type: ignore[attr-defined]
    except ValueError as exc:
        raise _invalid(str(exc)) from None


def _match(match: Match) -> Any:
    contact = match.contact
    return idl.ContactMatch(
        contact=idl.Contact(key=contact.key, name=contact.name, userId=contact.user_id),
        source=match.source, sources=list(match.sources), score=float(match.score),
    )


T = TypeVar("T")
J = TypeVar("J")
# Conditions that end by themselves: the caller tries again later (TryLater:
# the truth an update acts on kept changing while it was written).
_OUTAGES = (HBaseError, AppDataUnavailable, AppDataStorageError, TryLater)


class ContactsHandler:
    """The service's methods over a ``Lookup`` and, for updates, a ``Writer``
    (None: a server of lookups alone, which refuses updates)."""

    def __init__(self, lookup: Lookup, writer: Writer | None = None) -> None:
        self._lookup = lookup
        self._updates = None if writer is None else LocalUpdates(writer)

    def _update(self, cluster: object, work: Callable[[LocalUpdates], T]) -> T:
        if self._updates is None:
            raise _invalid("this Contacts Service serves lookups only (started without the app data)")
        if cluster not in (PRIMARY, STANDBY):
            raise _invalid(f"cluster must be {PRIMARY} or {STANDBY}, got {str(cluster)[:40]!r}")
        try:
            return work(self._updates)
        except _OUTAGES as exc:
            raise ContactsError(ErrorCode.UNAVAILABLE, f"try again later: {type(exc).__name__}: {exc}") from None
        except (InvalidTypeaheadJob, UnknownShard) as exc:
            raise _invalid(str(exc)) from None

    def followChanged(self, cluster: str, follower: int, followee: int, at_ms: int) -> int:  # noqa: N802 (the IDL's)
        follower, followee = _user(follower, "follower"), _user(followee, "followee")
        if type(at_ms) is not int or at_ms < 0:
            raise _invalid(f"atMs must be a time in ms since the epoch, got {at_ms!r}")

        def changed(u: LocalUpdates) -> int:
            UpdateJob.follow(cluster, follower, followee, at_ms)  # checked as the job it stands for is
            return u.follow_changed(cluster, follower, followee, at_ms)

        return self._update(cluster, changed)

    def sourceChanged(self, cluster: str, owner: int, source: str) -> int:  # noqa: N802 (the IDL's)
        owner = _user(owner, "owner")
        try:
            named = source_named(_text(source, "source"))
        except ValueError as exc:
            raise _invalid(str(exc)) from None
        if not named.imported:
            raise _invalid(f"source {named.name} is not an imported source (its entries follow the follow graph)")
        return self._update(cluster, lambda u: u.source_changed(cluster, owner, named))

    def _page(self, cluster: object, page: Any, method: str, job_of: Callable[[str, Any], J | None],
              run: Callable[[LocalUpdates, J], Any]) -> Any:
        """A call that names one page of a chained job (``job_of`` the wire's page)."""
        if page is None:
            raise _invalid(f"{method} needs a page")
        for name, value in vars(page).items():
            # thriftpy2 hands a string that is not UTF-8 over as bytes; a
            # page's fields are text and numbers only.
            if isinstance(value, bytes) or (isinstance(value, list) and any(isinstance(v, bytes) for v in value)):
                raise _invalid(f"{method}: the page's {name} is not UTF-8 text")
        try:
            job = job_of(_text(cluster, "cluster"), page)
        except InvalidTypeaheadJob as exc:
            raise _invalid(str(exc)) from None
        assert job is not None
        return self._update(cluster, lambda u: run(u, job))

    def renamePage(self, cluster: str, page: Any) -> Any:  # noqa: N802 (the IDL's)
        def run(u: LocalUpdates, job: RenameJob) -> Any:
            step = u.rename_page(job)
            return idl.RenameStep(entries=step.entries, usersPage=rename_page_of(step.users_job),
                                  nextPage=rename_page_of(step.next_job),
                                  secondActors=list(step.second_actors) or None)

        return self._page(cluster, page, "renamePage", rename_job_of, run)

    def accountChanged(self, cluster: str, page: Any) -> Any:  # noqa: N802 (the IDL's)
        def run(u: LocalUpdates, job: UpdateJob) -> Any:
            step = u.account_page(job)
            return idl.AccountStep(entries=step.entries,
                                   nextPage=None if step.next_job is None else account_page_of(step.next_job))

        return self._page(cluster, page, "accountChanged", account_job_of, run)

    def secondPage(self, cluster: str, page: Any) -> Any:  # noqa: N802 (the IDL's)
        def run(u: LocalUpdates, job: SecondJob) -> Any:
            step = u.second_page(job)
            return idl.SecondStep(entries=step.entries, usersPage=second_page_of(step.users_job),
                                  nextPage=second_page_of(step.next_job))

        return self._page(cluster, page, "secondPage", second_job_of, run)

    def _owners(self, owners: list[int], method: str) -> list[int]:
        if not owners:
            raise _invalid(f"{method} needs at least one owner")
        return [_user(owner, "an owner") for owner in owners]

    def rebuild(self, cluster: str, owners: list[int]) -> int:
        checked = self._owners(owners, "rebuild")
        return self._update(cluster, lambda u: u.rebuild(cluster, checked))

    def rebuildSecond(self, cluster: str, owners: list[int]) -> int:  # noqa: N802 (the IDL's)
        checked = self._owners(owners, "rebuildSecond")
        return self._update(cluster, lambda u: u.rebuild_second(cluster, checked))

    def lookup(self, request: Any) -> Any:
        if request is None:
            raise _invalid("lookup needs a request")
        owner = _owner(request.owner)
        try:
            query = parse_query(_text(request.query, "query"))
        except ValueError as exc:
            raise _invalid(str(exc).replace("q must", "query must")) from None
        limit = DEFAULT_LIMIT if request.limit is None else request.limit
        if not 1 <= limit <= MAX_LIMIT:
            raise _invalid(f"limit must be in 1..{MAX_LIMIT}, got {limit}")
        sources = _sources(request.sources)
        try:
            result, _took_ms = timed_lookup(self._lookup, owner, query, limit, sources)
        except TypeaheadUnavailable as exc:
            raise ContactsError(ErrorCode.UNAVAILABLE, f"contacts index unavailable: {exc}") from None
        return idl.LookupResponse(matches=[_match(m) for m in result.matches], servedBy=result.served_by)


def _too_many(what: str, limit: int) -> Limit:
    def refuse(count: int) -> Exception:
        return ContactsError(ErrorCode.TOO_LARGE, f"{count} {what} in one call; the limit is {limit}")

    return Limit(what, limit, refuse)


_LISTS: dict[str, list[tuple[tuple[str, ...], Limit]]] = {
    "lookup": [(("request", "sources"), _too_many("sources", MAX_SOURCES))],
    "renamePage": [(("page", "users"), _too_many("users", MAX_PAGE_USERS))],
    "rebuild": [(("owners",), _too_many("owners", MAX_OWNERS))],
    "secondPage": [(("page", "users"), _too_many("users", MAX_PAGE_USERS))],
    "rebuildSecond": [(("owners",), _too_many("owners", MAX_OWNERS))],
}


def _too_large(method: str) -> Any:
    return lambda message: ContactsError(ErrorCode.TOO_LARGE, message)


def security_of(tls: ServerTls | None, roles_path: str) -> Security:
    """The Contacts Service's TLS and roles (``ROLES``); raises
    TlsConfigError or RolesFileError when a file is unusable."""
    return Security(tls, roles_path or None, ROLES)


class ContactsServer(FramedServer):
    """The Contacts Service on ``host:port``, answering with ``lookup`` and
    updating through ``writer`` (None: lookups alone). Limits on
    connections, buffered bytes and timeouts are the job server's
    (``PINLATER_SERVER_*``, from ``settings``); an address other than
    loopback needs client certificates, or ``insecure``."""

    def __init__(
        self,
        lookup: Lookup,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        writer: Writer | None = None,
        security: Security | None = None,
        insecure: bool = False,
        metrics_port: int | None = None,
        settings: Settings | None = None,
        max_concurrent_calls: int = 64,
        listener: socket.socket | None = None,
        stats: ServerStats | None = None,
        accept_gate: Callable[[], bool] | None = None,
    ) -> None:
        """One process of several (``pinlater-typeahead serve-thrift
        --processes N``) is given the ``listener`` they share, its
        ``stats`` slot and its ``accept_gate``, as the job server's are
        (``pinlater.thrift.child``); the parent checked the address."""
        settings = settings or Settings.from_env()
        security = security or Security(roles=ROLES)
        if listener is None:
            check_exposure(host, security, insecure, *EXPOSURE_SETTINGS)
        super().__init__(
            ContactsHandler(lookup, writer), signatures(STRUCTS), bounds_of(STRUCTS, _LISTS, _too_large), host, port,
            service_name="ContactsService",
            label="contacts thrift server",
            security=security,
            max_frame_bytes=MAX_FRAME_BYTES,
            max_connections=settings.server_max_connections,
            max_connections_per_client=settings.server_max_connections_per_client,
            max_buffered_bytes=settings.server_max_buffered_bytes,
            max_concurrent_calls=max_concurrent_calls,
            idle_timeout_s=settings.server_idle_timeout_s,
            frame_timeout_s=settings.server_frame_timeout_s,
            stats=stats or ServerStats(layout=LAYOUT),
            metrics_port=metrics_port,
            listener=listener,
            accept_gate=accept_gate,
            observe_stats=stats is None,  # a child's are the parent's to observe
            # Updates that hang on a cluster (each waits out its HBase call
            # timeout) hold their own slots, never the lookups'.
            call_classes={"lookup": "lookups"},
        )

    def wire_error(self, exc: Exception) -> tuple[Any, str] | None:
        if isinstance(exc, ContactsError):
            code = exc.code
        elif isinstance(exc, AccessDenied):
            code = ErrorCode.PERMISSION_DENIED
        else:
            return None
        return idl.ContactsException(errorCode=int(code), message=str(exc)), code.name

    def internal_error(self, message: str) -> tuple[Any, str]:
        return idl.ContactsException(errorCode=int(ErrorCode.INTERNAL), message=message), ErrorCode.INTERNAL.name

    def refusal_error(self, method: str, message: str) -> tuple[Any, str]:
        return idl.ContactsException(errorCode=int(ErrorCode.TOO_LARGE), message=message), ErrorCode.TOO_LARGE.name

    def trace_parent(self, given: dict[str, Any]) -> Any:
        return trace_carrier(given.get("request"))
