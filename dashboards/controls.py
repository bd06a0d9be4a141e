"""Operator controls: validated, run through the job service, audited.

Every control takes a JSON object of parameters. Unknown fields are refused
(a typo must not silently fall back to a default on a bulk action). Retry
and delete accept ``dry_run: true``, which changes nothing and returns how
many jobs the action would touch, so the page can ask for confirmation with
the real number. Both, dry or not, say which shards they left out
(``partial``, ``shards_skipped``: see ``dashboards.coverage``).
Authentication is the caller's business (see ``api``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dashboards.audit import AuditEntry, AuditLog
from dashboards.coverage import covered
from pinlater.errors import InvalidRequest, PinLaterError
from pinlater.limits import MAX_DEQUEUE_RATE, MAX_RUNNING_CAP
from pinlater.queue_config import check_key_rate, check_rate
from pinlater.service import JobService
from pinlater.states import JobState
from pinlater.validation import MAX_ATTEMPTS, MAX_LIMIT, compile_body_regex

ACTIONS = ("rate", "concurrency", "key-limits", "pause", "resume", "retry-failed", "delete-jobs", "cancel")
OPERATOR = re.compile(r"[A-Za-z0-9_.@ -]{1,64}")
MAX_RATE = MAX_DEQUEUE_RATE  # the job service's own limit: refused here before any work
MAX_DELAY_S = 366 * 86_400
MAX_REGEX = 500
MAX_DESCRIPTOR = 200


@dataclass(frozen=True, slots=True)
class Caller:
    operator: str
    remote: str


class Params:
    """Typed access to a control's JSON parameters with clear errors."""

    def __init__(self, raw: object, allowed: tuple[str, ...]) -> None:
        if not isinstance(raw, dict):
            raise InvalidRequest("the request body must be a JSON object")
        unknown = sorted(set(raw) - set(allowed))
        if unknown:
            raise InvalidRequest(f"unknown field(s) {unknown}; this control takes {list(allowed)}")
        self.raw: dict[str, Any] = raw

    def integer(self, name: str, default: int | None, lo: int, hi: int) -> int | None:
        value = self.raw.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidRequest(f"{name} must be a whole number, got {value!r}")
        if not lo <= value <= hi:
            raise InvalidRequest(f"{name} must be between {lo} and {hi}, got {value}")
        return value

    def number(self, name: str, lo: float, hi: float, hint: str = "") -> float | None:
        """A finite number between lo and hi. A text such as "inf" or "1e309"
        is not a number here, and the body's JSON has no NaN or Infinity
        (``api`` refuses them); a float that overflowed to infinity and a
        whole number too big for a float are out of range."""
        value = self.raw.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidRequest(f"{name} must be a number{hint}, got {_shown(value)}")
        # Compared before any conversion: float(10**400) would overflow.
        if (isinstance(value, float) and not math.isfinite(value)) or not lo <= value <= hi:
            raise InvalidRequest(f"{name} must be between {lo:g} and {hi:g}{hint}, got {_shown(value)}")
        return float(value)

    def flag(self, name: str) -> bool:
        value = self.raw.get(name, False)
        if not isinstance(value, bool):
            raise InvalidRequest(f"{name} must be true or false, got {value!r}")
        return value

    def text(self, name: str, max_len: int) -> str | None:
        value = self.raw.get(name)
        if value is None or value == "":
            return None
        if not isinstance(value, str) or len(value) > max_len:
            raise InvalidRequest(f"{name} must be text of at most {max_len} characters")
        return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


@dataclass(frozen=True, slots=True)
class Plan:
    """A validated control, not yet run."""

    audited_params: dict[str, Any]
    execute: Callable[[], dict[str, Any]]
    dry_run: bool = False


