"""How long HBase takes to serve again after a region server dies, and what
the writes acknowledged around it became.

The method is HBase's own ``IntegrationTestMTTR``: load beside a chaos
action, the longest outage seen is the recovery time. On the ``chaos``
cluster (``scripts/hbase up chaos``: ZooKeeper, a master and three region
servers as separate JVMs on the loopback) a table pre-split into 12 regions
takes a steady stream of single-row puts, one writer per region, with the
Python side's call timeout (``PINLATER_HBASE_CALL_TIMEOUT_S``, 10 s). Then
one region server is SIGKILLed and, for each region it held:

- ``regions_s``: seconds until meta places the region on a live server and a
  get of its row answers;
- ``writes_s``: seconds until a put to it succeeds.

The worst region is the figure. Cases: ``mttr`` (a region server without
``hbase:meta``; nothing deletes its ZooKeeper node, so the master learns of
the death when the session expires: a host dying), ``mttr_meta`` (the one
with ``hbase:meta``: meta is recovered first), ``mttr_crash`` (the process
dies but its host lives on: the node is deleted at once, as HBase's own
launcher does), ``mttr_pause`` (SIGSTOP for 60 s, then woken),
``mttr_hdfs`` and ``mttr_pause_hdfs`` (the kill and the pause on the
cluster restarted on HDFS, ``PINLATER_HBASE_FS=hdfs``: the region server's
DataNode goes with it, as a host) and ``mttr_default`` (the first case with
HBase's and ZooKeeper's default settings, measured in the same run). After
each case the server is started again; on HDFS the next case waits until
every block has its replicas again.

The ledger: every acknowledged put is read back (``lost``: missing or
different), and a scan of the table finds every row no put was attempted
for (``extra``).

    python bench/recovery.py                  # every case (8-11 minutes)
    python bench/recovery.py --smoke          # mttr only (CI)
    python bench/recovery.py --case mttr_hdfs --case mttr_pause_hdfs
    python bench/recovery.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from thriftpy2.rpc import make_client  # noqa: E402

from bench.results import write_json  # noqa: E402
from tasks.hbase.idl import THRIFT2  # noqa: E402

THRIFT2_PORT = 19095  # the chaos cluster's (scripts/hbase)
NAMENODE_WEB = "http://127.0.0.1:18321"  # its NameNode's web server, when on HDFS
REGIONS = 12
TABLE = b"recovery"
FAMILY = b"f"
CALL_TIMEOUT_MS = 10_000
WRITE_INTERVAL_S = 0.02  # per writer: at most 50 puts a second
PROBE_TIMEOUT_MS = 3_000
PAUSE_S = 60
Server = tuple[int, int]  # (port, start code)


def _split(region: int) -> bytes:
    return b"%02d" % region


def _row(region: int, n: int) -> bytes:
    return b"%02d-%09d" % (region, n)


def _probe_row(region: int) -> bytes:
    return b"%02d-probe" % region


def _client(timeout_ms: int = CALL_TIMEOUT_MS) -> Any:
    return make_client(THRIFT2.THBaseService, "127.0.0.1", THRIFT2_PORT, timeout=timeout_ms)


def hbase(*args: str, mttr: str | None = None, fs: str | None = None) -> str:
    env = dict(os.environ)
    if mttr is not None:
        env["PINLATER_HBASE_MTTR"] = mttr
    if fs is not None:
        env["PINLATER_HBASE_FS"] = fs
    done = subprocess.run([str(REPO / "scripts" / "hbase"), *args], env=env, capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"error: scripts/hbase {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def _put(client: Any, row: bytes, value: bytes) -> None:
    client.putMultiple(TABLE, [THRIFT2.TPut(row=row, columnValues=[
        THRIFT2.TColumnValue(family=FAMILY, qualifier=b"v", value=value)])])


def make_table() -> None:
    """A fresh ``recovery`` table, one region per writer, spread over the region servers."""
    client = _client(60_000)
    name = THRIFT2.TTableName(ns=b"default", qualifier=TABLE)
    if client.tableExists(name):
        client.disableTable(name)
        client.deleteTable(name)
    client.createTable(THRIFT2.TTableDescriptor(tableName=name, columns=[
        THRIFT2.TColumnFamilyDescriptor(name=FAMILY, maxVersions=1)]), [_split(r) for r in range(1, REGIONS)])
    # The table is created once its regions are assigned, not once they
    # serve: a region still opening answers a put with a retryable TIOError
    # (seen in CI, on a loaded machine).
    deadline = time.monotonic() + 120
    for region in range(REGIONS):
        while True:
            try:
                _put(client, _probe_row(region), b"probe")
                break
            except THRIFT2.TIOError as exc:
                if not exc.canRetry or time.monotonic() > deadline:
                    raise SystemExit(f"error: region {region} of the new table took no put within 120 s: "
                                     f"{exc.message}") from None
                time.sleep(1)
    client.close()


def locations(client: Any) -> dict[int, Server]:
    """Region number -> (port, start code) of the server meta places it on."""
    out: dict[int, tuple[int, int]] = {}
    for location in client.getAllRegionLocations(TABLE):
        start = location.regionInfo.startKey or b"00"
        out[int(start)] = (location.serverName.port, location.serverName.startCode)
    return out


def meta_server(client: Any) -> Server:
    (location,) = client.getAllRegionLocations(b"hbase:meta")
    return location.serverName.port, location.serverName.startCode


@dataclass
class Ledger:
    attempted: set[bytes] = field(default_factory=set)
    acked: dict[bytes, bytes] = field(default_factory=dict)
    # Per region: when each acknowledged put finished (time.monotonic()).
    acks: dict[int, list[float]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Writers:
    """One thread a region: put a new row, note it, wait a little, again."""

    def __init__(self, ledger: Ledger, case: str) -> None:
        self.ledger = ledger
        self.case = case
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(r,), daemon=True) for r in range(REGIONS)]

    def _run(self, region: int) -> None:
        client: Any = None
        n = 0
        while not self.stop.is_set():
            n += 1
            row = _row(region, n) + b"/" + self.case.encode()
            value = b"%d" % n
            with self.ledger.lock:
                self.ledger.attempted.add(row)
            try:
                client = client or _client()
                _put(client, row, value)
            except Exception:  # noqa: BLE001 (a failed put is retried as the next row; the ledger knows)
                if client is not None:
                    client.close()
                client = None
                time.sleep(0.1)
                continue
            with self.ledger.lock:
                self.ledger.acked[row] = value
                self.ledger.acks.setdefault(region, []).append(time.monotonic())
            time.sleep(WRITE_INTERVAL_S)
        if client is not None:
            client.close()

    @contextmanager
    def running(self) -> Iterator[Writers]:
        for thread in self.threads:
            thread.start()
        try:
            yield self
        finally:
            self.stop.set()
            for thread in self.threads:
                thread.join(CALL_TIMEOUT_MS / 1000 + 5)


def _first_read(region: int, since: float, deadline: float, dead: Server) -> float | None:
    """When, after ``since``, meta places ``region`` away from ``dead`` and a get of its row answers."""
    client: Any = None
    while time.monotonic() < deadline:
        try:
            client = client or _client(PROBE_TIMEOUT_MS)
            if locations(client).get(region, dead) != dead:
                result = client.get(TABLE, THRIFT2.TGet(row=_probe_row(region)))
                if result.columnValues:
                    client.close()
                    return time.monotonic() - since
        except Exception:  # noqa: BLE001 (still down: ask again)
            if client is not None:
                client.close()
            client = None
        time.sleep(0.1)
    return None


def measure(case: str, victim_of: Callable[[Any, dict[int, Server]], Server], fault: str,
            ledger: Ledger, limit_s: float) -> dict[str, Any]:
    """Fail the region server ``victim_of`` picks while the writers run (``fault``:
    kill, crash or pause); the recovery figures."""
    client = _client()
    placed = locations(client)
    dead = victim_of(client, placed)
    orphans = sorted(r for r, server in placed.items() if server == dead)
    carried_meta = meta_server(client) == dead
    client.close()
    if not orphans:
        raise SystemExit(f"error: {case}: the region server on port {dead[0]} holds no region of the table")
    rs = str(dead[0] - 16320)  # the chaos cluster's region servers are on 16321.. (scripts/hbase)
    with Writers(ledger, case).running():
        time.sleep(3)
        # Returns once the process is gone (or stopped).
        hbase("rs", "chaos", "pause" if fault == "pause" else "kill", rs)
        killed = time.monotonic()
        if fault == "crash":
            hbase("rs", "chaos", "forget", rs)
        deadline = killed + limit_s
        reads: dict[int, float | None] = {}
        threads = [threading.Thread(target=lambda r=r: reads.__setitem__(r, _first_read(r, killed, deadline, dead)))
                   for r in orphans]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Writes: the first acknowledged put of each orphaned region after the kill.
        while True:
            with ledger.lock:
                firsts = [next((t for t in ledger.acks.get(r, []) if t > killed), None) for r in orphans]
            if all(t is not None for t in firsts) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if fault == "pause":
            # It wakes to find its session expired and its regions elsewhere:
            # it must stop itself, and whatever it took before must be kept.
            time.sleep(max(0.0, killed + PAUSE_S - time.monotonic()))
            hbase("rs", "chaos", "resume", rs)
            wait_gone(rs)
        time.sleep(1)
    regions = [reads.get(r) for r in orphans]
    writes = [None if t is None else t - killed for t in firsts]
    hbase("rs", "chaos", "start", rs)
    result = {
        "victim_port": dead[0], "meta_on_victim": carried_meta, "fault": fault,
        "orphaned_regions": len(orphans),
        "regions_s": None if None in regions else round(max(r for r in regions if r is not None), 2),
        "writes_s": None if None in writes else round(max(w for w in writes if w is not None), 2),
    }
    print(f"{case}: {FAULTS[fault]} rs{rs} (port {dead[0]}{', hbase:meta' if carried_meta else ''}), "
          f"{len(orphans)} regions: served again in "
          f"{result['regions_s']} s, written in {result['writes_s']} s", flush=True)
    return result


FAULTS = {"kill": "SIGKILLed", "crash": "SIGKILLed and forgot", "pause": f"paused {PAUSE_S} s"}


def wait_gone(rs: str, limit_s: float = 60) -> None:
    """Until the resumed server has stopped itself; SIGKILL if it will not."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        line = next(x for x in hbase("rs", "chaos", "list").splitlines() if x.startswith(f"rs{rs} port "))
        if " dead, " in line:
            return
        time.sleep(1)
    print(f"rs{rs} still runs {limit_s:.0f} s after its resume: SIGKILL", flush=True)
    hbase("rs", "chaos", "kill", rs)


