"""Reads either cluster of a pair may answer (``tasks.hbase.speculative``),
with reads that stand for each cluster's behaviour: slow, failing, broken."""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from tasks.hbase import ClusterPair, ClusterPool, HBaseUnavailable
from tasks.hbase.settings import Address
from tasks.hbase.speculative import NeitherAnswered, SpeculativeReads

# Nothing is ever dialled: the reads below never touch their pool's connections.
PAIR = ClusterPair(ClusterPool("primary", Address("127.0.0.1", 9)), ClusterPool("standby", Address("127.0.0.1", 9)))
CUTOFF_S = 0.2


def reads_by_cluster(**behaviour: Callable[[], str]) -> Callable[[ClusterPool], str]:
    return lambda pool: behaviour[pool.name]()


def slow(seconds: float, answer: str) -> Callable[[], str]:
    def read() -> str:
        time.sleep(seconds)
        return answer
    return read


def failing(cluster: str, cause: str = "connection refused") -> Callable[[], str]:
    def read() -> str:
        raise HBaseUnavailable(cluster, "127.0.0.1:9", "scan", cause)
    return read


@pytest.fixture
def reads() -> Iterator[SpeculativeReads[str]]:
    reads: SpeculativeReads[str] = SpeculativeReads(PAIR, CUTOFF_S, threads=2, name="test-read")
    yield reads
    reads.close()


def timed(fn: Callable[[], tuple[str, str]]) -> tuple[tuple[str, str], float]:
    started = time.monotonic()
    answer = fn()
    return answer, time.monotonic() - started


def test_a_prompt_primary_answers_alone(reads: SpeculativeReads[str]) -> None:
    asked = []

    def read(pool: ClusterPool) -> str:
        asked.append(pool.name)
        return f"from {pool.name}"

    assert reads.read(read) == ("primary", "from primary") and asked == ["primary"]


def test_a_primary_slower_than_the_cutoff_is_beaten_by_the_standby(reads: SpeculativeReads[str]) -> None:
    answer, took = timed(lambda: reads.read(reads_by_cluster(primary=slow(5.0, "late"), standby=slow(0, "s"))))
    assert answer == ("standby", "s")
    assert CUTOFF_S <= took < CUTOFF_S + 1.0


def test_a_failing_primary_sends_the_read_to_the_standby_at_once(reads: SpeculativeReads[str]) -> None:
    answer, took = timed(lambda: reads.read(reads_by_cluster(primary=failing("primary"), standby=slow(0, "s"))))
    assert answer == ("standby", "s") and took < CUTOFF_S


def test_a_slow_primary_still_wins_when_the_standby_fails(reads: SpeculativeReads[str]) -> None:
    answer = reads.read(reads_by_cluster(primary=slow(CUTOFF_S * 2, "p"), standby=failing("standby")))
    assert answer == ("primary", "p")


def test_neither_answering_names_both_failures(reads: SpeculativeReads[str]) -> None:
    with pytest.raises(NeitherAnswered) as caught:
        reads.read(reads_by_cluster(primary=failing("primary"), standby=failing("standby", "timed out")))
    assert [cluster for cluster, _ in caught.value.failures] == ["primary", "standby"]
    assert str(caught.value) == ("hbase primary (127.0.0.1:9): scan: connection refused; "
                                 "hbase standby (127.0.0.1:9): scan: timed out")


def test_an_error_of_another_kind_is_raised_as_it_is(reads: SpeculativeReads[str]) -> None:
    def broken() -> str:
        raise KeyError("a bug, not an outage")

    with pytest.raises(KeyError, match="a bug"):
        reads.read(reads_by_cluster(primary=broken, standby=slow(1.0, "s")))


def held(release: threading.Event) -> Callable[[], str]:
    def read() -> str:
        release.wait(10)
        return "late"
    return read


def test_reads_skip_a_cluster_whose_threads_all_wait_on_it(reads: SpeculativeReads[str]) -> None:
    """Two threads a cluster: two reads hang on the primary; the third is
    sent to the standby without waiting the cutoff."""
    release = threading.Event()
    fn = reads_by_cluster(primary=held(release), standby=slow(0, "s"))
    try:
        first = [reads.read(fn) for _ in range(2)]
        answer, took = timed(lambda: reads.read(fn))
        assert first == [("standby", "s")] * 2
        assert answer == ("standby", "s") and took < CUTOFF_S
    finally:
        release.set()


def test_both_clusters_saturated_is_a_clear_error() -> None:
    reads: SpeculativeReads[str] = SpeculativeReads(PAIR, 0.05, threads=1)
    release = threading.Event()
    try:
        fn = reads_by_cluster(primary=held(release), standby=held(release))
        blocked = threading.Thread(target=lambda: reads.read(fn), daemon=True)
        blocked.start()
        time.sleep(0.2)  # its reads hold both clusters' only threads
        with pytest.raises(NeitherAnswered, match="both clusters have 1 reads in flight"):
            reads.read(fn)
    finally:
        release.set()
        reads.close()


def test_a_read_on_the_clusters_threads_runs_in_its_callers_context(reads: SpeculativeReads[str]) -> None:
    request: contextvars.ContextVar[str] = contextvars.ContextVar("request")
    request.set("r1")
    answer = reads.read(reads_by_cluster(primary=slow(5.0, "late"), standby=lambda: request.get("none")))
    assert answer == ("standby", "r1")


@pytest.mark.parametrize("cutoff, share", [(-1.0, 0.0), (float("nan"), 0.0), (0.1, 1.5)])
def test_bad_settings_are_refused(cutoff: float, share: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        SpeculativeReads(PAIR, cutoff, share)
