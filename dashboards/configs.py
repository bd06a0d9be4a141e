"""Queue configs as the dashboard reads them: every queue, even one whose
stored config cannot be read.

The job service's ``queue_configs`` leaves a damaged config out (logged), so
that it never hides the other queues; the dashboard, which must show every
queue, parses the stored texts (``queue_config_texts``) one by one instead. A
config that cannot be read is shown with its error; if its number of
priorities can be made out, its jobs are counted too.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pinlater.limits import MAX_DEQUEUE_RATE, MAX_PRIORITIES
from pinlater.queue_config import CONFIG_PARSE_ERRORS, QueueConfig

log = logging.getLogger(__name__)

PARSE_ERRORS = CONFIG_PARSE_ERRORS


@dataclass(frozen=True, slots=True)
class QueueEntry:
    """One queue as the dashboard shows it. ``config`` is what was read, or
    a stand-in with only the name and priorities when the stored config
    cannot be read but its priorities can (so its jobs can still be
    counted); None when not even that. ``error`` says what is wrong."""

    name: str
    config: QueueConfig | None
    error: str | None = None
    as_stored: bool = True  # False: ``config`` is a stand-in, or None


def rate_problem(rate: float | None) -> str | None:
    if rate is None or (math.isfinite(rate) and 0 <= rate <= MAX_DEQUEUE_RATE):
        return None
    return (f"stored max_dequeue_rate {rate!r} is not a number between 0 and {MAX_DEQUEUE_RATE:g}: "
            "set the rate again to fix it")


def entry_for(config: QueueConfig) -> QueueEntry:
    return QueueEntry(config.name, config, rate_problem(config.max_dequeue_rate))


def parse_entry(name: str, text: str | bytes) -> QueueEntry:
    try:
        return entry_for(QueueConfig.from_json(text))
    except PARSE_ERRORS as exc:
        error = f"stored config cannot be read: {type(exc).__name__}: {str(exc)[:200]}"
    stand_in: QueueConfig | None = None
    try:
        data = json.loads(text)
        priorities = data.get("priorities") if isinstance(data, dict) else None
        if isinstance(priorities, int) and not isinstance(priorities, bool) and 1 <= priorities <= MAX_PRIORITIES:
            stand_in = QueueConfig(name, priorities=priorities)
    except PARSE_ERRORS:
        pass
    return QueueEntry(name, stand_in, error, as_stored=False)


class ConfigReader:
    """Reads every queue's config from ``read_texts`` (the job service's
    ``queue_config_texts``); see the module's docstring."""

    def __init__(self, read_texts: Callable[[], Mapping[str, str | bytes]]) -> None:
        self._read_texts = read_texts
        self._warned: set[str] = set()

    def read(self) -> dict[str, QueueEntry]:
        """Raises PinLaterError when the control store cannot be reached."""
        entries = {name: parse_entry(name, text) for name, text in self._read_texts().items()}
        for entry in entries.values():
            if entry.error and entry.name not in self._warned:
                self._warned.add(entry.name)
                log.warning("queue %s: %s", entry.name, entry.error)
        return entries
