"""The job service's reads (``ReadsMixin``, which ``JobService`` is made
of): lookup, count and scan, over the state a ``Core`` holds, and the
steps the queue admin and the operators' reads share with them (body
search, the typed shard calls).

Body regexes are applied by the service (RE2 syntax and semantics on every
backend, linear time in a body's length), by scanning in pages; counts
without a regex are answered by the shards directly. One body-regex call
examines at most ``regex_max_bodies`` bodies and runs at most
``regex_budget_s`` seconds (see ``BodySearch``): a count or delete past
either fails with RegexBudgetExceeded, a scan returns the page so far and a
continuation.

Bodies returned are bounded too: a lookup or scan with bodies returns at
most ``Settings.read_budget_bytes`` of them (``ReadBudget``) and is refused
whole past it (ReadBudgetExceeded), the shards withholding the bodies past
the budget instead of reading them. A lookup reads each job it names once,
however often it is named.
"""

from __future__ import annotations

import heapq
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from pinlater.client_api import Call, PinLaterClient, declared
from pinlater.descriptor import JobDescriptor
from pinlater.engine import continuation as cont
from pinlater.engine.shards import ShardSet
from pinlater.errors import ReadBudgetExceeded, RegexBudgetExceeded
from pinlater.models import CONTINUATION_END, JobInfo, ScanResult
from pinlater.queue_config import QueueConfig
from pinlater.settings import Settings
from pinlater.states import JobState
from pinlater.stores.base import JobRecord, ScanQuery, ShardBackend, claim_source
from pinlater.validation import MAX_LIMIT, BodyRegex, check_batch, check_limit, check_priority, compile_body_regex

if TYPE_CHECKING:
    from pinlater.engine.core import Core

# A regex scan examines at most this many jobs per call (fewer if
# regex_max_bodies is lower), then returns its page so far and a
# continuation, so that a rare pattern cannot turn one request into a full
# table read.
REGEX_SCAN_BUDGET = 20_000
_PAGE = 500


class BodySearch:
    """One call's body regex and the work it may still do: bodies examined
    (``max_bodies``) and wall time from the start of the call (``budget_s``,
    reading pages from the shards included)."""

    def __init__(self, pattern: str, regex: BodyRegex, max_bodies: int, budget_s: float) -> None:
        self.pattern = pattern
        self.regex = regex
        self.max_bodies = max_bodies
        self.budget_s = budget_s
        self.deadline = time.monotonic() + budget_s
        self.examined = 0

    def bound_hit(self) -> str | None:
        """Which bound, if any, stops the search from examining another body."""
        if self.examined >= self.max_bodies:
            return f"examined {self.examined} bodies, the most one call may (PINLATER_REGEX_MAX_BODIES)"
        if time.monotonic() >= self.deadline:
            return (f"ran {self.budget_s:g} s, the longest one call may (PINLATER_REGEX_BUDGET_S), "
                    f"after {self.examined} bodies")
        return None

    def check(self, what: str, narrow: str) -> None:
        """Before examining another body: fail clearly if a bound is hit."""
        hit = self.bound_hit()
        if hit is not None:
            raise RegexBudgetExceeded(f"{what} with body regex {self.pattern!r} stopped: it {hit}; {narrow}")

    def matches(self, body: bytes | None) -> bool:
        self.examined += 1
        return body is not None and self.regex.search(body) is not None


class ReadBudget:
    """The body bytes one lookup or scan may still return. The shards are
    asked for no more than ``left()``, and withhold a body past it."""

    def __init__(self, limit: int, what: str) -> None:
        self.limit = limit
        self.what = what
        self.spent = 0

    def left(self) -> int:
        return max(0, self.limit - self.spent)

    def spend(self, record: JobRecord) -> None:
        """Count a returned job's body; refuse the call once over (a body
        the shard withheld is over)."""
        self.spent += self.limit + 1 if record.body is None else len(record.body)
        if self.spent > self.limit:
            raise ReadBudgetExceeded(
                f"{self.what} with bodies refused: the bodies come to more than {self.limit} bytes, the most "
                f"one call may return (PINLATER_MAX_READ_BYTES); ask for fewer jobs, or leave the bodies out"
            )


