# mypy: disable-error-code="no-untyped-call,untyped-decorator,misc"
# (Kombu and Celery ship without complete type hints; their calls are untyped.)
"""Tasks of the worker tests: the test workers import this module
(``PINLATER_CELERY_IMPORTS``) and the test process binds the same shared
tasks to its own app.

Test sessions share Redis, so queue names carry a per-session suffix
(``qname``), and every task records what it did in the results Redis
(``RESULTS_URL``) under keys of the test that started its worker
(``key``: ``PINLATER_TEST_KEYS`` in the worker's environment), by PinLater
descriptor, so duplicates show."""

from __future__ import annotations

import os
import random
import time
import uuid
from typing import Any

import redis
from celery import shared_task

from pinlater.retry import RetryPolicy
from workers.task import PinLaterTask

# Redis db 10: no other suite or benchmark uses it.
RESULTS_URL = "redis://127.0.0.1:16379/10"
# Inherited by the worker processes (tests.workers.harness.worker_env).
RUN = os.environ.setdefault("PINLATER_WORKER_TESTS_RUN", uuid.uuid4().hex[:6])


def qname(base: str) -> str:
    return f"{base}_{RUN}"


def key(name: str) -> str:
    return f"{os.environ.get('PINLATER_TEST_KEYS', 'none')}:{name}"
_results: redis.Redis[bytes] | None = None


def results() -> redis.Redis[bytes]:
    global _results
    if _results is None or getattr(_results, "_pid", None) != os.getpid():
        _results = redis.Redis.from_url(RESULTS_URL)
        _results._pid = os.getpid()  # type: ignore[attr-defined]
    return _results


def _descriptor(task: Any) -> str:
    return str((getattr(task.request, "pinlater", None) or {}).get("descriptor", task.request.id))


def task(base: str, **options: Any) -> Any:
    return shared_task(base=PinLaterTask, bind=True, name=f"tests.{base}", pinlater_queue=qname(base), **options)


# -- publishing and shutdown -------------------------------------------------------------
@task("w_pub")
def pub_noop(self: Any, *args: Any) -> None:
    results().hincrby(key("runs:w_pub"), _descriptor(self), 1)


@task("w_raw")
def raw_echo(self: Any, body: bytes) -> None:
    results().rpush(key("raw:w_raw"), body)


@task("w_slow", claim_timeout_ms=30_000)
def slow(self: Any, seconds: float) -> None:
    results().rpush(key("started:w_slow"), _descriptor(self))
    time.sleep(seconds)


# The example of docs/architecture.md: options that configure the queue when a publish or a
# worker first creates it (over Thrift too).
@task("w_readme", max_dequeue_rate=200)
def send_email(self: Any, user_id: int) -> None:
    results().rpush(key("sent:w_readme"), user_id)


# -- chaos --------------------------------------------------------------------------------
@task("w_chaos", claim_timeout_ms=3000, retry_policy=RetryPolicy.constant(100, retries=30))
def chaos(self: Any, n: int) -> None:
    time.sleep(random.uniform(0.01, 0.03))
    results().hincrby(key("runs:w_chaos"), _descriptor(self), 1)


# -- retries ------------------------------------------------------------------------------
@task("w_fail", retry_policy=RetryPolicy.custom([1000, 2000]))
def fail_until_allowed(self: Any) -> str:
    r = results()
    r.rpush(key("attempts:w_fail"), f"{_descriptor(self)} {time.time()}")
    if not r.exists(key("allow:w_fail")):
        raise RuntimeError("failing on purpose")
    return "ok"


@task("w_retry")
def retry_once(self: Any) -> str:
    r = results()
    if r.incr(key("runs:w_retry")) == 1:
        raise self.retry(countdown=2)
    return "ok"


# -- rate limits ---------------------------------------------------------------------------
@task("w_rate", max_dequeue_rate=50)
def rated(self: Any, body: bytes) -> None:
    results().rpush(key("starts:w_rate"), time.monotonic())


# -- concurrency caps -----------------------------------------------------------------------
@task("w_capped", max_running=3)
def capped(self: Any, seconds: float) -> None:
    started = time.monotonic()
    time.sleep(seconds)
    results().rpush(key("spans:w_capped"), f"{started},{time.monotonic()}")


# -- fairness keys -------------------------------------------------------------------------
def _tenant_of(tenant: str, n: int) -> str:
    return tenant


@task("w_fair", fairness_key_of=_tenant_of)
def fair(self: Any, tenant: str, n: int) -> None:
    results().rpush(key("order:w_fair"), tenant)


def _tenant_only(tenant: str, seconds: float) -> str:
    return tenant


@task("w_key_capped", fairness_key_of=_tenant_only)
def key_capped(self: Any, tenant: str, seconds: float) -> None:
    started = time.monotonic()
    time.sleep(seconds)
    results().rpush(key("spans:w_key_capped"), f"{tenant},{started},{time.monotonic()}")


# -- heartbeats ----------------------------------------------------------------------------
# PINLATER_SOAK=1 runs the heartbeat test at full size (a 60 s
# task, a 10 s claim timeout) instead of CI's scaled ones (12 s, 3 s).
SOAK = os.environ.get("PINLATER_SOAK") == "1"
LONG_CLAIM_TIMEOUT_MS = 10_000 if SOAK else 3000
LONG_TASK_S = 60.0 if SOAK else 12.0


