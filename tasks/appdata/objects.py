"""Object tables: users, boards and pins, each row a local id, created_at
(ms) and a JSON blob. Create (one or many on one shard), get, and batch get
across shards (one round trip per server, order kept)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pymysql.cursors import Cursor

from tasks.appdata.ids import InvalidId, ObjectType, make_id, split_id
from tasks.appdata.mappings import executor
from tasks.appdata.shardmap import Server, ShardLocation
from tasks.appdata.sql import Digest, digest, packed, sql
from tasks.appdata.store import AppData, now_ms
from tasks.appdata.tables import OBJECT_TABLES

IN_LIST_MAX = 1000
UPDATE_ATTEMPTS = 20
# SELECTs joined by UNION ALL in one statement (one per database and type).
UNION_MAX = 64
# Rows and bytes of data per multi-row INSERT (below MariaDB's default 16 MB
# max_allowed_packet, with room for escaping).
INSERT_CHUNK_BYTES = 4 * 1024 * 1024
INSERT_CHUNK_ROWS = 5000
JSONObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class AppObject:
    id: int
    type: ObjectType
    created_at_ms: int
    data: JSONObject


def _encode(data: Mapping[str, Any]) -> str:
    if not isinstance(data, Mapping):
        raise TypeError(f"object data must be a JSON object (a mapping), got {type(data).__name__}")
    return json.dumps(dict(data), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def create(
    store: AppData, kind: ObjectType, shard: int, data: Mapping[str, Any], *, created_at_ms: int | None = None
) -> AppObject:
    """Insert one object on ``shard``; its id is composed from the
    auto-increment local id MySQL hands back."""
    created = now_ms() if created_at_ms is None else created_at_ms
    blob = _encode(data)
    table = OBJECT_TABLES[kind]

    def insert(cursor: Cursor, database: str) -> int:
        cursor.execute(sql("insert_object", database=database, table=table), (created, blob))
        return int(cursor.lastrowid)

    local = store.run(shard, insert)
    return AppObject(make_id(shard, kind, local), kind, created, json.loads(blob))


def create_many(
    store: AppData, kind: ObjectType, shard: int, rows: Sequence[tuple[int, Mapping[str, Any]]]
) -> list[int]:
    """Insert ``(created_at_ms, data)`` rows on ``shard`` with multi-row
    INSERTs; their ids, in order. Ids of one INSERT are consecutive from its
    first (LAST_INSERT_ID) when the server's auto-increment lock mode is 0
    or 1 and the increment 1 (MariaDB's defaults); otherwise rows go one by
    one."""
    table = OBJECT_TABLES[kind]
    encoded = [(created, _encode(data)) for created, data in rows]
    chunks: list[list[tuple[int, str]]] = [[]]
    size = 0
    for row in encoded:
        if chunks[-1] and (size + len(row[1]) + 32 > INSERT_CHUNK_BYTES or len(chunks[-1]) >= INSERT_CHUNK_ROWS):
            chunks.append([])
            size = 0
        chunks[-1].append(row)
        size += len(row[1]) + 32

    def insert(cursor: Cursor, database: str) -> list[int]:
        cursor.execute(sql("autoinc_mode"))
        mode, increment = cursor.fetchone() or (2, 1)
        if int(mode) == 2 or int(increment) != 1:
            one = sql("insert_object", database=database, table=table)
            out: list[int] = []
            for row in encoded:
                cursor.execute(one, row)
                out.append(int(cursor.lastrowid))
            return out
        locals_: list[int] = []
        for chunk in chunks:
            if not chunk:
                continue
            stmt = sql("insert_objects", database=database, table=table, rows=len(chunk))
            written = cursor.execute(stmt, [value for row in chunk for value in row])
            if written != len(chunk):
                raise RuntimeError(f"multi-row insert wrote {written} of {len(chunk)} rows")
            first = int(cursor.lastrowid)  # LAST_INSERT_ID(): the statement's first row
            locals_.extend(range(first, first + len(chunk)))
        return locals_

    if not encoded:
        return []
    return [make_id(shard, kind, local) for local in store.run(shard, insert)]


def max_local_id(store: AppData, kind: ObjectType, shard: int) -> int:
    """The highest local id of ``kind`` on ``shard`` (0 when it has none)."""
    stmt = sql("max_local_id", database=store.locate(shard).database, table=OBJECT_TABLES[kind])

    def fetch(cursor: Cursor, _database: str) -> int:
        cursor.execute(stmt)
        row = cursor.fetchone()
        return int(row[0]) if row else 0

    return store.run(shard, fetch)


def ids_in_local_range(store: AppData, kind: ObjectType, shard: int, first: int, last: int) -> list[int]:
    """The ids of the objects of ``kind`` on ``shard`` whose local ids are in
    ``first..last`` (inclusive), ascending: one page of a walk over a shard."""
    if type(first) is not int or type(last) is not int or not 1 <= first <= last:
        raise ValueError(f"local id range must be ints with 1 <= first <= last, got {first!r}..{last!r}")
    stmt = sql("local_ids_in_range", database=store.locate(shard).database, table=OBJECT_TABLES[kind])

    def fetch(cursor: Cursor, _database: str) -> list[int]:
        cursor.execute(stmt, (first, last))
        return [make_id(shard, kind, int(row[0])) for row in cursor.fetchall()]

    return store.run(shard, fetch)


def get(store: AppData, object_id: int) -> AppObject | None:
    found = get_many(store, [object_id])
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class _Piece:
    """One IN list of a batch get: local ids of one type in one database."""

    database: str
    shard: int
    type: ObjectType
    locals: list[int]

    def render(self, name: str) -> str:
        return sql(name, database=self.database, table=OBJECT_TABLES[self.type], ids=len(self.locals))


def _union(store: AppData, server: Server, stmt: str, args: list[Any]) -> tuple[tuple[Any, ...], ...]:
    def fetch(cursor: Cursor) -> tuple[tuple[Any, ...], ...]:
        cursor.execute(stmt, args)
        return cursor.fetchall()

    return store.pool(server).run(fetch)


def _numbered(store: AppData, server: Server, pieces: list[_Piece], block: str) -> list[Any]:
    """The one ``(number, count, text)`` row ``block`` gives each piece, all
    in one statement, in piece order (UNION ALL promises none), so that
    digests line up."""
    stmt = packed("\nUNION ALL\n".join(f"({piece.render(block)})" for piece in pieces))
    args = [a for number, piece in enumerate(pieces) for a in (number, *piece.locals)]
    return sorted(_union(store, server, stmt, args), key=lambda row: int(row[0]))


def _read_packed(
    store: AppData, server: Server, pieces: list[_Piece]
) -> list[tuple[_Piece, list[Any] | None, Digest]]:
    """Each piece's rows as ``[local_id, created_at, data]`` lists, data
    decoded, in one statement, and its digest; None for a piece whose
    aggregate the server cut (or sent as NULL), or holding a blob
    JSON_EXTRACT could not read."""
    out: list[tuple[_Piece, list[Any] | None, Digest]] = []
    for number, count, text in _numbered(store, server, pieces, "get_objects_packed"):
        rows: list[Any] | None = [] if not count else None
        if count and text is not None:
            try:
                decoded = json.loads(text)
            except ValueError:  # cut short
                decoded = None
            if isinstance(decoded, list) and len(decoded) == int(count) and all(r[2] is not None for r in decoded):
                rows = decoded
        out.append((pieces[int(number)], rows, digest(int(count), text, whole=rows is not None)))
    return out


def _read_rows(store: AppData, server: Server, pieces: list[_Piece]) -> list[AppObject]:
    """The objects of ``pieces`` read row by row (what could not be packed)."""
    out: list[AppObject] = []
    for start in range(0, len(pieces), UNION_MAX):
        batch = pieces[start : start + UNION_MAX]
        stmt = "\nUNION ALL\n".join(f"({piece.render('get_objects')})" for piece in batch)
        args = [a for piece in batch for a in (piece.shard, int(piece.type), *piece.locals)]
        for shard, type_number, local, created, blob in _union(store, server, stmt, args):
            type_ = ObjectType(int(type_number))
            oid = make_id(int(shard), type_, int(local))
            out.append(AppObject(oid, type_, int(created), json.loads(blob)))
    return out


def _pieces(store: AppData, ids: Sequence[int], kind: ObjectType | None) -> dict[Server, list[list[_Piece]]]:
    """The IN lists of a batch get of ``ids``, by server, in statements of
    up to ``UNION_MAX``: the same ids in the same order make the same."""
    # server -> (database, shard, type) -> local ids
    wanted: dict[Server, dict[tuple[str, int, ObjectType], list[int]]] = defaultdict(lambda: defaultdict(list))
    located: dict[int, ShardLocation] = {}  # a page asks for thousands of ids on a few shards
    for object_id in dict.fromkeys(ids):
        p = split_id(object_id)
        if kind is not None and p.type is not kind:
            raise InvalidId(f"id {object_id} is a {p.type.name.lower()}, not a {kind.name.lower()}")
        where = located.get(p.shard)
        if where is None:
            where = located[p.shard] = store.locate(p.shard)
        wanted[where.server][(where.database, p.shard, p.type)].append(p.local)
    out: dict[Server, list[list[_Piece]]] = {}
    for server, groups in wanted.items():
        pieces = [
            _Piece(database, shard, type_, locals_[start : start + IN_LIST_MAX])
            for (database, shard, type_), locals_ in groups.items()
            for start in range(0, len(locals_), IN_LIST_MAX)
        ]
        out[server] = [pieces[start : start + UNION_MAX] for start in range(0, len(pieces), UNION_MAX)]
    return out


def get_many(
    store: AppData, ids: Sequence[int], kind: ObjectType | None = None, digests: list[Digest] | None = None
) -> list[AppObject]:
    """The objects of ``ids`` in the order given, leaving out ids with no row
    (deleted or never made). Ids of any types may be mixed; with ``kind``,
    an id of another type is refused (InvalidId). An id whose shard is not
    in the shard map raises UnknownShard: that is a config error, not a
    missing object. One statement per server and up to 1,000 ids (the
    server's databases joined by UNION ALL: independent SELECTs, no join).
    ``digests``, when given, gets the digest of each IN list read (see
    ``digests_of_many``)."""
    found: dict[int, AppObject] = {}
    for server, statements in _pieces(store, ids, kind).items():
        cut: list[_Piece] = []
        for pieces in statements:
            for piece, rows, piece_digest in _read_packed(store, server, pieces):
                if digests is not None:
                    digests.append(piece_digest)
                if rows is None:
                    cut.append(piece)
                    continue
                base = make_id(piece.shard, piece.type, 1) - 1  # + a local id the database gave back
                for local, created, data in rows:
                    found[base + local] = AppObject(base + local, piece.type, created, data)
        found.update((obj.id, obj) for obj in _read_rows(store, server, cut))
    return [found[i] for i in ids if i in found]


def digests_of_many(store: AppData, ids: Sequence[int], kind: ObjectType | None = None) -> list[Digest]:
    """The digest of each IN list a ``get_many`` of the same ids would read
    now: equal to the list it filled in when the rows are still those it
    read."""
    out: list[Digest] = []
    for server, statements in _pieces(store, ids, kind).items():
        for pieces in statements:
            out += [(int(count), text) for _n, count, text in _numbered(store, server, pieces, "get_objects_digest")]
    return out


def update(
    store: AppData, object_id: int, kind: ObjectType, change: Callable[[AppObject], Mapping[str, Any]]
) -> tuple[AppObject, AppObject] | None:
    """Replaces an object's data with ``change(current)``; ``(before,
    after)``, or None when there is no such object. A compare-and-set on the
    stored blob: a concurrent update of the same object makes the UPDATE
    match no row, and ``change`` runs again on what is stored now."""
    parts = split_id(object_id)
    if parts.type is not kind:
        raise InvalidId(f"id {object_id} is a {parts.type.name.lower()}, not a {kind.name.lower()}")
    table = OBJECT_TABLES[kind]
    database = store.locate(parts.shard).database
    read, write = sql("get_object_data", database=database, table=table), sql(
        "replace_object_data", database=database, table=table
    )
    for _attempt in range(UPDATE_ATTEMPTS):

        def fetch(cursor: Cursor, _db: str) -> tuple[Any, ...] | None:
            cursor.execute(read, (parts.local,))
            return cursor.fetchone()

        row = store.run(parts.shard, fetch)
        if row is None:
            return None
        created, blob = int(row[0]), str(row[1])
        before = AppObject(object_id, kind, created, json.loads(blob))
        new_blob = _encode(change(before))
        if new_blob == blob:  # MySQL counts an unchanged row as not matched
            return before, before
        if store.run(parts.shard, executor(write, (new_blob, parts.local, blob))) == 1:
            return before, AppObject(object_id, kind, created, json.loads(new_blob))
    raise RuntimeError(f"object {object_id}: {UPDATE_ATTEMPTS} concurrent updates in a row, gave up")