def to_info(queue: str, shard: str, record: JobRecord) -> JobInfo:
    """A record as lookups and scans show it: the claim's source only, never
    its token, which would let any reader ACK the job (``Ack.claim``)."""
    return JobInfo(
        descriptor=str(JobDescriptor(queue, shard, record.priority, record.local_id)),
        state=record.state,
        attempts_allowed=record.attempts_allowed,
        attempts_remaining=record.attempts_remaining,
        custom_status=record.custom_status,
        created_at_ms=record.created_at_ms,
        run_after_ms=record.run_after_ms,
        updated_at_ms=record.updated_at_ms,
        claim=None if record.claim is None else claim_source(record.claim),
        body=record.body,
        key=record.key,
    )


def priorities_of(config: QueueConfig, priority: int | None) -> list[int]:
    """The priorities a call names: the one given (checked), or all of the queue's."""
    if priority:
        return [check_priority(config, priority)]
    return list(range(1, config.priorities + 1))


def body_search(settings: Settings, body_regex: str | None, max_bodies: int | None = None) -> BodySearch | None:
    """The call's regex and budget (None without a regex); a bad pattern
    fails here, before any shard is read."""
    regex = compile_body_regex(body_regex)
    if regex is None or body_regex is None:
        return None
    bodies = settings.regex_max_bodies
    if max_bodies is not None:
        bodies = min(bodies, max_bodies)
    return BodySearch(body_regex, regex, bodies, settings.regex_budget_s)


def store_bound(settings: Settings, budget: ReadBudget | None, jobs: int) -> int | None:
    """The body bytes a shard's read of ``jobs`` jobs may bring (see
    ShardBackend.lookup): the call's budget left (without bodies
    returned, the read budget: a read may bring bodies it drops), or
    None, no bound, when that many bodies of the largest size fit it,
    since a bounded read costs the store more (a script reading job by
    job on Redis, the bodies summed first on MySQL). A body stored
    under a larger PINLATER_MAX_BODY_BYTES is counted once read, and
    refused."""
    left = settings.read_budget_bytes if budget is None else budget.left()
    if jobs * settings.max_body_bytes <= left:
        return None
    return left


def stream(
    core: Core,
    backend: ShardBackend,
    queue: str,
    priority: int,
    state: JobState,
    future: bool,
    before: tuple[int, int] | None,
    include_body: bool,
    size: int = _PAGE,
    bound: bool = False,
    budget: ReadBudget | None = None,
) -> Iterator[tuple[cont.ScanKey, str, JobRecord]]:
    """One (shard, priority) source in scan order, fetched ``size`` jobs
    a page. ``bound``: each page brings no more bodies than ``budget``
    has left (no body at all without one), and a page that ends in a
    withheld body is the source's last."""
    query = ScanQuery(queue, priority, state, future, before, size, include_body)
    while True:
        if bound:
            query = replace(query, max_body_bytes=store_bound(core.settings, budget, size))
        page = scan_page(core.shards, backend, query)
        for record in page:
            key = cont.ScanKey(record.sort_time_ms, backend.shard_id, priority, record.local_id)
            yield key, backend.shard_id, record
        if len(page) < size or (budget is not None and page[-1].body is None):
            return
        query = replace(query, before=(page[-1].sort_time_ms, page[-1].local_id))


def matching_records(
    core: Core,
    backend: ShardBackend,
    queue: str,
    priority: int,
    state: JobState,
    search: BodySearch,
    limit: int | None,
    future: bool = False,
    *,
    what: str,
    narrow: str,
) -> Iterator[JobRecord]:
    """Records whose body matches, up to ``limit``; RegexBudgetExceeded
    (saying ``what`` stopped and how to ``narrow`` it) once the search
    would examine a body past its budget."""
    found = 0
    for _, _, record in stream(core, backend, queue, priority, state, future, None, True):
        search.check(what, narrow)
        if search.matches(record.body):
            yield record
            found += 1
            if limit is not None and found >= limit:
                return


# -- shard calls, one typed helper each: every call goes through the shard
# set, so that a failure counts against the shard's health.
def count_on(shards: ShardSet, backend: ShardBackend, queue: str, priority: int, state: JobState, future: bool) -> int:
    return shards.call(backend, "count", queue, lambda b: b.count(queue, priority, state, future))


def scan_page(shards: ShardSet, backend: ShardBackend, query: ScanQuery) -> list[JobRecord]:
    return shards.call(backend, "scan", query.queue, lambda b: b.scan(query))


