"""Body regexes on every setup: RE2 syntax (and a clear refusal of what RE2
does not accept), linear time on a pattern that backtracks catastrophically
in Python's ``re``, and the per-call budgets (bodies examined, wall time):
count and delete fail clearly past them, scan returns a partial page and a
continuation."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from pinlater import CONTINUATION_END, Job, JobService
from pinlater.errors import InvalidRequest, RegexBudgetExceeded

HOSTILE = "(a+)+$"
HOSTILE_BODY = b"a" * 25 + b"!"  # seconds per body under a backtracking engine


def budgeted(cluster: JobService, **overrides: Any) -> JobService:
    """Another client of the same cluster, with other regex budgets."""
    return JobService(cluster.core.sibling(replace(cluster.settings, **overrides)), source="test-regex")


def enqueue_one_by_one(cluster: JobService, queue: str, bodies: list[bytes]) -> None:
    """One call per job, so that sharded setups spread them over their shards."""
    for body in bodies:
        cluster.enqueue(queue, [Job(body)])


def test_re2_syntax_is_accepted_and_matches_utf8_bodies(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    enqueue_one_by_one(cluster, queue_name, ["café".encode(), "λόγος".encode(), b"ID-42", b"\xff\xfe raw"])
    cases = {
        r"^caf.$": 1,  # "." is one UTF-8 character, not one byte
        r"\p{Greek}+": 1,  # Unicode classes: RE2, not Python's re
        r"^[[:upper:]]+-[[:digit:]]+$": 1,  # POSIX classes
        r"(?i)^id-\d+$": 1,
        r"^\C\C raw$": 1,  # \C is any byte, for bodies that are not UTF-8
        r"^.. raw$": 0,  # and "." does not match a byte that is not UTF-8
    }
    for pattern, expected in cases.items():
        assert cluster.count(queue_name, "pending", body_regex=pattern) == expected, pattern
        page = cluster.scan(queue_name, "pending", body_regex=pattern)
        assert len(page.jobs) == expected and page.continuation == CONTINUATION_END, pattern


@pytest.mark.parametrize(("pattern", "reason"), [
    (r"(a)\1", r"invalid escape sequence: \1"),  # backreference
    (r"(?=a)a", "invalid perl operator: (?="),  # lookahead
    (r"(?<!a)b", "invalid perl operator: (?<"),  # lookbehind
    (r"a\Z", r"invalid escape sequence: \Z"),  # Python's \Z is RE2's \z
    (r"a++", "bad repetition operator: ++"),  # possessive
    ("(unclosed", "missing )"),
])
def test_syntax_re2_refuses_is_an_invalid_request_naming_pattern_and_reason(
    cluster: JobService, queue_name: str, pattern: str, reason: str
) -> None:
    cluster.create_queue(queue_name)
    cluster.enqueue(queue_name, [Job(b"aaa")])
    calls: dict[str, Callable[[], object]] = {
        "count": lambda: cluster.count(queue_name, "pending", body_regex=pattern),
        "scan": lambda: cluster.scan(queue_name, "pending", body_regex=pattern),
        "delete": lambda: cluster.delete_jobs(queue_name, "pending", body_regex=pattern),
    }
    for name, call in calls.items():
        with pytest.raises(InvalidRequest) as caught:
            call()
        message = caught.value.message
        assert repr(pattern) in message and "RE2" in message and reason in message, (name, message)
    assert cluster.count(queue_name, "pending") == 1  # nothing was deleted


def test_a_catastrophic_backtracking_pattern_runs_in_linear_time(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    enqueue_one_by_one(cluster, queue_name, [HOSTILE_BODY] * 2)
    cluster.enqueue(queue_name, [Job(b"aaaa")])
    cases: list[tuple[str, Callable[[], int], int]] = [
        ("count", lambda: cluster.count(queue_name, "pending", body_regex=HOSTILE), 1),
        ("scan", lambda: len(cluster.scan(queue_name, "pending", body_regex=HOSTILE).jobs), 1),
        ("delete", lambda: cluster.delete_jobs(queue_name, "pending", body_regex=HOSTILE), 1),
    ]
    for name, call, expected in cases:
        started = time.monotonic()
        assert call() == expected, name
        assert time.monotonic() - started < 1.0, name
    assert cluster.count(queue_name, "pending") == 2


def test_bodies_budget_fails_count_and_delete_clearly(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    enqueue_one_by_one(cluster, queue_name, [b"x-%d" % i for i in range(6)])
    small = budgeted(cluster, regex_max_bodies=5)
    with pytest.raises(RegexBudgetExceeded) as caught:
        small.count(queue_name, "pending", body_regex="^x-")
    message = caught.value.message
    assert "count with body regex '^x-' stopped" in message and "examined 5 bodies" in message
    assert "PINLATER_REGEX_MAX_BODIES" in message and "give a priority" in message and "\n" not in message
    assert isinstance(caught.value, InvalidRequest)  # an input error: wire code UNKNOWN, dashboard 400

    with pytest.raises(RegexBudgetExceeded) as caught:
        small.delete_jobs(queue_name, "pending", body_regex="^nothing-matches")
    message = caught.value.message
    assert "delete with body regex" in message and "PINLATER_REGEX_MAX_BODIES" in message
    assert "nothing was deleted" in message and "a smaller limit" in message
    assert cluster.count(queue_name, "pending") == 6
    # A smaller limit narrows a delete: it stops at its third match.
    assert small.delete_jobs(queue_name, "pending", body_regex="^x-", limit=3) == 3
    # Within the budget both work.
    assert small.count(queue_name, "pending", body_regex="^x-") == 3
    assert small.delete_jobs(queue_name, "pending", body_regex="^x-[0-9]$") == 3
    assert cluster.count(queue_name, "pending") == 0


def test_time_budget_fails_count_and_delete_clearly(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name)
    enqueue_one_by_one(cluster, queue_name, [b"y-%d" % i for i in range(3)])
    # A budget no call can meet: it is spent by the time the first page is read.
    hurried = budgeted(cluster, regex_budget_s=1e-9)
    with pytest.raises(RegexBudgetExceeded) as caught:
        hurried.count(queue_name, "pending", body_regex="^y-")
    message = caught.value.message
    assert "count with body regex '^y-' stopped: it ran 1e-09 s" in message
    assert "PINLATER_REGEX_BUDGET_S" in message and "give a priority" in message
    with pytest.raises(RegexBudgetExceeded) as caught:
        hurried.delete_jobs(queue_name, "pending", body_regex="^y-")
    assert "PINLATER_REGEX_BUDGET_S" in caught.value.message and "nothing was deleted" in caught.value.message
    assert cluster.count(queue_name, "pending") == 3
    # Without a regex nothing is budgeted.
    assert hurried.count(queue_name, "pending") == 3
    assert hurried.delete_jobs(queue_name, "pending", limit=1) == 1


def scan_all(service: JobService, queue: str, pattern: str) -> tuple[list[bytes], int]:
    """Every matching body, page by page; and how many pages it took."""
    bodies: list[bytes] = []
    continuation, pages = "0", 0
    while continuation != CONTINUATION_END:
        page = service.scan(queue, "pending", body_regex=pattern, continuation=continuation, include_body=True)
        bodies += [j.body or b"" for j in page.jobs]
        continuation = page.continuation
        pages += 1
        assert pages <= 50, "the scan does not progress"
    return sorted(bodies), pages


def test_scan_returns_a_partial_page_and_a_continuation_at_either_budget(
    cluster: JobService, queue_name: str
) -> None:
    cluster.create_queue(queue_name)
    bodies = [(b"even-%d" if i % 2 == 0 else b"odd-%d") % i for i in range(12)]
    enqueue_one_by_one(cluster, queue_name, bodies)
    evens = sorted(b for b in bodies if b.startswith(b"even"))
    assert scan_all(cluster, queue_name, "^even") == (evens, 1)

    small = budgeted(cluster, regex_max_bodies=5)
    first = small.scan(queue_name, "pending", body_regex="^even", limit=100)
    assert first.continuation != CONTINUATION_END and len(first.jobs) <= 5  # 5 bodies examined, not 12
    found, pages = scan_all(small, queue_name, "^even")
    assert found == evens and pages >= 3

    hurried = budgeted(cluster, regex_budget_s=1e-9)  # one body per page
    found, pages = scan_all(hurried, queue_name, "^even")
    assert found == evens and pages >= 12
    # Without a regex the budgets do not apply.
    page = hurried.scan(queue_name, "pending", limit=100)
    assert len(page.jobs) == 12 and page.continuation == CONTINUATION_END
