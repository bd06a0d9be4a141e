"""Progress of long operations (bulk backfills, big retries...), shown in the
dashboard's progress panel and served at ``GET /api/progress``.

Any process publishes; the dashboard only reads. The records live in the
control store, so the publisher needs nothing but its settings:

    from dashboards.progress import ProgressBoard
    from pinlater.settings import Settings

    board = ProgressBoard.open(Settings.from_env().resolved_control_url)
    board.publish("typeahead-backfill-42", "Typeahead backfill", done=0, total=50_000)
    ...                                    # as often as you like; each call replaces the record
    board.publish("typeahead-backfill-42", "Typeahead backfill", done=50_000, total=50_000, status="done")

``total`` may be None when unknown. ``status`` is running, done, failed or
paused; ``detail`` is one short line (never a job body). A running record
not updated for ``STALE_MS`` is shown as stale (its publisher may have
died); finished ones are dropped ``KEEP_FINISHED_MS`` after their last
update.
"""

from __future__ import annotations

import re
import time
from typing import Any

from pinlater.errors import InvalidRequest
from pinlater.records import Records, open_records

TABLE = "progress"
STATUSES = ("running", "done", "failed", "paused")
STALE_MS = 5 * 60_000
KEEP_FINISHED_MS = 24 * 3600_000
MAX_DETAIL = 300
_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class ProgressBoard:
    def __init__(self, store: Records) -> None:
        self._store = store

    @classmethod
    def open(cls, control_url: str) -> ProgressBoard:
        return cls(open_records(control_url))

    def close(self) -> None:
        self._store.close()

    def publish(
        self,
        op_id: str,
        title: str,
        *,
        done: int,
        total: int | None = None,
        status: str = "running",
        detail: str = "",
    ) -> dict[str, Any]:
        if not _ID.fullmatch(op_id):
            raise InvalidRequest(f"progress id {op_id!r}: use 1-128 letters, digits and _.:-")
        if status not in STATUSES:
            raise InvalidRequest(f"progress status {status!r}: use one of {', '.join(STATUSES)}")
        if done < 0 or (total is not None and total < 0):
            raise InvalidRequest("progress done and total must be >= 0")
        now = int(time.time() * 1000)
        previous = self._store.map_items(TABLE).get(op_id)
        record = {
            "id": op_id,
            "title": title[:200],
            "done": int(done),
            "total": None if total is None else int(total),
            "status": status,
            "detail": detail[:MAX_DETAIL],
            "started_at_ms": previous["started_at_ms"] if previous else now,
            "updated_at_ms": now,
        }
        self._store.map_put(TABLE, op_id, record)
        return record

    def remove(self, op_id: str) -> None:
        self._store.map_remove(TABLE, [op_id])

    def list(self, now_ms: int | None = None) -> list[dict[str, Any]]:
        """Running first, then by last update, newest first; each with
        ``fraction`` (None when the total is unknown) and ``stale``."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        records = self._store.map_items(TABLE)
        expired = [
            k for k, r in records.items()
            if r["status"] != "running" and now_ms - r["updated_at_ms"] > KEEP_FINISHED_MS
        ]
        self._store.map_remove(TABLE, expired)
        out = []
        for key, r in records.items():
            if key in expired:
                continue
            total = r.get("total")
            r["fraction"] = None if not total else min(1.0, r["done"] / total)
            r["stale"] = r["status"] == "running" and now_ms - r["updated_at_ms"] > STALE_MS
            out.append(r)
        out.sort(key=lambda r: (r["status"] != "running", -r["updated_at_ms"]))
        return out