def without_meta(client: Any, placed: dict[int, Server]) -> Server:
    meta = meta_server(client)
    servers = sorted(set(placed.values()) - {meta})
    if not servers:
        raise SystemExit("error: every region of the table is on the server with hbase:meta")
    return servers[0]


def with_meta(client: Any, placed: dict[int, Server]) -> Server:
    return meta_server(client)


def hdfs_health() -> dict[str, int] | None:
    """The chaos cluster's HDFS: live DataNodes, and blocks with fewer
    replicas than asked, missing, or being copied; None when it runs on
    the local filesystem."""
    try:
        with urllib.request.urlopen(f"{NAMENODE_WEB}/jmx?qry=Hadoop:service=NameNode,name=FSNamesystem*",
                                    timeout=5) as reply:
            found = json.load(reply)["beans"]
    except urllib.error.URLError as error:
        if isinstance(error.reason, ConnectionRefusedError):
            return None
        raise
    beans = {k: v for bean in found for k, v in bean.items()}
    return {"live_datanodes": beans["NumLiveDataNodes"], "under_replicated": beans["UnderReplicatedBlocks"],
            "missing": beans["MissingBlocks"], "pending_copies": beans["PendingReplicationBlocks"]}


def wait_hdfs_healthy(limit_s: float = 180) -> None:
    """On HDFS, until every DataNode is live and every block has its
    replicas again: failures staged one after another are then independent,
    as a team would let the last one be repaired first (with two replicas on
    three DataNodes, a second host lost before the first's blocks are copied
    can hold a block's only replica)."""
    deadline = time.monotonic() + limit_s
    while (health := hdfs_health()) is not None:
        if health["live_datanodes"] == 3 and health["under_replicated"] == health["missing"] == 0:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"error: HDFS not healthy within {limit_s:.0f} s: {health}")
        time.sleep(1)