@task("w_long_hb", claim_timeout_ms=LONG_CLAIM_TIMEOUT_MS)
def long_with_heartbeats(self: Any, seconds: float) -> None:
    results().hincrby(key("runs:w_long_hb"), _descriptor(self), 1)
    time.sleep(seconds)


@task("w_long_nohb", claim_timeout_ms=LONG_CLAIM_TIMEOUT_MS, auto_heartbeat=False)
def long_without_heartbeats(self: Any, seconds: float) -> None:
    results().hincrby(key("runs:w_long_nohb"), _descriptor(self), 1)
    time.sleep(seconds)


# -- flower --------------------------------------------------------------------------------
@task("w_flower_ok")
def flower_ok(self: Any, x: int) -> int:
    return x * 2


@task("w_flower_fail", retry_policy=RetryPolicy.constant(1000, retries=0))
def flower_fail(self: Any) -> None:
    raise ValueError("fails for Flower")


# -- tracing --------------------------------------------------------------------------------
@task("w_chain")
def chain(self: Any, n: int) -> None:
    """Publishes the next link from its run, as a fan-out page does."""
    results().rpush(key("runs:w_chain"), _descriptor(self))
    if n > 0:
        self.apply_async((n - 1,))


@task("w_flaky", retry_policy=RetryPolicy.constant(200, retries=2))
def flaky(self: Any) -> str:
    if results().incr(key("runs:w_flaky")) == 1:
        raise RuntimeError("the first attempt fails on purpose")
    return "ok"


# -- deliveries a worker refuses --------------------------------------------------------------
@task("w_guard")
def guarded(self: Any, body: Any) -> None:
    """The task of its queue: a raw body or a published message runs it."""
    results().rpush(key("runs:w_guard"), body if isinstance(body, bytes) else str(body))


@task("w_victim")
def victim(self: Any, note: str) -> None:
    """Another queue's task: a producer of w_guard must not make it run."""
    results().rpush(key("runs:w_victim"), note)


# -- periodic jobs ----------------------------------------------------------------------------
@task("w_beat", run_every_s=1.0)
def beat_tick(self: Any) -> None:
    results().hincrby(key("ticks:w_beat"), str(self.request.get("pinlater_beat_tick")), 1)


# -- canvas (results kept) ------------------------------------------------------------------
@task("w_add", ignore_result=False, accepts_canvas=True)
def add(self: Any, x: int, y: int) -> int:
    return x + y


@task("w_tsum", ignore_result=False, accepts_canvas=True)
def tsum(self: Any, numbers: list[int]) -> int:
    return sum(numbers)


@task("w_add_once", ignore_result=False, accepts_canvas=True, retry_policy=RetryPolicy.constant(100, retries=2))
def add_once(self: Any, x: int, y: int) -> int:
    """As ``add``, but its first attempt for each (x, y) fails."""
    if results().incr(key(f"runs:w_add_once:{x}:{y}")) == 1:
        raise ValueError("the first attempt fails on purpose")
    return x + y


@task("w_exit_once", ignore_result=False, accepts_canvas=True, retry_policy=RetryPolicy.constant(100, retries=2))
def exit_once(self: Any, x: int) -> int:
    """Its first attempt for each x ends its pool process (a lost worker)."""
    if results().incr(key(f"runs:w_exit_once:{x}")) == 1:
        os._exit(1)
    return x


@task("w_never", ignore_result=False, accepts_canvas=True, retry_policy=RetryPolicy.constant(100, retries=2))
def never(self: Any) -> None:
    results().incr(key("runs:w_never"))
    raise ValueError("every attempt fails")


@task("w_errback", accepts_canvas=True)
def errback(self: Any, task_id: str) -> None:
    results().rpush(key("runs:w_errback"), task_id)


# -- cancel ---------------------------------------------------------------------------------
@task("w_cancel", claim_timeout_ms=3000)
def cancellable(self: Any, seconds: float) -> None:
    """Runs until cancelled (or ``seconds``), checking as a long task would."""
    from workers.task import JobCancelled

    r = results()
    r.rpush(key("started:w_cancel"), _descriptor(self))
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            time.sleep(0.05)
            self.raise_if_cancelled()
    except JobCancelled:
        r.rpush(key("observed:w_cancel"), f"{_descriptor(self)} {time.monotonic()}")
        raise


# -- unique jobs ---------------------------------------------------------------------------
@task("w_unique", unique=True)
def unique_sync(self: Any, account: int) -> None:
    results().rpush(key("runs:w_unique"), account)


def _account_of(account: int, note: str) -> str:
    return f"account:{account}"


@task("w_unique_of", unique_of=_account_of)
def unique_of_sync(self: Any, account: int, note: str) -> None:
    results().rpush(key("runs:w_unique_of"), f"{account}:{note}")


# -- batches ---------------------------------------------------------------------------------
@task("w_batch_member", retry_policy=RetryPolicy.constant(50, retries=0))
def batch_member(self: Any, n: int, fail: bool) -> int:
    results().rpush(key("runs:w_batch_member"), n)
    if fail:
        raise RuntimeError(f"member {n} fails, as asked")
    return n


@task("w_batch_done")
def batch_done(self: Any, label: str, pinlater_batch: dict[str, Any]) -> None:
    results().rpush(key("done:w_batch_done"),
                    f"{label}:{pinlater_batch['total']}:{pinlater_batch['succeeded']}:{pinlater_batch['failed']}")
