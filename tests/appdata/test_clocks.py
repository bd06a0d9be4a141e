"""Times of actions made in one millisecond, on MariaDB: every "newer wins"
record of the app data takes a time past the one it replaces, so the action
made last wins."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tasks.appdata import contacts, graph
from tasks.appdata.store import AppData

T0 = 1_750_000_000_000


def _users(appdata: AppData, n: int) -> list[int]:
    shards = sorted(appdata.shard_map.shards)
    return [graph.create_user(appdata, {"name": f"U{i}"}, shard=shards[i % len(shards)], created_at_ms=T0).id
            for i in range(n)]


def _book(name: str) -> list[dict[str, str]]:
    return [{"name": name, "email": f"{name.lower()}@example.com"}]


def _stored(appdata: AppData, user: int, source: str) -> contacts.SourceImport:
    (found,) = [i for i in contacts.sources_of(appdata, [user])[user] if i.source == source]
    return found


def test_two_imports_in_one_millisecond_keep_the_second(appdata: AppData) -> None:
    (me,) = _users(appdata, 1)
    first = contacts.put_source(appdata, me, "address_book", _book("Old"), at_ms=T0)
    second = contacts.put_source(appdata, me, "address_book", _book("New"), at_ms=T0)
    assert (first.updated_at_ms, second.updated_at_ms) == (T0, T0 + 1)
    assert _stored(appdata, me, "address_book") == second
    # One asking for an earlier time is still made last: it wins, just after.
    third = contacts.put_source(appdata, me, "address_book", _book("Third"), at_ms=T0 - 5)
    assert third.updated_at_ms == T0 + 2 and _stored(appdata, me, "address_book") == third
    # A later time is taken as asked; another source has a clock of its own.
    assert contacts.put_source(appdata, me, "address_book", [], at_ms=T0 + 100).updated_at_ms == T0 + 100
    assert contacts.put_source(appdata, me, "social", _book("Else"), at_ms=T0).updated_at_ms == T0


def test_imports_at_once_get_distinct_times_and_the_last_stays(appdata: AppData) -> None:
    (me,) = _users(appdata, 1)
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda i: contacts.put_source(appdata, me, "address_book", _book(f"N{i}"), at_ms=T0),
                             range(24)))
    assert sorted(i.updated_at_ms for i in made) == list(range(T0, T0 + 24))
    assert _stored(appdata, me, "address_book") == max(made, key=lambda i: i.updated_at_ms)
