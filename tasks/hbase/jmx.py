"""The feed-trimming coprocessor's counts, read from each region server's
JMX over its web server (``/jmx``, JSON; loopback in ``scripts/hbase``).

The coprocessor keeps one set of counters per region server, across its
regions, in HBase's metric registry; HBase copies them to JMX every ten
seconds or so, so a count read right after a compaction may lag it.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from pinlater.kit.cli_output import one_line
from tasks.hbase.errors import HBaseUnavailable
from tasks.hbase.settings import Address, Addresses
from tasks.hbase.tables import FEED_TRIM_OBSERVER

TRIM_BEAN = f"Hadoop:service=HBase,name=RegionServer,sub=Coprocessor.Region.CP_{FEED_TRIM_OBSERVER}"
MAX_BYTES = 1 << 20  # one bean's JSON is a few hundred bytes


@dataclass(frozen=True, slots=True)
class TrimCounts:
    """Since the region server started."""

    cells_dropped: int
    rows_trimmed: int
    compactions_trimmed: int  # compactions that saw the store as of one moment, so trimmed
    compactions_passed: int  # minor compactions left alone (docs/feeds.md says why)


_FIELDS = {"CellsDropped": "cells_dropped", "RowsTrimmed": "rows_trimmed",
           "CompactionsTrimmed": "compactions_trimmed", "CompactionsPassed": "compactions_passed"}


def trim_counts(cluster: str, addresses: Addresses, timeout_s: float = 2.0) -> TrimCounts | None:
    """The counts of ``cluster``'s region servers, summed, or None when none
    has any (no region of a table attached to the coprocessor has opened
    there). ``HBaseUnavailable`` in one line, naming the server, when a web
    server does not answer with HBase's JMX."""
    found = [counts for address in addresses if (counts := _server_counts(cluster, address, timeout_s)) is not None]
    if not found:
        return None
    return TrimCounts(**{name: sum(getattr(counts, name) for counts in found) for name in _FIELDS.values()})


def _server_counts(cluster: str, address: Address, timeout_s: float) -> TrimCounts | None:
    url = f"http://{address}/jmx?qry={urllib.parse.quote(TRIM_BEAN, safe='=,:')}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            body = response.read(MAX_BYTES + 1)
        if len(body) > MAX_BYTES:
            raise ValueError(f"an answer over {MAX_BYTES} bytes")
        beans = json.loads(body)["beans"]
        if not beans:
            return None
        return TrimCounts(**{name: int(beans[0].get(field, 0)) for field, name in _FIELDS.items()})
    except (OSError, ValueError, KeyError, TypeError, urllib.error.URLError) as exc:
        raise HBaseUnavailable(cluster, str(address), "read the trimming counts (JMX)",
                               one_line(f"{type(exc).__name__}: {exc}")) from None