def wait_registered(limit_s: float = 120) -> None:
    """Wait until three region servers are registered (the restarted one too)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if hbase("rs", "chaos", "list").count(", registered") == 3:
            return
        time.sleep(1)
    raise SystemExit("error: the chaos cluster has fewer than three region servers registered")


def audit(ledger: Ledger, case: str) -> dict[str, int]:
    """Every acknowledged put of ``case`` read back; every row of the table
    that ``case``'s writers make was attempted."""
    client = _client(60_000)
    rows = sorted(ledger.acked)
    lost = 0
    for i in range(0, len(rows), 500):
        chunk = rows[i:i + 500]
        results = client.getMultiple(TABLE, [THRIFT2.TGet(row=row) for row in chunk])
        for row, result in zip(chunk, results, strict=True):
            values = {cv.qualifier: cv.value for cv in result.columnValues or []}
            lost += values.get(b"v") != ledger.acked[row]
    found: list[bytes] = []
    start = b""
    while True:
        page = client.getScannerResults(TABLE, THRIFT2.TScan(startRow=start), 5000)
        found.extend(result.row for result in page if result.row != start or not found)
        if len(page) < 5000:
            break
        start = page[-1].row
    client.close()
    extra = sum(1 for row in found if row.endswith(b"/" + case.encode()) and row not in ledger.attempted)
    return {"acked": len(rows), "attempted": len(ledger.attempted), "lost": lost, "extra": extra}


