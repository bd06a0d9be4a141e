"""The tiny app's dashboard panel: its queue's pending jobs, from the
dashboard's snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dashboards.panels import View
from tests.support.tinyapp.app import QUEUE


def view(snap: Mapping[str, Any]) -> dict[str, Any]:
    found = next((q for q in snap["queues"] if q["name"] == QUEUE), None)
    return {"queue": QUEUE, "exists": found is not None}


class TinyPanel:
    name = "tinyapp"
    static_dir = Path(__file__).with_name("static")

    def __init__(self) -> None:
        self.routes: Mapping[str, View] = {"/api/tinyapp": view}

    @classmethod
    def from_env(cls, *, interval_s: float) -> TinyPanel:
        return cls()

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass
