# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""The worker-side request of a PinLater task: turns Celery's outcomes into
PinLater ACKs.

* success              -> ACK success (Celery's late ack)
* exception            -> ACK failure; delay from the task's retry policy
                          if it has one, else the queue's (PinLater's)
* ``self.retry(...)``  -> ACK failure with the countdown/eta as the delay:
                          the same job runs again, no new message
* worker lost, time limit, ``Reject`` -> ACK failure as well: releasing
  without spending an attempt (Kombu's requeue) would loop forever on a
  task that always kills its process or always times out. While attempts
  remain, a lost worker or a time limit is a retry to Celery (RETRY
  stored), as the task's own exceptions are (``workers.task``).

Each ACK appends a short custom status to the job: ``[ran 41 ms]`` on
success, ``[retry: ...]`` or ``[failed: ...]`` with the exception's type
and first line otherwise, so a lookup or a scan shows how long a job ran and
why each attempt failed.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from billiard.einfo import ExceptionWithTraceback
from billiard.exceptions import TimeLimitExceeded, WorkerLostError
from celery.exceptions import Retry
from celery.utils.serialization import get_pickled_exception
from celery.worker.request import Request
from celery.worker.state import task_ready

from pinlater.kit.cli_output import one_line
from pinlater.retry import RetryPolicy

log = logging.getLogger(__name__)


def retry_delay_ms(when: Any) -> int:
    """Retry(when=...) is seconds (countdown) or a datetime (eta)."""
    if when is None:
        return 0
    if isinstance(when, datetime):
        aware = when if when.tzinfo else when.replace(tzinfo=UTC)
        seconds = (aware - datetime.now(UTC)).total_seconds()
    else:
        seconds = float(when)
    # 0 would mean "the policy's delay"; an explicit zero countdown means now.
    return max(1, int(seconds * 1000))


def _one_line(exc: BaseException) -> str:
    return one_line(f"{type(exc).__name__}: {exc}", 200)


class PinLaterRequest(Request):
    def _qos(self) -> Any:
        channel = getattr(self.message, "channel", None)
        return getattr(channel, "qos", None)

    def on_accepted(self, pid: int, time_accepted: float) -> None:
        qos = self._qos()
        if qos is not None and hasattr(qos, "mark_started"):
            qos.mark_started(self.message.delivery_tag)
        self._started_at = time.monotonic()
        super().on_accepted(pid, time_accepted)

    def _set_status(self, status: str) -> None:
        qos = self._qos()
        if qos is not None and hasattr(qos, "set_status"):
            qos.set_status(self.message.delivery_tag, status)

    def revoked(self) -> bool:
        """Celery's revoke, or a cancel the worker heard of while it held the
        job unstarted (``PinLaterQoS.note_cancelled``): the job has ended
        FAILED already, so the task is skipped as a revoked one is (its ACK
        is stale). ``_announce_revoked`` is Celery's own bookkeeping of a
        skipped request (tests/unit/test_third_party_guards.py)."""
        if super().revoked():
            return True
        qos = self._qos()
        if qos is None or not hasattr(qos, "cancelled") or not qos.cancelled(self.message.delivery_tag):
            return False
        log.info("Discarding cancelled task: %s[%s]", self.name, self.id)
        self._announce_revoked("cancelled", False, None, False)
        return True

    def acknowledge(self) -> None:
        # The success ACK (Celery's worker calls its own on_success, then
        # this): how long the job ran, from its start in a pool process.
        started = getattr(self, "_started_at", None)
        if started is not None and not self.acknowledged:
            self._set_status(f"[ran {round((time.monotonic() - started) * 1000)} ms]")
        super().acknowledge()

    def on_failure(self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False) -> None:
        exc = getattr(exc_info, "exception", None)
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        if isinstance(exc, WorkerLostError | TimeLimitExceeded) and self._attempts_remaining() > 1:
            # Its pool process died or was killed at the time limit, and the
            # job runs again: a retry, as the task's own exceptions are
            # then (workers.task), not its end stored with errbacks run.
            task_ready(self)
            try:
                self.task.backend.mark_as_retry(self.id, exc, request=self._context)
            except Exception as error:  # noqa: BLE001 -- any backend's error: the failure ACK below must still go
                log.warning("could not store the retry of %s[%s]: %s", self.name, self.id, _one_line(error))
            self.on_retry(exc_info)
            return
        if exc is not None and not isinstance(exc, Retry):
            self._set_status(f"[failed: {_one_line(exc)}]")
        super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)

    def _attempts_remaining(self) -> int:
        info = (self._request_dict or {}).get("pinlater") or {}
        return int(info.get("attempts_remaining", 1))

    def _set_delay(self, delay_ms: int, *, replace: bool = True) -> None:
        qos = self._qos()
        if qos is not None and hasattr(qos, "set_retry_delay"):
            qos.set_retry_delay(self.message.delivery_tag, delay_ms, replace=replace)

    def _policy_delay_ms(self) -> int:
        policy: RetryPolicy | None = getattr(self.task, "retry_policy", None)
        if policy is None:
            return 0  # the queue's policy, applied by the job service
        info = (self._request_dict or {}).get("pinlater") or {}
        used = int(info.get("attempts_allowed", 1)) - self._attempts_remaining()
        return max(1, policy.delay_ms(used + 1))

    def on_retry(self, exc_info: Any) -> None:
        exc = exc_info.exception
        if isinstance(exc, ExceptionWithTraceback):
            exc = exc.exc
        exc = get_pickled_exception(exc)
        when = getattr(exc, "when", None) if isinstance(exc, Retry) else None
        cause = getattr(exc, "exc", None) if isinstance(exc, Retry) else exc
        if cause is not None:
            self._set_status(f"[retry: {_one_line(cause)}]")
        self._set_delay(retry_delay_ms(when) if when is not None else self._policy_delay_ms())
        self.reject(requeue=False)
        self.send_event("task-retried", exception=str(exc), traceback="")

    def reject(self, requeue: bool = False) -> None:
        if not self.acknowledged:
            # A retry() already chose its delay; any other failure takes the policy's.
            self._set_delay(self._policy_delay_ms(), replace=False)
        super().reject(requeue=False)
