"""The Redis control store's batches (``pinlater.stores.control.Batches``):
per batch a hash ``plc:batch:{id}`` (doc, state, total, ok, failed, created,
updated) and a hash ``plc:batch:{id}:jobs`` (descriptor -> '' while not
ended, then 'S' or 'F'); ``plc:batchof`` (descriptor -> batch) finds a
job's batch; the zsets ``plc:batches`` (every batch),
``plc:batches:live`` (open, sealed, complete) and ``plc:batches:done``
(released, cancelled), by the ms each last changed, list them. Every
change is one script (``lua/batch_*.lua``)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pinlater.stores.control import CANCELLED, LIVE_BATCH_STATES, OPEN, RELEASED, BatchRecord, Doc
from pinlater.stores.redis import keys

if TYPE_CHECKING:
    import redis
    from redis.commands.core import Script

_T = TypeVar("_T")

BATCH_SCRIPTS = ("batch_join", "batch_end", "batch_seal", "batch_state")


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class RedisBatches:
    _r: redis.Redis[bytes]
    _scripts: dict[str, Script]
    _call: Callable[[Callable[[], Any]], Any]

    def _script(self, name: str, keys_: Sequence[str], args: Sequence[object]) -> Any:
        script = self._scripts[name]
        return self._call(lambda: script(keys=list(keys_), args=list(args)))

    def batch_create(self, batch: str, doc: Doc) -> bool:
        now = _now_ms()

        def run() -> bool:
            if not self._r.hsetnx(keys.batch_key(batch), "doc", json.dumps(doc)):
                return False
            pipe = self._r.pipeline(transaction=True)
            pipe.hset(keys.batch_key(batch), mapping={
                "state": OPEN, "total": 0, "ok": 0, "failed": 0, "created": now, "updated": now})
            pipe.zadd(keys.BATCHES, {batch: now})
            pipe.zadd(keys.LIVE_BATCHES, {batch: now})
            pipe.execute()
            return True

        return bool(self._call(run))

    def batch_join(self, batch: str, descriptors: Sequence[str]) -> bool:
        ks = [keys.batch_key(batch), keys.batch_jobs_key(batch), keys.BATCH_OF, keys.BATCHES, keys.LIVE_BATCHES]
        return bool(self._script("batch_join", ks, [batch, *descriptors]))

    def batch_seal(self, batch: str) -> bool:
        ks = [keys.batch_key(batch), keys.BATCHES, keys.LIVE_BATCHES]
        return int(self._script("batch_seal", ks, [batch])) == 1

    def batch_end(self, ended: Mapping[str, str]) -> list[str]:
        if not ended:
            return []
        joined = " ".join(ended)
        if joined.count(" ") != len(ended) - 1 or "" in ended:
            # Not job descriptors, so in no batch (a descriptor has no space).
            ended = {d: end for d, end in ended.items() if d and " " not in d}
            joined = " ".join(ended)
        args = ["".join(ended.values()), joined]
        done = self._script("batch_end", [keys.BATCH_OF, keys.BATCHES, keys.LIVE_BATCHES, keys.DONE_BATCHES], args)
        return [b.decode() if isinstance(b, bytes) else str(b) for b in done]

    def batch_state(self, batch: str, from_states: Sequence[str], to: str) -> bool:
        ks = [keys.batch_key(batch), keys.BATCHES, keys.LIVE_BATCHES, keys.DONE_BATCHES]
        return bool(self._script("batch_state", ks, [batch, to, *from_states]))

    def batch_get(self, batch: str) -> BatchRecord | None:
        raw = self._call(lambda: self._r.hgetall(keys.batch_key(batch)))
        return _record(batch, raw) if raw else None

    def batch_unended(self, batch: str, limit: int, cursor: str = "") -> tuple[list[str], str]:
        start = int(cursor) if cursor else 0
        after, found = self._call(lambda: self._r.hscan(keys.batch_jobs_key(batch), start, count=limit))
        unended = [d.decode() for d, outcome in found.items() if not outcome]
        return unended, (str(after) if int(after) else "")

    def batch_list(
        self, states: Sequence[str], limit: int, idle_ms: int = 0, newest_first: bool = False,
        after: tuple[int, str] | None = None,
    ) -> list[BatchRecord]:
        wanted = set(states)
        index = (keys.LIVE_BATCHES if wanted <= set(LIVE_BATCH_STATES)
                 else keys.DONE_BATCHES if wanted <= {RELEASED, CANCELLED} else keys.BATCHES)
        until = _now_ms() - idle_ms
        since = after[0] if after is not None else "-inf"

        def page(offset: int) -> tuple[int, list[tuple[bytes, dict[bytes, bytes]]]]:
            if newest_first:
                got = self._r.zrevrangebyscore(index, until, "-inf", start=offset, num=limit, withscores=True)
            else:
                got = self._r.zrangebyscore(index, since, until, start=offset, num=limit, withscores=True)
            # Same-ms batches come in id order, so those up to ``after`` are skipped here.
            ids = [b for b, score in got if after is None or (int(score), b.decode()) > after]
            pipe = self._r.pipeline(transaction=False)
            for b in ids:
                pipe.hgetall(keys.batch_key(b.decode()))
            return len(got), list(zip(ids, pipe.execute() if ids else [], strict=True))

        found: list[BatchRecord] = []
        offset = 0
        while len(found) < limit:
            seen, got = self._call(lambda: page(offset))  # noqa: B023 -- called at once
            if not seen:
                break
            offset += seen
            found += [_record(b.decode(), raw) for b, raw in got
                      if raw and raw.get(b"state", b"").decode() in wanted]
        return found[:limit]

    def batch_drop(self, batch: str) -> None:
        def run() -> None:
            jobs = keys.batch_jobs_key(batch)
            cursor = 0
            while True:
                cursor, found = self._r.hscan(jobs, cursor, count=1000)
                members = list(found)
                owners = self._r.hmget(keys.BATCH_OF, members) if members else []
                mine = [d for d, owner in zip(members, owners, strict=True) if owner == batch.encode()]
                if mine:
                    self._r.hdel(keys.BATCH_OF, *mine)
                if not cursor:
                    break
            pipe = self._r.pipeline(transaction=True)
            pipe.unlink(keys.batch_key(batch), jobs)
            pipe.zrem(keys.BATCHES, batch)
            pipe.zrem(keys.LIVE_BATCHES, batch)
            pipe.zrem(keys.DONE_BATCHES, batch)
            pipe.execute()

        self._call(run)


def _record(batch: str, raw: Mapping[bytes, bytes]) -> BatchRecord:
    def num(name: bytes) -> int:
        return int(raw.get(name, b"0"))

    return BatchRecord(batch, json.loads(raw.get(b"doc", b"{}")), raw.get(b"state", b"").decode(), num(b"total"),
                       num(b"ok"), num(b"failed"), num(b"created"), num(b"updated"))
