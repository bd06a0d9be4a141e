"""A pin created through ``FeedActions`` is one trace, from the
application's request to every HBase call of its fan-out, in-process over
Redis and through a ``pinlater server`` (which does not trace here: the
jobs keep the application's trace all the same). The application's spans
are kept in memory; the workers write theirs to a file."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from pinlater.cli import main
from pinlater.observe import tracing
from tasks.appdata import graph
from tests.feeds.helpers import user
from tests.feeds.world import FeedWorld
from tests.support.spans import spans_in_memory
from tests.support.waits import wait_until

pytestmark = pytest.mark.slow

CLUSTERS = ("primary", "standby")


def _spans(path: Path, trace_id: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    spans = (json.loads(line) for line in path.read_text().splitlines() if line)
    return [s for s in spans if s["trace_id"] == trace_id]


def _named(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return sorted((s for s in spans if s["name"] == name), key=lambda s: s["start_ns"])


def _complete(spans: list[dict[str, Any]], queued: bool) -> bool:
    """Every publish in the file has its run there too."""
    pages = _named(spans, "run feeds.fanout")
    return len(pages) >= 3 and len(pages) == len(_named(spans, "publish feeds.fanout")) + 1 and all(
        len(_named(spans, f"run feeds.write_{c}")) == len(_named(spans, f"publish feeds.write_{c}"))
        >= (3 if queued else 0) for c in CLUSTERS
    )


def _hbase_clusters(spans: list[dict[str, Any]], parent: dict[str, Any], calls: str = "hbase ") -> set[str]:
    """The clusters of the calls right under ``parent`` whose names start with ``calls``."""
    return {s["attributes"]["pinlater.hbase.cluster"] for s in spans
            if s["parent_id"] == parent["span_id"] and s["name"].startswith(calls)}


# In the process each page puts its cells itself; through the server, with
# direct writes off, each page queues a write job per cluster.
@pytest.mark.parametrize("world", ["redis", "redis+thrift"], indirect=True)
@pytest.mark.feed_settings(page_size=50)
@pytest.mark.timeout(180)
def test_a_pin_through_feed_actions_is_one_trace_from_the_request_to_hbase(
    world: FeedWorld, tmp_path: Path, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    traces = tmp_path / "feed-traces.jsonl"
    queued = request.node.callspec.params["world"].endswith("+thrift")
    world.procs.env.update(OTEL_TRACES_EXPORTER="pinlater_file", PINLATER_TRACES_FILE=str(traces),
                           OTEL_SERVICE_NAME="feeds-worker", OTEL_BSP_SCHEDULE_DELAY="200",
                           PINLATER_FEED_DIRECT_WRITE_MS="0" if queued else "1000")
    store = world.store
    pinner = user(store, "pinner")
    board = graph.create_board(store, pinner, {"name": "b"}).id
    for i in range(120):  # three pages of 50
        graph.follow_user(store, user(store, f"f{i}"), pinner)
    world.start_workers()

    with spans_in_memory() as exporter:
        with tracing.span("web request") as web:
            world.actions.create_pin(pinner, board, {"title": "traced"})
        world.settle(90)
    trace_id = f"{web.get_span_context().trace_id:032x}"
    app_spans = {f"{s.context.span_id:016x}": s.name for s in exporter.get_finished_spans()
                 if s.context.trace_id == web.get_span_context().trace_id}
    wait_until(lambda: _complete(_spans(traces, trace_id), queued), 30, what="every run of the pin's trace in the file")
    spans = _spans(traces, trace_id)
    by_id = {s["span_id"]: s for s in spans}

    # The first page continues the application's enqueue (stored with the
    # raw job); every later page hangs beside it, under that same span,
    # from a publish that links to the page before.
    pages = _named(spans, "run feeds.fanout")
    origin = pages[0]["parent_id"]
    assert app_spans.get(origin) in ("pinlater enqueue", "client enqueueJobs"), (origin, app_spans)
    for before, page in itertools.pairwise(pages):
        publish = by_id[page["parent_id"]]
        assert publish["name"] == "publish feeds.fanout" and publish["parent_id"] == origin
        assert publish["links"] == [{"trace_id": trace_id, "span_id": before["span_id"]}]

    # Each cluster's write jobs: published by a page's run, each run with
    # its HBase calls to that cluster below it. Or, with none, each page's
    # own calls to both clusters below it.
    page_ids = {p["span_id"] for p in pages}
    for cluster in CLUSTERS:
        runs = _named(spans, f"run feeds.write_{cluster}")
        assert len(runs) == (3 if queued else 0), (cluster, len(runs))
        for run in runs:
            publish = by_id[run["parent_id"]]
            assert publish["name"] == f"publish feeds.write_{cluster}" and publish["parent_id"] in page_ids
            assert _hbase_clusters(spans, run) == {cluster}
            assert run["service"] == "feeds-worker"
    written = [page for page in pages if _hbase_clusters(spans, page, "hbase put") == set(CLUSTERS)]
    assert len(written) == (0 if queued else 3), [_hbase_clusters(spans, page) for page in pages]
    # Every run says how long its job waited in its queue.
    for run in (s for s in spans if s["name"].startswith("run ")):
        assert 0 <= run["attributes"]["pinlater.queue_wait_ms"] < 60_000, run

    # And `pinlater trace` prints it, each later page saying which it follows.
    assert main(["trace", str(traces), "--trace", trace_id]) == 0
    out = capsys.readouterr().out
    assert out.count("follows run feeds.fanout at ") == len(pages) - 1
