"""Idempotent enqueue's steps against a scripted control store: what each
answer of the store leads to, and how many calls the usual case costs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from pinlater.engine import idempotency
from pinlater.engine.idempotency import enqueue_once
from pinlater.errors import EnqueueRejected


class Scripted:
    """The idempotency calls of a control store, answering from scripts."""

    def __init__(self, reserves: Sequence[bool], recalls: Sequence[list[str] | None] = ()) -> None:
        self.reserves, self.recalls = list(reserves), list(recalls)
        self.calls: list[str] = []
        self.remembered: list[str] | None = None

    def reserve_enqueue(self, key: str, ttl_ms: int) -> bool:
        self.calls.append("reserve")
        return self.reserves.pop(0) if self.reserves else False

    def recall_enqueue(self, key: str) -> list[str] | None:
        self.calls.append("recall")
        return self.recalls.pop(0) if self.recalls else None

    def remember_enqueue(self, key: str, descriptors: Sequence[str], ttl_ms: int) -> None:
        self.calls.append("remember")
        self.remembered = list(descriptors)

    def forget_enqueue(self, key: str) -> None:
        self.calls.append("forget")


def _run(store: Scripted) -> list[str]:
    return enqueue_once(store, "q", "k", 60_000, lambda: ["new"])  # type: ignore[arg-type]


def test_a_new_key_costs_one_call_before_the_enqueue_and_one_after() -> None:
    store = Scripted([True])
    assert _run(store) == ["new"]
    assert store.calls == ["reserve", "remember"] and store.remembered == ["new"]


def test_a_remembered_key_answers_with_the_first_calls_jobs() -> None:
    store = Scripted([False], [["first"]])
    assert _run(store) == ["first"]
    assert store.calls == ["reserve", "recall"]


def test_a_key_held_by_a_running_enqueue_is_waited_for() -> None:
    store = Scripted([False, False], [[], ["first"]])  # reserved, then done
    assert _run(store) == ["first"]
    assert store.calls == ["reserve", "recall", "reserve", "recall"]


def test_a_key_that_expired_between_the_calls_is_taken_again_without_waiting() -> None:
    store = Scripted([False, True], [None])
    assert _run(store) == ["new"]
    assert store.calls == ["reserve", "recall", "reserve", "remember"]


def test_a_store_that_never_lets_go_ends_in_a_refusal_not_a_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(idempotency, "WAIT_S", 0.05)
    scripts: list[list[list[str] | None]] = [[[]] * 1000, [None] * 100_000]  # held forever; "gone" yet never free
    for recalls in scripts:
        store = Scripted([], recalls)
        with pytest.raises(EnqueueRejected, match="still running"):
            _run(store)
        assert "remember" not in store.calls