class ReadsMixin:
    """The client's reads: lookup, count, scan. Mixed into ``JobService``,
    which holds the ``core`` they read through."""

    core: Core

    # -- lookup ----------------------------------------------------------------
    def lookup(self, descriptors: Sequence[str], *, include_body: bool = False) -> dict[str, JobInfo]:
        """Jobs by descriptor; unknown descriptors (and queues) are left out.
        A job named more than once is read once; with bodies, the call is
        refused (ReadBudgetExceeded) if they come to more than the budget."""
        check_batch(len(descriptors), MAX_LIMIT, "descriptors", setting=None)
        # Per (shard, queue, priority): each job once, by local id (texts
        # naming one job differently, "p01" or "042", are one job too).
        groups: dict[tuple[str, str, int], dict[int, JobDescriptor]] = defaultdict(dict)
        for text in dict.fromkeys(descriptors):
            d = JobDescriptor.parse(text)
            self.core.shards.get(d.shard)
            groups[(d.shard, d.queue, d.priority)].setdefault(d.local_id, d)
        budget = ReadBudget(self.core.settings.read_budget_bytes, "lookup") if include_body else None
        found: dict[str, JobInfo] = {}
        for (shard, queue, priority), jobs in groups.items():
            ids = list(jobs)
            bound = store_bound(self.core.settings, budget, len(ids))
            records = self.core.shards.call(
                self.core.shards.get(shard), "lookup", queue,
                lambda b: b.lookup(queue, priority, ids, include_body, bound),  # noqa: B023 -- called at once
            )
            for d, record in zip(jobs.values(), records, strict=True):
                if record is not None:
                    if budget is not None:
                        budget.spend(record)
                    found[str(d)] = to_info(queue, shard, record)
        return found

    # -- count -----------------------------------------------------------------
    @declared(PinLaterClient.count)
    def count(self, a: Call) -> int:
        """Jobs in ``state`` over every healthy shard. For PENDING, ``future``
        picks jobs whose run_after is still ahead instead of runnable ones."""
        queue, state, future = a.queue, JobState.parse(a.state), a.future
        config = self.core.configs.get(queue)
        search = body_search(self.core.settings, a.body_regex)
        priorities = priorities_of(config, a.priority)
        total = 0
        for backend in self.core.shards.require_healthy():
            for p in priorities:
                if search is not None:
                    total += sum(1 for _ in matching_records(
                        self.core, backend, queue, p, state, search, None, future, what="count",
                        narrow="give a priority, a state with fewer jobs, or count without a regex"))
                else:
                    total += count_on(self.core.shards, backend, queue, p, state, future)
        return total

    # -- scan ------------------------------------------------------------------
    @declared(PinLaterClient.scan)
    def scan(self, a: Call) -> ScanResult:
        """Jobs in ``state``, newest first (run_after for PENDING, last update
        otherwise), one page at a time; pass the returned continuation to get
        the next page, until it is CONTINUATION_END."""
        queue, state, future, limit, include_body = a.queue, JobState.parse(a.state), a.future, a.limit, a.include_body
        priority, body_regex = a.priority, a.body_regex
        config = self.core.configs.get(queue)
        check_limit(limit)
        after = cont.decode(a.continuation)
        # With a regex, a page ends early (with a continuation) once it has
        # examined its share of bodies or used its time budget.
        search = body_search(self.core.settings, body_regex, max_bodies=REGEX_SCAN_BUDGET)
        budget = ReadBudget(self.core.settings.read_budget_bytes, f"scan of queue {queue!r}") if include_body else None
        # Without a regex no source can give a page more than ``limit`` jobs,
        # so none reads more, and the shards bring no bodies past the budget;
        # a regex needs every body it examines, in pages of _PAGE.
        page, bound = (_PAGE, False) if search is not None else (min(_PAGE, limit), True)
        sources = [
            (backend, p)
            for backend in self.core.shards.require_healthy()
            for p in priorities_of(config, priority)
        ]
        streams = [
            stream(self.core, backend, queue, p, state, future, cont.source_cursor(after, backend.shard_id, p),
                   include_body or search is not None, page, bound, budget)
            for backend, p in sources
        ]
        merged = heapq.merge(*streams, key=lambda kr: kr[0], reverse=True)
        jobs: list[JobInfo] = []
        last: cont.ScanKey | None = None
        for key, shard, record in merged:
            last = key
            if search is None or search.matches(record.body):
                if budget is not None:
                    budget.spend(record)
                info = to_info(queue, shard, record)
                if search is not None and not include_body:
                    info = replace(info, body=None)
                jobs.append(info)
                if len(jobs) >= limit:
                    break
            if search is not None and search.bound_hit() is not None:
                break
        else:
            return ScanResult(jobs, CONTINUATION_END)
        assert last is not None
        return ScanResult(jobs, last.encode())
