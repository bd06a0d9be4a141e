"""Imported contacts and external accounts: the app data behind the
typeahead's external sources (``tasks.typeahead``).

* An import is one user's whole contact list from one external source (an
  address book, a social network), stored as JSON on the user's shard and
  replaced by every later import. Its time is the one asked for, or just
  past the stored import's when that is not earlier: two imports in one
  millisecond (or from processes whose clocks differ a little) keep the
  one made last, and its index entries are versioned after the other's.
* An external account ("email:ann@example.com", "social:12345") maps to the
  Pinterest user who owns it, on the shard its name hashes to (crc32 over
  the shard map's shards: a new shard range needs the table rehashed, a
  step this project has not needed yet). Beside it, on the same shard,
  the imports that name it (``importers``): written before each import is
  stored, so a link or unlink finds every import whose entries it changes.
"""

from __future__ import annotations

import json
import re
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tasks.appdata.ids import ObjectType, expect_type
from tasks.appdata.mappings import fetcher
from tasks.appdata.sql import sql
from tasks.appdata.store import AppData, now_ms
from tasks.appdata.tables import ACCOUNT_IMPORTERS, CONTACT_SOURCES, EXTERNAL_ACCOUNTS

IN_LIST_MAX = 1000
MAX_CONTACTS = 5000
MAX_NAME_CHARS = 200
MAX_ADDRESS_CHARS = 200
_SOURCE = re.compile(r"[a-z][a-z0-9_]{0,31}")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+")


class InvalidContacts(ValueError):
    """An import no retry can fix: a bad source name, contact or list."""


@dataclass(frozen=True, slots=True)
class ContactRecord:
    """One imported contact: a name and an email or an external id (or both)."""

    name: str
    email: str | None = None
    external_id: str | None = None

    @property
    def key(self) -> str:
        """The contact's key within its owner's source (email first)."""
        return f"e:{self.email}" if self.email else f"x:{self.external_id}"

    def accounts(self, source: str) -> list[str]:
        """The external accounts that may name this contact's Pinterest user."""
        out = [f"email:{self.email}"] if self.email else []
        if self.external_id:
            out.append(f"{source}:{self.external_id}")
        return out

    def to_json(self) -> dict[str, str]:
        data = {"name": self.name}
        if self.email:
            data["email"] = self.email
        if self.external_id:
            data["external_id"] = self.external_id
        return data


@dataclass(frozen=True, slots=True)
class SourceImport:
    user_id: int
    source: str
    updated_at_ms: int
    contacts: tuple[ContactRecord, ...]


Importer = tuple[int, str]  # an importing user, and the source of its import


def check_source(source: object) -> str:
    if not isinstance(source, str) or not _SOURCE.fullmatch(source):
        raise InvalidContacts(f"source must match {_SOURCE.pattern}, got {str(source)[:40]!r}")
    return source


def _text(value: object, what: str, limit: int) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidContacts(f"contact {what} must be a string, got {type(value).__name__}")
    value = value.strip()
    if len(value) > limit or "\x00" in value:
        raise InvalidContacts(f"contact {what} must be at most {limit} characters, without NUL")
    return value or None


def parse_contact(raw: object) -> ContactRecord:
    """One contact of an import: ``{"name": ..., "email": ... | "external_id": ...}``."""
    if isinstance(raw, ContactRecord):
        return raw
    if not isinstance(raw, Mapping):
        raise InvalidContacts(f"a contact must be a JSON object, got {type(raw).__name__}")
    unknown = set(raw) - {"name", "email", "external_id"}
    if unknown:
        raise InvalidContacts(f"unknown contact fields: {sorted(unknown)[:5]}")
    name = _text(raw.get("name"), "name", MAX_NAME_CHARS)
    if name is None:
        raise InvalidContacts("a contact needs a name")
    email = _text(raw.get("email"), "email", MAX_ADDRESS_CHARS)
    if email is not None:
        if not _EMAIL.fullmatch(email):
            raise InvalidContacts(f"not an email address: {email[:60]!r}")
        email = email.lower()
    external_id = _text(raw.get("external_id"), "external_id", MAX_ADDRESS_CHARS)
    if email is None and external_id is None:
        raise InvalidContacts(f"contact {name[:40]!r} needs an email or an external_id")
    return ContactRecord(name, email, external_id)


