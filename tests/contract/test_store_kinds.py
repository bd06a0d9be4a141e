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