class Controls:
    def __init__(self, service: JobService, audit: AuditLog, on_change: Callable[[], None]) -> None:
        self.service = service
        self.audit = audit
        self._on_change = on_change  # e.g. drop the cached snapshot

    def run(self, action: str, queue: str, raw: object, caller: Caller) -> dict[str, Any]:
        """Validates, then runs one control. A run is audited whether it
        succeeds or fails; input errors and dry runs change nothing and are not."""
        if action not in ACTIONS:
            raise InvalidRequest(f"unknown control {action!r}; use one of {', '.join(ACTIONS)}")
        if not OPERATOR.fullmatch(caller.operator):
            raise InvalidRequest("operator name: 1-64 letters, digits, spaces and _.@- (who is acting?)")
        # QueueNotFound / QueueNameInvalid / ConfigUnreadable first
        self.service.queue_config(queue, fresh=True)
        params = Params(raw if raw is not None else {}, _ALLOWED[action])
        plan: Plan = getattr(self, "_" + action.replace("-", "_"))(queue, params)
        if plan.dry_run:
            return plan.execute()
        try:
            result: dict[str, Any] = plan.execute()
        except PinLaterError as exc:
            self._record(action, queue, plan.audited_params, caller, ok=False, error=exc.message)
            raise
        result["audited"] = self._record(action, queue, plan.audited_params, caller, ok=True, result=result)
        self._on_change()
        return result

    def _record(self, action: str, queue: str, params: dict[str, Any], caller: Caller, *, ok: bool,
                result: dict[str, Any] | None = None, error: str | None = None) -> bool:
        return self.audit.record(AuditEntry(
            action=action, queue=queue, operator=caller.operator, remote=caller.remote,
            params=params, ok=ok, result=dict(result or {}), error=error,
        ))

    # -- the controls: each validates and returns a Plan -----------------------------
    def _rate(self, queue: str, p: Params) -> Plan:
        if "rate" not in p.raw:
            raise InvalidRequest("rate is required: jobs per second, or null for unlimited")
        rate = p.number("rate", 0.0, MAX_RATE, " (jobs per second, or null for unlimited)")
        _checked(check_rate, rate)
        return Plan({"rate": rate}, lambda: _config_result(self.service.set_rate(queue, rate)))

    def _concurrency(self, queue: str, p: Params) -> Plan:
        if "max_running" not in p.raw:
            raise InvalidRequest("max_running is required: a whole number of jobs, or null for no cap")
        cap = p.integer("max_running", None, 1, MAX_RUNNING_CAP)
        return Plan({"max_running": cap}, lambda: _config_result(self.service.set_concurrency(queue, cap)))

    def _key_limits(self, queue: str, p: Params) -> Plan:
        """Per fairness key: ``key_max_running`` and ``key_rate``, either or
        both (null: no limit)."""
        given = [name for name in ("key_max_running", "key_rate") if name in p.raw]
        if not given:
            raise InvalidRequest("key_max_running or key_rate is required (null for no limit)")
        changes: dict[str, Any] = {}
        if "key_max_running" in given:
            changes["key_max_running"] = p.integer("key_max_running", None, 1, MAX_RUNNING_CAP)
        if "key_rate" in given:
            rate = p.number("key_rate", 0.0, MAX_RATE, " (jobs per second per key, or null for unlimited)")
            if rate == 0:
                raise InvalidRequest("key_rate must be above 0 (pause the queue to run none), or null for unlimited")
            changes["key_rate"] = _checked(check_key_rate, rate)
        return Plan(changes, lambda: _config_result(self.service.update_queue(queue, **changes)))

    def _pause(self, queue: str, p: Params) -> Plan:
        return Plan({}, lambda: _config_result(self.service.pause(queue)))

    def _resume(self, queue: str, p: Params) -> Plan:
        return Plan({}, lambda: _config_result(self.service.resume(queue)))

    def _retry_failed(self, queue: str, p: Params) -> Plan:
        config = self.service.queue_config(queue)
        priority = p.integer("priority", None, 1, config.priorities)
        limit = p.integer("limit", 1000, 1, MAX_LIMIT) or 1000
        attempts = p.integer("attempts", 1, 1, MAX_ATTEMPTS) or 1
        run_after_ms = p.integer("run_after_ms", None, 0, 2**53)
        delay_s = p.number("delay_s", 0, MAX_DELAY_S)
        if run_after_ms is not None and delay_s is not None:
            raise InvalidRequest("give run_after_ms or delay_s, not both")
        if delay_s is not None:
            run_after_ms = int((time.time() + delay_s) * 1000)
        if p.flag("dry_run"):
            return Plan({}, lambda: self._preview(lambda: self.service.count(queue, JobState.FAILED, priority=priority),
                                                  limit), dry_run=True)
        audited = {"priority": priority, "limit": limit, "attempts": attempts, "run_after_ms": run_after_ms}
        return Plan(audited, lambda: self._over_shards("retried", lambda: self.service.retry_failed(
            queue, priority=priority, attempts=attempts, run_after_ms=run_after_ms, limit=limit)))

    def _delete_jobs(self, queue: str, p: Params) -> Plan:
        config = self.service.queue_config(queue)
        state_text = p.text("state", 20)
        if state_text is None:
            raise InvalidRequest("state is required: pending, running, succeeded or failed")
        try:
            state = JobState.parse(state_text)
        except ValueError as exc:
            raise InvalidRequest(str(exc)) from None
        priority = p.integer("priority", None, 1, config.priorities)
        limit = p.integer("limit", 1000, 1, MAX_LIMIT) or 1000
        regex = p.text("body_regex", MAX_REGEX)
        compile_body_regex(regex)  # a bad pattern is an input error, before any work
        if p.flag("dry_run"):
            return Plan({}, lambda: self._preview(lambda: self._count_deletable(queue, state, priority, regex),
                                                  limit), dry_run=True)
        audited = {"state": state.name.lower(), "priority": priority, "limit": limit, "body_regex": regex}
        return Plan(audited, lambda: self._over_shards("deleted", lambda: self.service.delete_jobs(
            queue, state, priority=priority, body_regex=regex, limit=limit)))

    def _cancel(self, queue: str, p: Params) -> Plan:
        """``descriptors``: the jobs to end now (pending ones never run,
        running ones end FAILED at once)."""
        raw = p.raw.get("descriptors")
        limit = self.service.settings.max_jobs_per_call
        if (not isinstance(raw, list) or not raw or len(raw) > limit
                or not all(isinstance(d, str) and 0 < len(d) <= MAX_DESCRIPTOR for d in raw)):
            raise InvalidRequest(f"descriptors must be a list of 1 to {limit} job descriptors")
        descriptors = list(raw)

        def run() -> dict[str, Any]:
            result = self.service.cancel(queue, descriptors)
            return {"cancelled": result.cancelled, "interrupted": result.interrupted, "finished": result.finished,
                    "unknown": result.unknown, "unapplied": result.unapplied}

        return Plan({"descriptors": descriptors}, run)

    def _count_deletable(self, queue: str, state: JobState, priority: int | None, regex: str | None) -> int:
        count = self.service.count
        if state is JobState.PENDING:
            # delete_jobs takes scheduled (future) pending jobs too, with a regex or without.
            return sum(count(queue, state, priority=priority, future=f, body_regex=regex) for f in (False, True))
        return count(queue, state, priority=priority, body_regex=regex)

    def _preview(self, count: Callable[[], int], limit: int) -> dict[str, Any]:
        found, coverage = covered(self.service.operators, count)
        return {"dry_run": True, "would_affect": min(found, limit), "matching": found, **coverage}

    def _over_shards(self, name: str, act: Callable[[], int]) -> dict[str, Any]:
        """An action over the queue's shards in rotation: how many jobs it
        changed, and which shards it left out."""
        done, coverage = covered(self.service.operators, act)
        return {name: done, **coverage}


_ALLOWED: dict[str, tuple[str, ...]] = {
    "rate": ("rate",),
    "concurrency": ("max_running",),
    "key-limits": ("key_max_running", "key_rate"),
    "pause": (),
    "resume": (),
    "retry-failed": ("priority", "limit", "attempts", "run_after_ms", "delay_s", "dry_run"),
    "delete-jobs": ("state", "priority", "limit", "body_regex", "dry_run"),
    "cancel": ("descriptors",),
}


def _config_result(config: Any) -> dict[str, Any]:
    return {
        "queue": config.name,
        "max_dequeue_rate": config.max_dequeue_rate,
        "max_running": config.max_running,
        "key_max_running": config.key_max_running,
        "key_rate": config.key_rate,
        "paused": config.paused,
    }


def _checked(check: Callable[[object], float | None], rate: float | None) -> float | None:
    """``rate`` as the job service checks it, refused here before any work
    (and before the audit log records an attempt)."""
    try:
        return check(rate)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