def parse_contacts(raw: object) -> tuple[ContactRecord, ...]:
    """A whole import; a contact listed twice (same key) is kept once, the last one."""
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise InvalidContacts("contacts must be a JSON list")
    if len(raw) > MAX_CONTACTS:
        raise InvalidContacts(f"at most {MAX_CONTACTS} contacts per import, got {len(raw)}")
    by_key = {c.key: c for c in map(parse_contact, raw)}
    return tuple(by_key.values())


def put_source(
    store: AppData, user_id: int, source: str, contacts: object, *, at_ms: int | None = None
) -> SourceImport:
    """Stores ``user_id``'s import from ``source``, replacing the one
    stored; ``at_ms`` (now by default) is the earliest time it gets, and the
    result has the time it got."""
    shard = expect_type(user_id, ObjectType.USER).shard
    check_source(source)
    records = parse_contacts(contacts)
    asked = now_ms() if at_ms is None else at_ms
    # Before the import: a link that commits after it finds this importer.
    note_importers(store, user_id, source, (a for c in records for a in c.accounts(source)))
    blob = json.dumps([c.to_json() for c in records], separators=(",", ":"), ensure_ascii=False)
    stmt = sql("put_contact_source", database=store.locate(shard).database, table=CONTACT_SOURCES)

    def put(cursor: Any, _database: str) -> int:
        inserted = cursor.execute(stmt, (user_id, source, asked, blob)) == 1
        return asked if inserted else int(cursor.lastrowid)

    return SourceImport(user_id, source, store.run(shard, put), records)


def _import_of(row: Sequence[Any]) -> SourceImport:
    user_id, source, updated_at, blob = row
    records = tuple(ContactRecord(**c) for c in json.loads(blob))
    return SourceImport(int(user_id), str(source), int(updated_at), records)


def imports_page(store: AppData, shard: int, *, after: Importer | None = None, limit: int = 500
                 ) -> list[SourceImport]:
    """The imports stored on ``shard``, in (user, source) order, the first ``limit`` after ``after``."""
    stmt = sql("contact_sources_page", database=store.locate(shard).database, table=CONTACT_SOURCES)
    user, source = after if after is not None else (0, "")
    return [_import_of(row) for row in store.run(shard, fetcher(stmt, [user, user, source, limit]))]


def index_importers(store: AppData, *, page: int = 500,
                    progress: Callable[[int, int, int], None] | None = None) -> tuple[int, int]:
    """Notes the accounts of every stored import (``note_importers``), a
    page of imports at a time: for imports stored before their accounts'
    importers were noted. Safe to run beside new imports, and again.
    ``progress(shard, imports, accounts)`` after each page; the totals."""
    imports = accounts = 0
    for shard in sorted(store.shard_map.shards):
        after: Importer | None = None
        while True:
            found = imports_page(store, shard, after=after, limit=page)
            rows = [(a, imp.user_id, imp.source) for imp in found for c in imp.contacts for a in c.accounts(imp.source)]
            _note(store, rows)  # the page's rows together: a statement per shard, not per import
            accounts += len(rows)
            imports += len(found)
            if progress is not None:
                progress(shard, imports, accounts)
            if len(found) < page:
                break
            after = (found[-1].user_id, found[-1].source)
    return imports, accounts


def sources_of(store: AppData, user_ids: Iterable[int]) -> dict[int, list[SourceImport]]:
    """Every stored import of each user (users without any are left out)."""
    by_shard: dict[int, list[int]] = defaultdict(list)
    for user_id in dict.fromkeys(user_ids):
        by_shard[expect_type(user_id, ObjectType.USER).shard].append(user_id)
    out: dict[int, list[SourceImport]] = defaultdict(list)
    for shard, ids in by_shard.items():
        database = store.locate(shard).database
        for start in range(0, len(ids), IN_LIST_MAX):
            part = ids[start : start + IN_LIST_MAX]
            stmt = sql("contact_sources_of_users", database=database, table=CONTACT_SOURCES, ids=len(part))
            for row in store.run(shard, fetcher(stmt, part)):
                imp = _import_of(row)
                out[imp.user_id].append(imp)
    return dict(out)


