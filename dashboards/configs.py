"""Queue configs as the dashboard reads them: every queue, even one whose
stored config cannot be read.

The control store's ``list_queues`` parses every config at once, so one bad
config (written by an older version, or by hand) fails the whole list, and a
dashboard built on it would show no queue at all: exactly when an operator
needs it most. When that happens the dashboard reads the stored texts itself
(the layout the control stores document: the Redis hash ``plc:queues``, the
MySQL table ``pinlater_queue_config``) and parses them one by one. A config
that still cannot be read is shown with its error; if its number of
priorities can be made out, its jobs are counted too.

A config that parses but holds a rate that is not a finite number >= 0 (NaN,
Infinity: older versions accepted them) is flagged the same way.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass

from pinlater.backends import keys
from pinlater.backends.mysql_pool import ConnectionPool, MySQLAddress, Session
from pinlater.backends.redis_client import open_redis
from pinlater.backends.sql_blocks import sql
from pinlater.control.base import ControlStore
from pinlater.errors import PinLaterError, ShardConnectionFailed
from pinlater.limits import MAX_DEQUEUE_RATE, MAX_PRIORITIES
from pinlater.queue_config import QueueConfig

log = logging.getLogger(__name__)

# Anything QueueConfig.from_json may raise on a bad text (JSONDecodeError and
# UnicodeDecodeError are ValueErrors).
PARSE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, RecursionError)


class ConfigUnreadable(PinLaterError):
    """The queue exists but its stored config cannot be read."""


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
    """Reads every queue's config; see the module's docstring. The raw
    connection to the control store is opened only when a config fails to
    parse, and kept for the next passes."""

    def __init__(self, control: ControlStore, control_url: str, socket_timeout_s: float) -> None:
        self._control = control
        self._url = control_url
        self._timeout = socket_timeout_s
        self._raw: _RawReader | None = None
        self._warned: set[str] = set()

    def read(self) -> dict[str, QueueEntry]:
        """Raises PinLaterError when the control store cannot be reached."""
        try:
            return {name: entry_for(config) for name, config in self._control.list_queues().items()}
        except PinLaterError:
            raise
        except PARSE_ERRORS as exc:
            first_error = exc
        if self._raw is None:
            self._raw = _open_raw(self._url, self._timeout)
        if self._raw is None:  # a store with nothing stored as text (memory://)
            raise ConfigUnreadable(f"queue configs cannot be read: {first_error}")
        entries = {name: parse_entry(name, text) for name, text in self._raw.texts().items()}
        for entry in entries.values():
            if entry.error and entry.name not in self._warned:
                self._warned.add(entry.name)
                log.warning("queue %s: %s", entry.name, entry.error)
        return entries

    def close(self) -> None:
        if self._raw is not None:
            self._raw.close()


class _RawReader:
    def texts(self) -> dict[str, str | bytes]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _RedisRaw(_RawReader):
    def __init__(self, url: str, timeout: float) -> None:
        self._r = open_redis(url, timeout)

    def texts(self) -> dict[str, str | bytes]:
        try:
            raw = self._r.hgetall(keys.CONTROL_QUEUES)
        except Exception as exc:  # redis' connection and timeout errors
            raise ShardConnectionFailed(f"control store (redis) unavailable: {exc}") from exc
        return {k.decode("utf-8", errors="replace"): v for k, v in raw.items()}

    def close(self) -> None:
        self._r.close()


class _MySQLRaw(_RawReader):
    def __init__(self, url: str, timeout: float) -> None:
        self._pool = ConnectionPool(
            MySQLAddress.parse(url), socket_timeout_s=timeout, prepare=lambda s: None,
            unavailable=lambda exc: ShardConnectionFailed(f"control store (mysql) unavailable: {exc}"), max_idle=1,
        )

    def texts(self) -> dict[str, str | bytes]:
        def work(s: Session) -> dict[str, str | bytes]:
            s.execute(sql("ctl_list_configs"))
            return {str(name): text for name, text in s.fetchall()}

        return self._pool.run(work)

    def close(self) -> None:
        self._pool.close()


def _open_raw(url: str, timeout: float) -> _RawReader | None:
    scheme = url.split("://", 1)[0]
    if scheme in ("redis", "rediss"):
        return _RedisRaw(url, timeout)
    if scheme == "mysql":
        return _MySQLRaw(url, timeout)
    return None
