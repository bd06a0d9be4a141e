"""Object tables on 4 shards of the real MariaDB."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tasks.appdata import graph, objects
from tasks.appdata.errors import AppDataUnavailable, UnknownShard
from tasks.appdata.ids import InvalidId, ObjectType, make_id, split_id
from tasks.appdata.settings import AppDataSettings
from tasks.appdata.shardmap import ShardMap
from tasks.appdata.sql import Digest
from tasks.appdata.store import AppData


def test_objects_on_every_shard_and_batch_get_keeps_order(appdata: AppData) -> None:
    users = [graph.create_user(appdata, {"name": f"ü{shard}"}, shard=shard) for shard in (0, 1, 2, 3)]
    assert [split_id(u.id).shard for u in users] == [0, 1, 2, 3]
    boards = [graph.create_board(appdata, u.id, {"name": "b"}) for u in users]
    pins = [
        graph.create_pin(appdata, u.id, b.id, {"details": "p", "n": i})
        for i, (u, b) in enumerate(zip(users, boards, strict=True))
    ]
    assert all(split_id(b.id).shard == split_id(u.id).shard for u, b in zip(users, boards, strict=True))
    assert all(split_id(p.id).shard == split_id(b.id).shard for p, b in zip(pins, boards, strict=True))

    missing = make_id(2, ObjectType.PIN, 10**9)  # a shard we have, a row we don't
    wanted = [pins[3].id, users[0].id, missing, boards[2].id, pins[0].id, users[0].id]
    got = objects.get_many(appdata, wanted)
    assert [o.id for o in got] == [pins[3].id, users[0].id, boards[2].id, pins[0].id, users[0].id]
    assert got[0].data == {"details": "p", "n": 3, "user_id": users[3].id, "board_id": boards[3].id}
    assert got[0].type is ObjectType.PIN and got[0].created_at_ms == pins[3].created_at_ms
    assert got[1].data == {"name": "ü0"}
    assert objects.get(appdata, missing) is None
    assert objects.get(appdata, users[1].id) == users[1]
    assert [p.id for p in graph.get_pins(appdata, [pins[1].id, missing, pins[2].id])] == [pins[1].id, pins[2].id]
    with pytest.raises(InvalidId, match="is a user, not a pin"):
        graph.get_pins(appdata, [users[0].id])
    assert objects.get_many(appdata, []) == []


def test_same_local_id_in_two_tables_of_one_shard_stays_apart(appdata: AppData) -> None:
    # One UNION ALL statement reads users and pins of the same database.
    user = graph.create_user(appdata, {"k": "user"}, shard=1)
    board = graph.create_board(appdata, user.id, {"k": "board"})
    pin = graph.create_pin(appdata, user.id, board.id, {"k": "pin"})
    same_local = [make_id(1, kind, split_id(pin.id).local) for kind in ObjectType]
    got = {o.id: o for o in objects.get_many(appdata, same_local)}
    assert got[pin.id].data["k"] == "pin"
    for object_id, obj in got.items():
        assert obj.type is split_id(object_id).type


def test_create_many_gives_consecutive_ids_in_order(appdata: AppData) -> None:
    rows = [(1_700_000_000_000 + i, {"i": i}) for i in range(12_345)]  # more than one INSERT
    ids = objects.create_many(appdata, ObjectType.USER, 3, rows)
    locals_ = [split_id(i).local for i in ids]
    assert locals_ == list(range(locals_[0], locals_[0] + len(rows)))
    got = objects.get_many(appdata, ids[::1000])
    assert [(o.created_at_ms, o.data["i"]) for o in got] == [(1_700_000_000_000 + i, i) for i in range(0, 12_345, 1000)]


def test_many_ids_across_shards_in_one_call(appdata: AppData) -> None:
    ids = [i for shard in range(4) for i in objects.create_many(appdata, ObjectType.PIN, shard, [(1, {"s": 0})] * 1200)]
    got = objects.get_many(appdata, ids[::-1])  # 4,800 ids: two IN lists per shard
    assert [o.id for o in got] == ids[::-1]


def test_unknown_shard_and_bad_data_are_refused(appdata: AppData) -> None:
    with pytest.raises(UnknownShard):
        objects.get_many(appdata, [make_id(4, ObjectType.PIN, 1)])
    with pytest.raises(TypeError):
        objects.create(appdata, ObjectType.USER, 0, ["not", "an", "object"])  # type: ignore[arg-type]
    with pytest.raises(InvalidId):
        graph.create_board(appdata, make_id(0, ObjectType.PIN, 1), {})
    # A user's name is bounded as a rename bounds it: every index entry and
    # lookup answer naming the user copies it.
    for name in ("x" * 201, "", "a\x00b", 7):
        with pytest.raises(ValueError, match=r"a name is 1\.\.200 characters"):
            graph.create_user(appdata, {"name": name}, shard=0)
    assert graph.create_user(appdata, {"name": "y" * 200}, shard=0).data["name"] == "y" * 200


def test_unreachable_server_is_app_data_unavailable() -> None:
    store = AppData(AppDataSettings(ShardMap.parse("0-3=mysql://pinlater:pinlater@127.0.0.1:1"), socket_timeout_s=1))
    with pytest.raises(AppDataUnavailable, match=re.escape("127.0.0.1:1")):
        objects.get(store, make_id(0, ObjectType.USER, 1))


def test_batch_get_unpacks_every_kind_of_blob_and_reads_a_cut_in_list_row_by_row(
        appdata: AppData, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.appdata import sql as sql_module

    blobs: list[dict[str, Any]] = [
        {}, {"name": "Zoë \"Z\" O'Brien\n\t\\ 😀 \u2028"}, {"f": 1.5, "e": 1e-7, "big": 2**70, "neg": -(2**63)},
        {"nested": {"list": [None, True, False, [], {}], "s": "</script>"}}, {"x": "y" * 5000},
    ]
    made = [objects.create(appdata, ObjectType.BOARD, shard % 4, blob) for shard, blob in enumerate(blobs)]
    made += [objects.create(appdata, ObjectType.BOARD, 2, {"i": i}) for i in range(1_500)]  # two IN lists
    wanted = [*(o.id for o in reversed(made)), make_id(1, ObjectType.BOARD, 10**9)]
    assert objects.get_many(appdata, wanted) == made[::-1]
    assert [o.data for o in objects.get_many(appdata, [o.id for o in made[:5]])] == blobs
    monkeypatch.setattr(sql_module, "PACKED_MAX_BYTES", 300)  # every IN list but the tiny ones is cut
    assert objects.get_many(appdata, wanted) == made[::-1]


def test_a_batch_gets_digests_are_what_asking_for_them_gives_until_a_row_changes(
        appdata: AppData, monkeypatch: pytest.MonkeyPatch) -> None:
    from tasks.appdata import sql as sql_module

    blobs: list[dict[str, Any]] = [{"name": "Zoë \"Z\" O'Brien\n\t\\ 😀 \u2028 e\u0301"}, {"f": 1.5, "big": 2**70}]
    made = [objects.create(appdata, ObjectType.USER, shard % 3, blob) for shard, blob in enumerate(blobs * 3)]
    made += [objects.create(appdata, ObjectType.USER, 2, {"name": f"n{i}"}) for i in range(1_200)]  # two IN lists
    wanted = [*(o.id for o in reversed(made)), make_id(1, ObjectType.USER, 10**9), make_id(3, ObjectType.USER, 10**9)]

    def read() -> list[Digest]:
        digests: list[Digest] = []
        assert objects.get_many(appdata, wanted, ObjectType.USER, digests) == made[::-1]
        return digests

    before = read()
    assert len(before) == 5  # shards 0 and 1 (and a missing id), shard 2 in two lists, shard 3 (a missing id)
    assert (0, None) in before  # an IN list of missing ids: nothing read, nothing to hash
    assert all(isinstance(text, str) and len(text) == 64 for count, text in before if count)
    assert objects.digests_of_many(appdata, wanted, ObjectType.USER) == before
    # A changed blob moves the digest of its own IN list only.
    for target in (made[0], made[-1]):
        objects.update(appdata, target.id, ObjectType.USER, lambda o: {**o.data, "name": "Renamed"})
        made[made.index(target)] = objects.get_many(appdata, [target.id])[0]
        now = objects.digests_of_many(appdata, wanted, ObjectType.USER)
        assert sum(a != b for a, b in zip(now, before, strict=True)) == 1
        assert read() == now
        before = now
    # A list cut by the server is read row by row and its digest never matches.
    monkeypatch.setattr(sql_module, "PACKED_MAX_BYTES", 300)
    cut = read()
    assert [c for c in cut if c[1] == ""] and all(c == (b[0], "") or c == b for c, b in zip(cut, before, strict=True))
    asked = objects.digests_of_many(appdata, wanted, ObjectType.USER)
    assert all(a != c for a, c in zip(asked, cut, strict=True) if c[1] == "")