# name, recovery settings, files, victim, fault, limit (s). The local cases
# first, then those on HDFS, then HBase's defaults: a restart at each change.
CASES: list[tuple[str, str, str, Callable[[Any, dict[int, Server]], Server], str, float]] = [
    ("mttr", "tuned", "local", without_meta, "kill", 90),
    ("mttr_meta", "tuned", "local", with_meta, "kill", 90),
    ("mttr_crash", "tuned", "local", without_meta, "crash", 90),
    ("mttr_pause", "tuned", "local", without_meta, "pause", 90),
    ("mttr_hdfs", "tuned", "hdfs", without_meta, "kill", 90),
    ("mttr_pause_hdfs", "tuned", "hdfs", without_meta, "pause", 90),
    ("mttr_default", "default", "local", without_meta, "kill", 300),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="the first case only, tuned settings (CI)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--keep", action="store_true", help="leave the chaos cluster running")
    parser.add_argument("--case", action="append", choices=[case[0] for case in CASES],
                        help="only this case (repeatable)")
    args = parser.parse_args()
    result: dict[str, Any] = {}
    totals = {"acked": 0, "attempted": 0, "lost": 0, "extra": 0}
    chosen = args.case or ([CASES[0][0]] if args.smoke else [case[0] for case in CASES])
    cases = [case for case in CASES if case[0] in chosen]
    current = None
    try:
        for case, settings, fs, victim_of, fault, limit in cases:
            if (settings, fs) != current:
                t0 = time.monotonic()
                hbase("up", "chaos", mttr=settings, fs=fs)
                wait_registered()
                make_table()
                current = (settings, fs)
                print(f"chaos cluster ({settings} recovery settings, {fs} files) ready in "
                      f"{time.monotonic() - t0:.0f} s", flush=True)
            wait_registered()
            wait_hdfs_healthy()
            ledger = Ledger()
            result[case] = measure(case, victim_of, fault, ledger, limit)
            result[case]["settings"] = settings
            audited = audit(ledger, case)
            result[case].update(audited)
            for key, value in audited.items():
                totals[key] += value
    finally:
        if not args.keep:
            hbase("down", "chaos")
    result.update(totals)
    print(f"ledger: {result['acked']} puts acknowledged of {result['attempted']} attempted; "
          f"lost {result['lost']}, extra {result['extra']}")
    write_json(args.json, result)


if __name__ == "__main__":
    main()
