"""The dashboard's Backfills panel (``GET /api/backfills``, a
``dashboards.panels`` plugin): the recent bulk backfill runs with their
progress, read from the app-data MySQL where the runs are recorded
(``tasks.backfill.records``). Its part of the page is in ``static/``
beside this module.

A thread reads them every ``interval_s`` through a store of its own with a
short socket timeout; a request only reads the last result, so MySQL being
down or slow never slows the dashboard: the panel then says why in one
line (and keeps the last runs it read). Whether runs are paused comes from
the snapshot's view of the ``backfill`` queue. Shape:

    taken_at_ms, checked_at_ms, error, queue_paused,
    runs: [{id, kind, cluster, state, pages_done, total_pages, fraction,
            users_done, cells, pages_per_s, users_per_s, eta_s,
            created_at_ms, finished_at_ms}]
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dashboards.panels import View
from pinlater.kit.cli_output import one_line
from tasks.appdata.errors import NOT_CREATED, AppDataStorageError
from tasks.appdata.settings import AppDataSettings
from tasks.appdata.store import AppData
from tasks.backfill.queue import QUEUE
from tasks.backfill.records import Counts, Records, Run
from tasks.backfill.runs import progress_of

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 2.0
RECENT_RUNS = 10


@dataclasses.dataclass(frozen=True, slots=True)
class Reading:
    runs: list[tuple[Run, Counts]]
    error: str | None
    checked_at_ms: int | None


class BackfillBoard:
    """Reads the recent runs in the background; ``latest()`` is the last reading."""

    def __init__(
        self, settings: AppDataSettings | None, *, settings_error: str | None = None,
        interval_s: float = 2.0, timeout_s: float = READ_TIMEOUT_S, limit: int = RECENT_RUNS,
    ) -> None:
        self.interval_s, self.limit = interval_s, limit
        self._store = None if settings is None else AppData(dataclasses.replace(settings, socket_timeout_s=timeout_s))
        self._latest = Reading([], settings_error or None, None)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> BackfillBoard:
        try:
            settings = AppDataSettings.from_env(env)
        except ValueError as exc:
            return cls(None, settings_error=f"app-data settings unusable: {one_line(exc)}", **kwargs)
        return cls(settings, **kwargs)

    def start(self) -> BackfillBoard:
        if self._store is not None:
            self._thread = threading.Thread(target=self._run, name="dash-backfills", daemon=True)
            self._thread.start()
        return self

    def read_once(self) -> Reading:
        """One reading (the thread's work; never raises)."""
        assert self._store is not None
        now = int(time.time() * 1000)
        try:
            records = Records(self._store)
            runs = [(run, records.counts(run.id)) for run in records.recent_runs(self.limit)]
        except AppDataStorageError as exc:
            if exc.errno in NOT_CREATED:  # no app data made yet: no run yet either
                return Reading([], None, now)
            return Reading(self.latest().runs, f"cannot read the backfill runs: {one_line(exc)}", now)
        except Exception as exc:  # noqa: BLE001 -- shown on the panel; the poller thread keeps running
            return Reading(self.latest().runs, f"cannot read the backfill runs: {one_line(exc)}", now)
        return Reading(runs, None, now)

    def _run(self) -> None:
        while True:
            reading = self.read_once()
            with self._lock:
                self._latest = reading
            if self._stop.wait(self.interval_s):
                return

    def latest(self) -> Reading:
        with self._lock:
            return self._latest

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + READ_TIMEOUT_S * 3)
        if self._store is not None:
            self._store.close()


def _paused(snap: Mapping[str, Any]) -> bool:
    view = next((q for q in snap["queues"] if q["name"] == QUEUE), None)
    return bool(view and view.get("paused"))


def backfills_view(snap: Mapping[str, Any], board: BackfillBoard) -> dict[str, Any]:
    reading, paused = board.latest(), _paused(snap)
    runs = []
    for run, counts in reading.runs:
        p = progress_of(run, counts, paused)
        runs.append({
            "id": run.id, "kind": run.kind, "cluster": run.cluster, "state": p.state,
            "pages_done": p.pages_done, "total_pages": p.total_pages, "fraction": p.fraction,
            "users_done": p.users_done, "cells": p.cells, "pages_per_s": p.pages_per_s,
            "users_per_s": p.users_per_s, "eta_s": p.eta_s,
            "created_at_ms": run.created_at_ms, "finished_at_ms": run.finished_at_ms,
        })
    return {"taken_at_ms": snap["taken_at_ms"], "checked_at_ms": reading.checked_at_ms, "error": reading.error,
            "queue_paused": paused, "runs": runs}


class BackfillPanel:
    """The panel: reads the runs in the background (``BackfillBoard``),
    answers ``/api/backfills`` from the last reading. ``board`` defaults to
    the app data of ``PINLATER_APPDATA_*``; settings it cannot read leave
    the panel saying why instead of stopping the dashboard."""

    name = "backfills"
    static_dir = Path(__file__).with_name("static")

    def __init__(self, board: BackfillBoard) -> None:
        self.board = board
        self.routes: Mapping[str, View] = {"/api/backfills": lambda snap: backfills_view(snap, self.board)}

    @classmethod
    def from_env(cls, *, interval_s: float) -> BackfillPanel:
        """The panel's factory (the backfill's manifest, ``tasks.backfill.app``)."""
        return cls(BackfillBoard.from_env(interval_s=interval_s))

    def start(self) -> None:
        self.board.start()

    def close(self) -> None:
        self.board.close()
