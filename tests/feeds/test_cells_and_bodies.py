"""Columns sort newest first and parse back; write bodies survive JSON and
refuse what this code would never make. No servers needed."""

from __future__ import annotations

import json

import pytest

from tasks.appdata.ids import ObjectType, make_id
from tasks.feeds.cells import column, parse_qualifier, parse_row_key, qualifier, row_key
from tasks.feeds.fanout import FanoutJob, InvalidFanoutJob
from tasks.feeds.follow import FollowAction, InvalidFollowAction
from tasks.feeds.writes import InvalidWriteBody, WriteBody

PIN = make_id(3, ObjectType.PIN, 42)
USER = make_id(1, ObjectType.USER, 7)
BOARD = make_id(1, ObjectType.BOARD, 9)


def test_qualifiers_sort_newest_first_and_parse_back() -> None:
    cells = [
        (1_700_000_000_000 + d, make_id(s, ObjectType.PIN, local))
        for d in (0, 1, 999)
        for s, local in ((0, 1), (3, 2**36 - 1), (65535, 5))
    ]
    ordered = sorted(cells, key=lambda c: qualifier(*c))
    assert [c[0] for c in ordered] == sorted((c[0] for c in cells), reverse=True)
    for created, pin_id in cells:
        q = qualifier(created, pin_id)
        assert len(q) == 32
        assert parse_qualifier(q) == (created, pin_id)
    assert column(5, PIN) == b"feed:" + qualifier(5, PIN)
    assert parse_row_key(row_key(USER)) == USER and len(row_key(1)) == len(row_key(USER))


@pytest.mark.parametrize("bad", [b"", b"12", b"x" * 32, b"9" * 32, b"0" * 33])
def test_bad_qualifiers_are_refused(bad: bytes) -> None:
    with pytest.raises(ValueError):
        parse_qualifier(bad)


def test_write_bodies_round_trip_and_validate() -> None:
    put = WriteBody("put", "standby", BOARD, ((USER, 5),), (qualifier(5, PIN).decode(),))
    retract = WriteBody("retract", "primary", USER, ((USER + 1, 7),))
    for body in (put, retract):
        assert WriteBody.from_json(body.to_json()) == body
    good = {"op": "put", "cluster": "primary", "followee": BOARD, "rows": [[USER, 5]],
            "columns": [qualifier(5, PIN).decode()]}
    for key, value in [
        ("op", "upsert"),
        ("op", "delete"),  # a body of the layout before versions
        ("cluster", "tertiary"),
        ("followee", PIN),
        ("followee", "x"),
        ("rows", []),
        ("rows", [USER]),
        ("rows", [[USER, 0]]),
        ("rows", [[USER, 1.5]]),
        ("rows", [[0, 5]]),
        ("rows", [[USER, 5, 6]]),
        ("rows", [[USER, 5], [USER]]),
        ("rows", ["ab"]),
        ("rows", [{"a": USER, "b": 5}]),
        ("rows", [[True, 5]]),
        ("rows", [[USER, True]]),
        ("rows", [[USER, 2**63]]),
        ("rows", [[10**19, 5]]),
        ("rows", [[USER, 5]] * 10_001),
        ("rows", "x"),
        ("columns", ["feed:x"]),
        ("columns", []),
    ]:
        with pytest.raises(InvalidWriteBody):
            WriteBody.from_json(json.dumps({**good, key: value}))
    with pytest.raises(InvalidWriteBody):
        WriteBody.from_json(json.dumps({**good, "op": "retract"}))  # a retraction names no columns
    with pytest.raises(InvalidWriteBody):
        WriteBody.from_json(json.dumps({**good, "timestamp": 5}))
    with pytest.raises(InvalidWriteBody):
        WriteBody.from_json("{}")


def test_job_bodies_round_trip_and_validate() -> None:
    job = FanoutJob(PIN, USER, BOARD, 5, phase="board", cursor="5:7", page_size=10, priority=3)
    assert FanoutJob.from_json(job.to_json()) == job
    with pytest.raises(InvalidFanoutJob):
        FanoutJob(PIN, BOARD, BOARD, 5)
    with pytest.raises(InvalidFanoutJob):
        FanoutJob(PIN, USER, BOARD, 5, phase="everyone")  # type: ignore[arg-type]
    action = FollowAction(USER, BOARD, "unfollow", 10, follow_at=4)
    assert FollowAction.from_json(action.to_json()) == action and action.of_board
    with pytest.raises(InvalidFollowAction):
        FollowAction(USER, BOARD, "unfollow", 10)  # which follow it undoes: its time
    with pytest.raises(InvalidFollowAction):
        FollowAction(USER, BOARD, "follow", 10, follow_at=4)
    with pytest.raises(InvalidFollowAction):
        FollowAction(USER, PIN, "follow", 10)
    with pytest.raises(InvalidFollowAction):
        FollowAction(USER, USER, "follow", 10)
