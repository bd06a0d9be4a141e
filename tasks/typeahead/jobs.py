"""The JSON bodies of the typeahead's jobs. Each names the cluster it
writes: a job per cluster, so an outage of one delays only its own jobs.

* ``{"op": "follow", "cluster", "follower_id", "followee_id", "at_ms"}``: a
  follow or unfollow happened at ``at_ms`` (the graph in MySQL already
  says which);
* ``{"op": "source", "cluster", "user_id", "source"}``: an import of
  ``source`` was stored for ``user_id``;
* ``{"op": "account", "cluster", "account", "change", "after"}``: an
  external account was linked to a user or unlinked; the imports naming
  it are settled a page at a time, ``after`` the importer ``[user_id,
  source]`` the page before ended at (null: from the first), and each
  page names the next (``change`` tells one link's chain from another's);
* a rename page: ``{"cluster", "user_id", "name_at", "phase", "cursor"}``:
  the renamed user's followers ("followers") then followees ("following"),
  a page a job, chained by cursor; each page hands its users to a job of
  their own (the same body with ``"users": [id, ...]``), which settles
  exactly those, so a run again after a crash revisits the same places
  whatever the follows are by then;
* a second_degree page: ``{"cluster", "user_id", "at_ms", "change", "cursor"}``:
  ``user_id`` followed or unfollowed someone at ``at_ms``, which changes
  its own second_degree contacts and those of each of its followers. The
  first job recomputes the user's, then the followers' a page a job, as
  a rename's pages do (``"users"`` on a page's own job). With
  ``"renamed"``, a user it follows was renamed at ``at_ms``: only its
  followers' lists show that name.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from tasks import bodies
from tasks.appdata.contacts import Importer, InvalidContacts, check_account, check_source
from tasks.appdata.ids import InvalidId, ObjectType, expect_type
from tasks.appdata.mappings import MAX_PAGE, Cursor
from tasks.hbase import PRIMARY, STANDBY
from tasks.typeahead.sources import IMPORTED, UnknownSource, source_named

CLUSTERS = (PRIMARY, STANDBY)
Phase = Literal["followers", "following"]


class InvalidTypeaheadJob(ValueError):
    """A body no retry can fix."""


def _user(value: object, what: str) -> int:
    try:
        if type(value) is not int:
            raise InvalidId(f"must be an int, got {type(value).__name__}")
        expect_type(value, ObjectType.USER)
        return value
    except (InvalidId, ValueError) as exc:
        raise InvalidTypeaheadJob(f"{what}: {exc}") from None


def _cluster(value: object) -> str:
    if value not in CLUSTERS:
        raise InvalidTypeaheadJob(f"cluster must be one of {CLUSTERS}, got {str(value)[:40]!r}")
    return str(value)


def _time(value: object, what: str) -> int:
    if type(value) is not int or not 0 < value < 2**53:
        raise InvalidTypeaheadJob(f"{what} must be a positive int (ms), got {str(value)[:40]!r}")
    return value


def _importer(value: object) -> Importer | None:
    if value is None:
        return None
    try:
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise InvalidContacts("must be [user_id, source]")
        return _user(value[0], "after's user_id"), check_source(value[1])
    except InvalidContacts as exc:
        raise InvalidTypeaheadJob(f"typeahead account job: after {exc}") from None


def _change(value: object) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= 64 or not value.isascii() or not value.isalnum():
        raise InvalidTypeaheadJob(f"change must be 1 to 64 letters and digits, got {str(value)[:40]!r}")
    return value


@dataclass(frozen=True, slots=True)
class UpdateJob:
    op: Literal["follow", "source", "account"]
    cluster: str
    fields: dict[str, Any]

    @classmethod
    def follow(cls, cluster: str, follower_id: int, followee_id: int, at_ms: int) -> UpdateJob:
        return cls.parse({"op": "follow", "cluster": cluster, "follower_id": follower_id,
                          "followee_id": followee_id, "at_ms": at_ms})

    @classmethod
    def source(cls, cluster: str, user_id: int, source: str) -> UpdateJob:
        return cls.parse({"op": "source", "cluster": cluster, "user_id": user_id, "source": source})

    @classmethod
    def account(cls, cluster: str, account: str, change: str, after: Importer | None = None) -> UpdateJob:
        return cls.parse({"op": "account", "cluster": cluster, "account": account, "change": change,
                          "after": None if after is None else list(after)})

    @property
    def after(self) -> Importer | None:
        """An account job's importer its page starts after."""
        return _importer(self.fields.get("after"))

    def next_page(self, after: Importer) -> UpdateJob:
        """An account job's next page, after ``after``."""
        return UpdateJob.account(self.cluster, self.fields["account"], self.fields["change"], after)

    @classmethod
    def parse(cls, data: dict[str, Any]) -> UpdateJob:
        op = data.get("op")
        if op == "follow":
            data = bodies.load(bodies.dump(data), "typeahead follow job",
                               ("op", "cluster", "follower_id", "followee_id", "at_ms"), (), InvalidTypeaheadJob)
            follower, followee = _user(data["follower_id"], "follower_id"), _user(data["followee_id"], "followee_id")
            if follower == followee:
                raise InvalidTypeaheadJob(f"typeahead follow job: {follower} cannot follow itself")
            _time(data["at_ms"], "at_ms")
        elif op == "source":
            data = bodies.load(bodies.dump(data), "typeahead source job",
                               ("op", "cluster", "user_id", "source"), (), InvalidTypeaheadJob)
            _user(data["user_id"], "user_id")
            try:
                if source_named(str(data["source"])) not in IMPORTED:
                    raise UnknownSource(f"{data['source']!r} is not an imported source")
            except UnknownSource as exc:
                raise InvalidTypeaheadJob(f"typeahead source job: {exc}") from None
        elif op == "account":
            data = bodies.load(bodies.dump(data), "typeahead account job",
                               ("op", "cluster", "account", "change"), ("after",), InvalidTypeaheadJob)
            try:
                check_account(data["account"])
            except InvalidContacts as exc:
                raise InvalidTypeaheadJob(f"typeahead account job: {exc}") from None
            _change(data["change"])
            _importer(data.get("after"))
        else:
            raise InvalidTypeaheadJob(
                f"typeahead job: op must be 'follow', 'source' or 'account', got {str(op)[:40]!r}")
        return cls(op, _cluster(data["cluster"]), data)

    def to_json(self) -> str:
        return bodies.dump(self.fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> UpdateJob:
        data = bodies.load(text, "typeahead job", ("op", "cluster"),
                           ("follower_id", "followee_id", "at_ms", "user_id", "source", "account", "change", "after"),
                           InvalidTypeaheadJob)
        return cls.parse(data)


def owner_key(user_id: int) -> str:
    """The fairness key of a job that changes ``user_id``'s index entries:
    one user's burst takes turns with everyone else's updates."""
    return f"owner:{user_id}"


def account_fairness_key(account: str) -> str:
    """The fairness key of an account's fix-up: its pages take turns with
    everyone else's updates (a short digest: keys are short strings)."""
    return "account:" + hashlib.sha256(account.encode()).hexdigest()[:16]


def _check_page(users: tuple[int, ...] | None, cursor: str | None, what: str) -> None:
    """A chained page job's users (a page's, to settle) and cursor (where the page starts)."""
    if users is not None:
        if not isinstance(users, tuple) or not 0 < len(users) <= MAX_PAGE:
            raise InvalidTypeaheadJob(f"{what}: users must be 1 to {MAX_PAGE} user ids")
        for user in users:
            _user(user, "users")
    if cursor is not None:
        try:
            Cursor.decode(cursor)
        except (ValueError, TypeError) as exc:
            raise InvalidTypeaheadJob(f"{what}: bad cursor: {exc}") from None


def _users_as_tuple(data: dict[str, Any], what: str) -> dict[str, Any]:
    users = data.get("users")
    if users is not None:
        if not isinstance(users, list):
            raise InvalidTypeaheadJob(f"{what}: users must be a list of user ids")
        data["users"] = tuple(users)
    return data


@dataclass(frozen=True, slots=True)
class RenameJob:
    cluster: str
    user_id: int
    name_at: int
    phase: Phase = "followers"
    cursor: str | None = None
    users: tuple[int, ...] | None = None  # a page's users, to settle; None: read the page

    def __post_init__(self) -> None:
        _cluster(self.cluster)
        _user(self.user_id, "user_id")
        _time(self.name_at, "name_at")
        _check_page(self.users, self.cursor, "rename job")
        if self.phase not in ("followers", "following"):
            raise InvalidTypeaheadJob(f"rename job: phase must be followers or following, got {self.phase!r}")

    def to_json(self) -> str:
        fields: dict[str, Any] = {"cluster": self.cluster, "user_id": self.user_id, "name_at": self.name_at,
                                  "phase": self.phase, "cursor": self.cursor}
        if self.users is not None:
            fields["users"] = list(self.users)
        return bodies.dump(fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> RenameJob:
        data = bodies.load(text, "rename job", ("cluster", "user_id", "name_at"), ("phase", "cursor", "users"),
                           InvalidTypeaheadJob)
        return cls(**_users_as_tuple(data, "rename job"))


@dataclass(frozen=True, slots=True)
class SecondJob:
    cluster: str
    user_id: int
    at_ms: int
    # One chain's pages (its jobs' keys): a user's two follows in one
    # millisecond are two chains.
    change: str
    cursor: str | None = None  # None on the first job: the user's own list, then the first page
    users: tuple[int, ...] | None = None  # a page's users, to recompute; None: read the page
    renamed: int | None = None  # a user it follows was renamed (at at_ms), not a follow of its own

    @classmethod
    def started(cls, cluster: str, user_id: int, at_ms: int) -> SecondJob:
        """The first job of the chain of ``user_id``'s follow or unfollow at ``at_ms``."""
        return cls(cluster, user_id, at_ms, uuid.uuid4().hex)

    @classmethod
    def renaming(cls, cluster: str, actor: int, renamed: int, name_at: int) -> SecondJob:
        """The chain of ``actor``'s followers after ``renamed``, whom it
        follows, was renamed at ``name_at``: the same job each time a
        rename's page names it (a page run again starts no second chain)."""
        return cls(cluster, actor, name_at, f"r{renamed}t{name_at}", renamed=renamed)

    def __post_init__(self) -> None:
        _cluster(self.cluster)
        _user(self.user_id, "user_id")
        _time(self.at_ms, "at_ms")
        _change(self.change)
        _check_page(self.users, self.cursor, "second_degree job")
        if self.renamed is not None:
            _user(self.renamed, "renamed")

    def to_json(self) -> str:
        fields: dict[str, Any] = {"cluster": self.cluster, "user_id": self.user_id, "at_ms": self.at_ms,
                                  "change": self.change, "cursor": self.cursor}
        if self.users is not None:
            fields["users"] = list(self.users)
        if self.renamed is not None:
            fields["renamed"] = self.renamed
        return bodies.dump(fields)

    @classmethod
    def from_json(cls, text: str | bytes) -> SecondJob:
        data = bodies.load(text, "second_degree job", ("cluster", "user_id", "at_ms", "change"),
                           ("cursor", "users", "renamed"), InvalidTypeaheadJob)
        return cls(**_users_as_tuple(data, "second_degree job"))
