"""What every registered store kind must do beyond the job service's calls,
on each of its setups: ``pinlater migrate`` finds a store in use up to date
(a dry run and a real run alike, twice in a row), and the control store
keeps the records tools write (a capped newest-first log, a map)."""

from __future__ import annotations

import uuid

from pinlater import Job, JobService
from pinlater.stores import kind_of
from pinlater.stores.migrations import migrate


def test_migrate_finds_a_store_in_use_up_to_date(cluster: JobService, queue_name: str) -> None:
    cluster.create_queue(queue_name, priorities=1)
    [descriptor] = cluster.enqueue(queue_name, [Job(b"kept")])
    settings = cluster.settings
    runs: list[list[str]] = []
    for dry_run in (True, False, False):
        said: list[str] = []
        migrate(settings, dry_run=dry_run, say=said.append)
        runs.append(said)
    assert runs[0] == runs[1] == runs[2]
    stores = [f"shard {spec.id} ({kind_of(spec.url, 'shard').name})" for spec in settings.shards]
    stores.append(f"control store ({kind_of(settings.resolved_control_url, 'control store').name})")
    assert len(runs[0]) == len(stores)
    for line, where in zip(runs[0], stores, strict=True):
        assert line.startswith(f"{where}: "), line
        assert line.endswith((", up to date", "nothing to migrate")), line
    assert cluster.lookup([descriptor], include_body=True)[descriptor].body == b"kept"


def test_the_control_store_keeps_records(cluster: JobService) -> None:
    control = cluster.core.control
    log, table = f"log_{uuid.uuid4().hex[:8]}", f"map_{uuid.uuid4().hex[:8]}"
    for i in range(4):
        control.log_append(log, {"n": i, "text": "é"}, cap=3)
    assert [doc["n"] for doc in control.log_recent(log, 10)][:3] == [3, 2, 1]
    assert control.log_recent(log, 2) == [{"n": 3, "text": "é"}, {"n": 2, "text": "é"}]
    assert control.log_recent(f"{log}_none", 5) == []
    control.map_put(table, "a", {"v": 1})
    control.map_put(table, "b", {"v": 2})
    control.map_put(table, "a", {"v": 3})
    assert control.map_items(table) == {"a": {"v": 3}, "b": {"v": 2}}
    control.map_remove(table, ["a", "missing"])
    assert control.map_items(table) == {"b": {"v": 2}}
    control.map_remove(table, [])
    assert control.map_items(f"{table}_none") == {}


def test_the_control_store_counts_per_key_slots_atomically(cluster: JobService, queue_name: str) -> None:
    control = cluster.core.control
    q = queue_name
    assert control.key_slots_sync(q, 2, "aaaaaaaa", {"A": 3, "é": 1}) == {"A": 2, "é": 1}
    assert control.key_slots_sync(q, 2, "bbbbbbbb", {"A": 1, "B": 5}) == {"A": 0, "B": 2}
    now, stamps, held = control.key_slots_owners(q)
    assert set(stamps) == {"aaaaaaaa", "bbbbbbbb"} and all(now - 60_000 < at <= now for at in stamps.values())
    assert held == {("aaaaaaaa", "A"): 2, ("aaaaaaaa", "é"): 1, ("bbbbbbbb", "B"): 2}
    # Frees come first, never below 0, and what is freed is taken at once.
    granted = control.key_slots_sync(q, 2, "bbbbbbbb", {"A": 2}, frees={("aaaaaaaa", "A"): 5, ("bbbbbbbb", "B"): 1})
    assert granted == {"A": 2}
    assert control.key_slots_owners(q)[2] == {("aaaaaaaa", "é"): 1, ("bbbbbbbb", "A"): 2, ("bbbbbbbb", "B"): 1}
    # A leaving owner is stale at once: the monitor's settle sets it to what
    # it runs; an owner synced since is left alone; one left with nothing
    # is forgotten.
    control.key_slots_sync(q, 2, "aaaaaaaa", {}, leaving=True)
    now = control.key_slots_owners(q)[0]
    freed = control.key_slots_settle(q, {("aaaaaaaa", "é"): 0, ("bbbbbbbb", "A"): 0, ("cccccccc", "C"): 1},
                                     now - 20_000)
    assert freed == 1 - 1  # aaaaaaaa's é freed, unknown cccccccc's C added
    _, stamps, held = control.key_slots_owners(q)
    assert held == {("bbbbbbbb", "A"): 2, ("bbbbbbbb", "B"): 1, ("cccccccc", "C"): 1}
    assert "aaaaaaaa" not in stamps and "cccccccc" in stamps
    control.key_slots_drop(q)
    assert control.key_slots_owners(q)[1:] == ({}, {})


def test_a_free_of_an_owner_that_left_is_the_monitors_to_count(cluster: JobService, queue_name: str) -> None:
    control = cluster.core.control
    q = queue_name
    assert control.slots_sync(q, 3, "aaaaaaaa", 2) == (2, 2)  # two jobs claimed
    control.slots_sync(q, 3, "aaaaaaaa", 0, leaving=True)  # its process leaves, both still running
    now = control.slots_owners(q)[0]
    # Another process ACKs one of them: the job ends on its shard, then that
    # process frees the slot in its next step. The monitor counts the
    # leaver's jobs in between: one is running.
    assert control.slots_settle(q, {"aaaaaaaa": 1}, now - 20_000) == 1
    control.slots_sync(q, 3, "bbbbbbbb", 0, frees={"aaaaaaaa": 1})
    # Counted once: the leaver holds the slot of the job it still runs, and
    # the cap leaves two for others, not three.
    assert control.slots_owners(q)[1]["aaaaaaaa"][0] == 1
    assert control.slots_sync(q, 3, "cccccccc", 3) == (2, 2)
    # A free of an owner that has not left applies at once.
    control.slots_sync(q, 3, "bbbbbbbb", 0, frees={"cccccccc": 1})
    assert control.slots_owners(q)[1]["cccccccc"][0] == 1
    control.slots_drop(q)


def test_the_control_store_takes_and_gives_back_many_buckets_in_one_step(cluster: JobService) -> None:
    control = cluster.core.control
    a, b = f"bucket_{uuid.uuid4().hex[:8]}/key/a", f"bucket_{uuid.uuid4().hex[:8]}/key/é"
    # Slow enough that nothing refills during the test.
    assert control.acquire_many([a, b], 3, 0.001, 2) == [2, 2]
    assert control.acquire_many([a, b], 3, 0.001, 2) == [0, 0]
    control.release_many({a: 1, b: 0}, 2)
    assert control.acquire_many([b, a], 3, 0.001, 2) == [0, 1]
    assert control.acquire_many([], 3, 0.001, 2) == []
