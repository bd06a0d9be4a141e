"""``pinlater trace FILE``: one trace from a file of spans (the
``pinlater_file`` exporter's JSON lines, written by every process of a
run), printed as a tree with the time of each step and, for a task's run,
the time its job waited in its queue.

A trace is picked by id (``--trace``), by a span attribute
(``--where KEY=VALUE``, e.g. ``feeds.pin_id=42``), or else the trace of
the newest root span. Spans whose parent is missing from the file (a
process that has not flushed yet) are shown as roots. A span that links
to another of its trace (a chained page to the page that made it) says
which, and when that one started.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

Span = dict[str, Any]
# Attributes shown after a span's name, when present.
SHOWN = ("pinlater.queue", "pinlater.shard", "pinlater.hbase.cluster", "server.address")


def read_spans(lines: Iterable[str]) -> list[Span]:
    """The spans of a file; a line that is not a span (a torn last line
    of a process still writing) is skipped."""
    spans = []
    for line in lines:
        try:
            span = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(span, dict) and {"trace_id", "span_id", "name", "start_ns", "end_ns"} <= span.keys():
            spans.append(span)
    return spans


def pick_trace(spans: list[Span], trace_id: str | None = None, where: str | None = None) -> str:
    """The id of the trace asked for; ValueError if there is none."""
    if trace_id is not None:
        if not any(s["trace_id"] == trace_id for s in spans):
            raise ValueError(f"no span of trace {trace_id} in the file")
        return trace_id
    if where is not None:
        key, sep, value = where.partition("=")
        if not sep:
            raise ValueError(f"--where takes KEY=VALUE, got {where!r}")
        found = [s for s in spans if str((s.get("attributes") or {}).get(key)) == value]
        if not found:
            raise ValueError(f"no span has {key}={value}")
        return str(min(found, key=lambda s: s["start_ns"])["trace_id"])
    roots = [s for s in spans if not s.get("parent_id")]
    if not roots:
        raise ValueError("the file holds no complete trace")
    return str(max(roots, key=lambda s: s["start_ns"])["trace_id"])


def _label(span: Span, by_id: dict[str, Span], start: int) -> str:
    attributes = span.get("attributes") or {}
    millis = (span["end_ns"] - span["start_ns"]) / 1e6
    parts = [f"{span['name']}  {millis:.1f} ms"]
    shown = list(SHOWN)
    if "pinlater.queue_wait_ms" in attributes:
        queue = attributes.get("pinlater.queue", "its queue")
        parts.append(f"waited {attributes['pinlater.queue_wait_ms']} ms in {queue}")
        shown.remove("pinlater.queue")
    named = [f"{key.rsplit('.', 1)[-1]}={attributes[key]}" for key in shown if key in attributes]
    if named:
        parts.append(" ".join(named))
    for link in span.get("links") or ():
        linked = by_id.get(link.get("span_id"))
        if linked is not None:
            parts.append(f"follows {linked['name']} at {(linked['start_ns'] - start) / 1e6:.1f} ms")
    if span.get("status") == "error":
        parts.append("ERROR")
    if span.get("service"):
        parts.append(f"[{span['service']}]")
    return "  ".join(parts)


def render(spans: list[Span], trace_id: str) -> list[str]:
    """The trace's spans as indented lines, children in start order, each
    with its offset from the trace's start."""
    mine = [s for s in spans if s["trace_id"] == trace_id]
    by_id = {s["span_id"]: s for s in mine}
    children: dict[str | None, list[Span]] = {}
    for s in mine:
        parent = s.get("parent_id") if s.get("parent_id") in by_id else None
        children.setdefault(parent, []).append(s)
    for group in children.values():
        group.sort(key=lambda s: s["start_ns"])
    start = min(s["start_ns"] for s in mine)
    end = max(s["end_ns"] for s in mine)
    lines = [f"trace {trace_id}: {len(mine)} spans over {(end - start) / 1e6:.1f} ms"]

    def walk(span: Span, depth: int) -> None:
        offset = (span["start_ns"] - start) / 1e6
        lines.append(f"{offset:>10.1f} ms  {'  ' * depth}{_label(span, by_id, start)}")
        for child in children.get(span["span_id"], []):
            walk(child, depth + 1)

    for root in children.get(None, []):
        walk(root, 0)
    return lines


def run_trace(args: argparse.Namespace) -> int:
    try:
        with open(args.file, encoding="utf-8") as f:
            spans = read_spans(f)
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    trace_id = pick_trace(spans, args.trace, args.where)
    print("\n".join(render(spans, trace_id)))
    return 0


def add_trace_command(sub: Any) -> None:
    p = sub.add_parser(
        "trace", help="print one trace from a file of spans as a tree",
        description="Print one trace from a file of spans (OTEL_TRACES_EXPORTER=pinlater_file) as a tree, "
                    "with the time in each step and in each queue.",
    )
    p.set_defaults(run=run_trace)
    p.add_argument("file", help="the spans, one JSON object per line (PINLATER_TRACES_FILE)")
    p.add_argument("--trace", help="the trace's id (default: the newest trace's)")
    p.add_argument("--where", metavar="KEY=VALUE", help="the trace of the first span with this attribute")
