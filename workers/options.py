"""A publish's scheduling options, checked before Celery reads them.

Celery turns ``countdown``, ``eta`` and ``expires`` into times deep inside
``send_task``: a wrong type or an impossible value surfaces there as a
bare TypeError, ValueError or OverflowError naming none of them, and a
``priority`` of "high" or a ``queue`` of 5 publishes something other than
what was asked. Here each is one error naming the option (TypeError for
a wrong kind of value, ValueError for one out of range), raised before
anything is published.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from kombu.entity import Queue

from pinlater.limits import MAX_DELAY_MS

MAX_DELAY_S = MAX_DELAY_MS / 1000
# AMQP's priorities, which Kombu's max_priority and Celery's priority use.
MAX_PRIORITY = 255


def check_publish_options(options: Mapping[str, Any]) -> None:
    """Raises for the first bad one of ``options``' countdown, eta,
    expires, priority, queue and headers; None is "not given"."""
    for name in ("countdown", "expires"):
        value = options.get(name)
        if value is None:
            continue
        if name == "expires" and isinstance(value, datetime | str):
            _check_time(name, value)
        else:
            _check_seconds(name, value)
    if options.get("eta") is not None:
        _check_time("eta", options["eta"])
    priority = options.get("priority")
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
        raise TypeError(f"priority must be a whole number from 0 to {MAX_PRIORITY}, got {_kind(priority)}")
    if priority is not None and not 0 <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be from 0 to {MAX_PRIORITY}, got {priority}")
    queue = options.get("queue")
    if queue is not None and not isinstance(queue, str | Queue):
        raise TypeError(f"queue must be a queue's name or a kombu Queue, got {_kind(queue)}")
    headers = options.get("headers")
    if headers is not None and not isinstance(headers, Mapping):
        raise TypeError(f"headers must be a dict, got {_kind(headers)}")


def _check_seconds(name: str, value: object) -> None:
    what = f"{name} must be a number of seconds"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what}, got {_kind(value)}")
    seconds = float(value)
    if not math.isfinite(seconds) or abs(seconds) > MAX_DELAY_S:
        raise ValueError(f"{what} of at most {MAX_DELAY_S:.0f} (100 years), got {value!r}")


def _check_time(name: str, value: object) -> None:
    what = f"{name} must be a datetime or an ISO 8601 text"
    if isinstance(value, datetime):
        return
    if not isinstance(value, str):
        raise TypeError(f"{what}, got {_kind(value)}")
    try:
        datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{what}, got {value[:40]!r}") from None


def _kind(value: object) -> str:
    """What was given, briefly: a text's or a number's value, else its type."""
    if isinstance(value, str | int | float):
        return repr(value)[:40]
    return f"a {type(value).__name__}"
