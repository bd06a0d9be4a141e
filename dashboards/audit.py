"""The audit log of operator actions: who did what to which queue, when,
and what came of it. Stored durably in the control store (see
``pinlater.records`` for why there); newest first.

Entries never hold job bodies: a delete by body regex records the regex,
not what it matched.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from pinlater.errors import PinLaterError
from pinlater.records import Records

log = logging.getLogger(__name__)

LOG_NAME = "audit"
# Redis keeps this many entries (about 30 MB); MySQL keeps all of them.
CAP = 100_000


@dataclass(frozen=True, slots=True)
class AuditEntry:
    action: str
    queue: str
    operator: str
    remote: str
    params: dict[str, Any]
    ok: bool
    result: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    at_ms: int = field(default_factory=lambda: int(time.time() * 1000))


class AuditLog:
    def __init__(self, store: Records, cap: int = CAP) -> None:
        self._store = store
        self._cap = cap

    def record(self, entry: AuditEntry) -> bool:
        """Stores the entry; False if the store could not be reached. The
        action has happened by then, so it is not undone: the entry goes to
        the process log instead, where it is not lost either."""
        doc = asdict(entry)
        try:
            self._store.log_append(LOG_NAME, doc, self._cap)
        except PinLaterError as exc:
            log.error("audit log unreachable (%s); entry: %s", exc.message, json.dumps(doc, sort_keys=True))
            return False
        log.info("audit: %s", json.dumps(doc, sort_keys=True))
        return True

    def recent(self, limit: int = 50) -> list[dict[str, Any]]:
        return self._store.log_recent(LOG_NAME, limit)
