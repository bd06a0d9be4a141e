"""``pinlater-typeahead link``, ``unlink`` and ``index-importers`` on the
test MariaDB, with an in-memory job service for the fix-up jobs: what they
change in the app data, what they print, and their one-line errors."""

from __future__ import annotations

import uuid

import pytest

from tasks.appdata import contacts
from tasks.appdata.ids import split_id
from tasks.appdata.sql import sql
from tasks.appdata.store import AppData, now_ms
from tasks.appdata.tables import CONTACT_SOURCES
from tasks.typeahead import cli
from tests.support.appdata import ENV as APPDATA_ENV
from tests.typeahead.helpers import users


@pytest.fixture
def cli_env(appdata: AppData, monkeypatch: pytest.MonkeyPatch) -> AppData:
    for name, value in {**APPDATA_ENV, "PINLATER_SHARDS": "m1=memory://",
                        "PINLATER_CONTROL_URL": "memory://typeahead-cli"}.items():
        monkeypatch.setenv(name, value)
    return appdata


def test_link_and_unlink_change_the_app_data_and_enqueue_fix_ups(
    cli_env: AppData, capsys: pytest.CaptureFixture[str]
) -> None:
    (eve,) = users(cli_env, "Eve Evans")
    account = f"email:eve.{uuid.uuid4().hex[:8]}@example.com"
    assert cli.main(["link", account, str(eve)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{account} linked to user {eve}; fix-up jobs typeahead_update:") and out.count(",") == 1
    assert contacts.resolve_accounts(cli_env, [account]) == {account: eve}
    assert cli.main(["unlink", account]) == 0
    assert capsys.readouterr().out == f"{account} unlinked; fix-up jobs enqueued\n"
    assert contacts.resolve_accounts(cli_env, [account]) == {}
    assert cli.main(["unlink", account]) == 0
    assert capsys.readouterr().out == f"{account} was not linked; fix-up jobs enqueued\n"


@pytest.mark.parametrize(("args", "says"), [
    (["link", "nocolon", "68719476737"], "an account is 'kind:name'"),
    (["link", "email:a@x", "abc"], "user id"),
    (["unlink", "x" * 300], "at most 255 bytes"),
    (["index-importers", "--page", "0"], "--page must be in 1..10000"),
])
def test_bad_input_is_one_line_and_exit_2(
    cli_env: AppData, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and says in err, err


def test_index_importers_notes_imports_stored_before_links_could_find_them(
    cli_env: AppData, capsys: pytest.CaptureFixture[str]
) -> None:
    (owner,) = users(cli_env, "Olga Old")
    email = f"old.{uuid.uuid4().hex[:8]}@example.com"
    # An import as an older version stored it: its accounts not noted.
    shard = split_id(owner).shard
    stmt = sql("put_contact_source", database=cli_env.locate(shard).database, table=CONTACT_SOURCES)
    blob = f'[{{"name":"Old Friend","email":"{email}"}}]'
    cli_env.run(shard, lambda c, _db: c.execute(stmt, (owner, "address_book", now_ms(), blob)))
    assert contacts.importers(cli_env, f"email:{email}") == []
    assert cli.main(["index-importers", "--page", "7"]) == 0
    captured = capsys.readouterr()
    assert captured.out.endswith(" accounts noted\n") and "shard " in captured.err
    assert contacts.importers(cli_env, f"email:{email}") == [(owner, "address_book")]
    assert cli.main(["index-importers"]) == 0  # again: nothing new, nothing twice
    assert contacts.importers(cli_env, f"email:{email}") == [(owner, "address_book")]