def _account_shard(store: AppData, account: str) -> int:
    shards = sorted(store.shard_map.shards)
    return shards[zlib.crc32(account.encode()) % len(shards)]


def check_account(account: object) -> str:
    try:
        size = len(account.encode()) if isinstance(account, str) else 0
    except UnicodeEncodeError:  # a lone surrogate, which JSON can carry
        size = 0
    if not isinstance(account, str) or not 3 <= size <= 255 or ":" not in account:
        raise InvalidContacts(f"an account is 'kind:name', at most 255 bytes, got {str(account)[:40]!r}")
    return account


def link_account(store: AppData, account: str, user_id: int) -> None:
    """Records that ``account`` belongs to ``user_id`` (a later link moves it)."""
    expect_type(user_id, ObjectType.USER)
    shard = _account_shard(store, check_account(account))
    stmt = sql("link_account", database=store.locate(shard).database, table=EXTERNAL_ACCOUNTS)
    store.run(shard, lambda c, _db: c.execute(stmt, (account.encode(), user_id)))


def unlink_account(store: AppData, account: str) -> bool:
    """``account`` belongs to no user any more; False if it was not linked."""
    shard = _account_shard(store, check_account(account))
    stmt = sql("unlink_account", database=store.locate(shard).database, table=EXTERNAL_ACCOUNTS)
    return bool(store.run(shard, lambda c, _db: c.execute(stmt, (account.encode(),))))


def note_importers(store: AppData, user_id: int, source: str, accounts: Iterable[str]) -> None:
    """Records that ``user_id``'s import of ``source`` names ``accounts``."""
    _note(store, ((account, user_id, source) for account in accounts))


def _note(store: AppData, rows: Iterable[tuple[str, int, str]]) -> None:
    """(account, importer, source) rows, in one statement per shard and IN_LIST_MAX rows."""
    by_shard: dict[int, list[tuple[str, int, str]]] = defaultdict(list)
    for row in dict.fromkeys(rows):
        by_shard[_account_shard(store, check_account(row[0]))].append(row)
    for shard, found in sorted(by_shard.items()):
        database = store.locate(shard).database
        for start in range(0, len(found), IN_LIST_MAX):
            part = found[start : start + IN_LIST_MAX]
            stmt = sql("note_importers", database=database, table=ACCOUNT_IMPORTERS, rows=len(part))
            store.run(shard, _executor(stmt, [v for a, u, s in part for v in (a.encode(), u, s)]))


def _executor(stmt: str, args: list[object]) -> Callable[[Any, str], int]:
    return lambda cursor, _database: int(cursor.execute(stmt, args))


def importers(store: AppData, account: str, *, after: Importer | None = None, limit: int = 500
              ) -> list[Importer]:
    """The imports that named ``account`` (some may not any more), in
    order, the first ``limit`` after ``after``."""
    shard = _account_shard(store, check_account(account))
    stmt = sql("importers_page", database=store.locate(shard).database, table=ACCOUNT_IMPORTERS)
    user, source = after if after is not None else (0, "")
    rows = store.run(shard, fetcher(stmt, [account.encode(), user, user, source, limit]))
    return [(int(u), str(s)) for u, s in rows]


def resolve_accounts(store: AppData, accounts: Iterable[str]) -> dict[str, int]:
    """The Pinterest user of each account that has one."""
    by_shard: dict[int, list[str]] = defaultdict(list)
    for account in dict.fromkeys(accounts):
        by_shard[_account_shard(store, check_account(account))].append(account)
    found: dict[str, int] = {}
    for shard, names in by_shard.items():
        database = store.locate(shard).database
        for start in range(0, len(names), IN_LIST_MAX):
            part = [n.encode() for n in names[start : start + IN_LIST_MAX]]
            stmt = sql("resolve_accounts", database=database, table=EXTERNAL_ACCOUNTS, ids=len(part))
            found.update((bytes(a).decode(), int(u)) for a, u in store.run(shard, fetcher(stmt, part)))
    return found
