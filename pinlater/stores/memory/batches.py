"""The memory control store's batches (``pinlater.stores.control.Batches``),
under the store's lock: the rules every kind keeps, stated plainly."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pinlater.stores.control import (
    COMPLETE,
    COUNTING_BATCH_STATES,
    ENDED_OK,
    OPEN,
    SEALED,
    BatchRecord,
    Doc,
)


@dataclass
class _Batch:
    doc: str  # JSON, so that a caller's later change to its document is not seen
    state: str = OPEN
    members: dict[str, str] = field(default_factory=dict)  # descriptor -> "" or how it ended
    succeeded: int = 0
    failed: int = 0
    created_ms: int = 0
    updated_ms: int = 0


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class MemoryBatches:
    def __init__(self) -> None:
        self._batch_lock = threading.Lock()
        self._batches: dict[str, _Batch] = {}
        self._batch_of: dict[str, str] = {}  # descriptor -> batch

    def batch_create(self, batch: str, doc: Doc) -> bool:
        now = _now_ms()
        with self._batch_lock:
            if batch in self._batches:
                return False
            self._batches[batch] = _Batch(json.dumps(doc), created_ms=now, updated_ms=now)
            return True

    def batch_join(self, batch: str, descriptors: Sequence[str]) -> bool:
        with self._batch_lock:
            b = self._batches.get(batch)
            if b is None or b.state not in (OPEN, SEALED):
                return False
            for d in descriptors:
                before = self._batch_of.get(d)
                if before is not None and before != batch:
                    self._leave(before, d)
                self._batch_of[d] = batch
                b.members.setdefault(d, "")
            b.updated_ms = _now_ms()
            return True

    def _leave(self, batch: str, descriptor: str) -> None:
        b = self._batches.get(batch)
        if b is None:
            return
        outcome = b.members.pop(descriptor, None)
        if outcome == ENDED_OK:
            b.succeeded -= 1
        elif outcome:
            b.failed -= 1

    def batch_seal(self, batch: str) -> bool:
        with self._batch_lock:
            b = self._batches.get(batch)
            if b is None or b.state != OPEN:
                return False
            b.state = SEALED
            b.updated_ms = _now_ms()
            return self._complete_if_done(b)

    @staticmethod
    def _complete_if_done(b: _Batch) -> bool:
        if b.state == SEALED and b.succeeded + b.failed == len(b.members):
            b.state = COMPLETE
            return True
        return False

    def batch_end(self, ended: Mapping[str, str]) -> list[str]:
        done: list[str] = []
        with self._batch_lock:
            now = _now_ms()
            for d, outcome in ended.items():
                batch = self._batch_of.get(d)
                b = self._batches.get(batch) if batch is not None else None
                if b is None or b.state not in COUNTING_BATCH_STATES or b.members.get(d) != "":
                    continue
                b.members[d] = outcome
                if outcome == ENDED_OK:
                    b.succeeded += 1
                else:
                    b.failed += 1
                b.updated_ms = now
                if self._complete_if_done(b):
                    done.append(batch)  # type: ignore[arg-type]
        return done

    def batch_state(self, batch: str, from_states: Sequence[str], to: str) -> bool:
        with self._batch_lock:
            b = self._batches.get(batch)
            if b is None or b.state not in from_states:
                return False
            b.state = to
            b.updated_ms = _now_ms()
            return True

    def batch_get(self, batch: str) -> BatchRecord | None:
        with self._batch_lock:
            b = self._batches.get(batch)
            return None if b is None else self._record(batch, b)

    @staticmethod
    def _record(batch: str, b: _Batch) -> BatchRecord:
        return BatchRecord(batch, json.loads(b.doc), b.state, len(b.members), b.succeeded, b.failed,
                           b.created_ms, b.updated_ms)

    def batch_unended(self, batch: str, limit: int, cursor: str = "") -> tuple[list[str], str]:
        with self._batch_lock:
            b = self._batches.get(batch)
            members = sorted(d for d in (b.members if b is not None else ()) if d > cursor)
            page = members[:limit]
            more = len(members) > limit
            return [d for d in page if not b.members[d]] if b is not None else [], page[-1] if more else ""

    def batch_list(
        self, states: Sequence[str], limit: int, idle_ms: int = 0, newest_first: bool = False,
        after: tuple[int, str] | None = None,
    ) -> list[BatchRecord]:
        with self._batch_lock:
            before = _now_ms() - idle_ms
            found = [self._record(k, b) for k, b in self._batches.items()
                     if b.state in states and b.updated_ms <= before and (after is None or (b.updated_ms, k) > after)]
        found.sort(key=lambda r: (r.updated_ms, r.batch), reverse=newest_first)
        return found[:limit]

    def batch_drop(self, batch: str) -> None:
        with self._batch_lock:
            b = self._batches.pop(batch, None)
            if b is not None:
                for d in b.members:
                    if self._batch_of.get(d) == batch:
                        del self._batch_of[d]
