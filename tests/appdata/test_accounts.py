"""External accounts on MariaDB: links, unlinks, and the imports that name
an account (``contacts.importers``), which a link's fix-up pages through."""

from __future__ import annotations

import uuid

import pytest

from tasks.appdata import contacts, graph
from tasks.appdata.store import AppData


def _users(appdata: AppData, n: int) -> list[int]:
    shards = sorted(appdata.shard_map.shards)
    return [graph.create_user(appdata, {"name": f"U{i}"}, shard=shards[i % len(shards)]).id for i in range(n)]


def test_link_moves_and_unlink_removes(appdata: AppData) -> None:
    ann, bob = _users(appdata, 2)
    account = f"email:{uuid.uuid4().hex}@example.com"
    assert contacts.resolve_accounts(appdata, [account]) == {}
    contacts.link_account(appdata, account, ann)
    assert contacts.resolve_accounts(appdata, [account]) == {account: ann}
    contacts.link_account(appdata, account, bob)
    assert contacts.resolve_accounts(appdata, [account]) == {account: bob}
    assert contacts.unlink_account(appdata, account) is True
    assert contacts.resolve_accounts(appdata, [account]) == {}
    assert contacts.unlink_account(appdata, account) is False


def test_every_import_naming_an_account_is_found_page_by_page(appdata: AppData) -> None:
    tag = uuid.uuid4().hex[:8]
    owners = _users(appdata, 7)
    email, social = f"eve.{tag}@example.com", f"x{tag}"
    for i, owner in enumerate(owners):
        contacts.put_source(appdata, owner, "address_book", [{"name": "Eve", "email": email}])
        if i % 2:
            contacts.put_source(appdata, owner, "social", [{"name": "Eve", "email": email, "external_id": social}])
    want = sorted([(o, "address_book") for o in owners] + [(o, "social") for o in owners[1::2]])
    pages, after = [], None
    while True:
        page = contacts.importers(appdata, f"email:{email}", after=after, limit=3)
        pages.append(page)
        if len(page) < 3:
            break
        after = page[-1]
    assert [i for page in pages for i in page] == want
    assert all(len(page) <= 3 for page in pages)
    assert contacts.importers(appdata, f"social:{social}") == [(o, "social") for o in sorted(owners[1::2])]
    # A later import without the account leaves its row (the fix-up reads the import to know).
    contacts.put_source(appdata, owners[0], "address_book", [])
    assert (owners[0], "address_book") in contacts.importers(appdata, f"email:{email}")


@pytest.mark.parametrize("account", ["", "nocolon", "x" * 300, "email:\ud800@example.com", 5])
def test_a_bad_account_is_refused_with_one_line(appdata: AppData, account: object) -> None:
    with pytest.raises(contacts.InvalidContacts, match="an account is 'kind:name'"):
        contacts.unlink_account(appdata, account)  # type: ignore[arg-type]
    with pytest.raises(contacts.InvalidContacts, match="an account is 'kind:name'"):
        contacts.importers(appdata, account)  # type: ignore[arg-type]
