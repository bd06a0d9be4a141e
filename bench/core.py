"""Core throughput: PinLater's Redis and MySQL backends against this
machine's ceiling, measured in the same run.

For each backend: enqueue and dequeue+ACK with batches of 1 and 100, two
client processes; and dequeue+ACK of a queue with a concurrency cap above
what the two hold at once, against the same without one
(``vs_uncapped``); and dequeue+ACK of a queue whose jobs have 10,000
fairness keys, served in turn, against the same without keys
(``vs_unkeyed``), and the same again under per-key limits that never bind
(a per-key cap and rate above what a key has), against the keyed drain
(``vs_keyed``): what the limits' own steps cost; and enqueue with a
unique key per job, against plain enqueue (``vs_plain``), and on MySQL the
floor its schema sets (``floor_vs_plain``, ``in_row_vs_plain``:
``bench/unique_floor.py``), and what its keyed drain could reach with
start-time fair queuing (``sfq_vs_unkeyed``: ``bench/fair_floor.py``).
Each of these ``vs_`` ratios is the median of paired rounds on fresh
queues, taking turns at going first (``rounds``).
The ceiling is the same
work done with no job service in
between: redis-py pipelining the equivalent raw commands (no atomicity, no
claims), and on MariaDB a raw multi-row INSERT and an indexed
``UPDATE ... LIMIT`` claim loop.

    python bench/core.py            # full run, about fifteen minutes
    python bench/core.py --smoke    # a few seconds, for CI
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing
import os
import secrets
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pymysql
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import fair_floor, unique_floor
from bench.results import write_json
from bench.workloads import BODY, drain_all, enqueue_all, enqueue_keyed, enqueue_unique
from pinlater import JobService
from pinlater.settings import Settings, parse_shards

PROCESSES = 2
# The capped case's cap, in batches: above the PROCESSES batches held at once.
CAP_PER_BATCH = 2 * PROCESSES
# The keyed case's distinct fairness keys (fewer in a smoke run).
KEYS = 10_000
# PINLATER_BENCH_REDIS=redis://HOST:PORT runs the Redis half on another
# server (dbs 5 and 6 there, flushed at the start).
REDIS_BASE = os.environ.get("PINLATER_BENCH_REDIS", "redis://127.0.0.1:16379")
REDIS_SHARD = f"{REDIS_BASE}/5"
REDIS_CONTROL = f"{REDIS_BASE}/6"
MYSQL_BASE = "mysql://pinlater:pinlater@127.0.0.1:13306"


def settings_for(backend: str) -> Settings:
    if backend == "redis":
        return Settings(shards=parse_shards(f"r1={REDIS_SHARD}"), control_url=REDIS_CONTROL)
    return Settings(
        shards=parse_shards(f"d1={MYSQL_BASE}/pinlater_bench"), control_url=REDIS_CONTROL
    )


# -- PinLater workloads (run inside worker processes) ---------------------------
Timed = tuple[int, float, float]  # jobs done, wall clock at start and end (after set-up)


def pl_enqueue(backend: str, queue: str, jobs: int, batch: int) -> Timed:
    with JobService.from_settings(settings_for(backend), source=f"bench-{os.getpid()}") as client:
        client.queue_config(queue)  # set-up (connections, scripts, config) is not timed
        started = time.time()
        done = enqueue_all(client, queue, jobs, batch)
        ended = time.time()
    return done, started, ended


def pl_drain(backend: str, queue: str, jobs: int, batch: int) -> Timed:
    with JobService.from_settings(settings_for(backend), source=f"bench-{os.getpid()}") as client:
        client.queue_config(queue)
        started = time.time()
        done = drain_all(client, queue, jobs, batch)
        ended = time.time()
    return done, started, ended


def pl_enqueue_keyed(backend: str, queue: str, jobs: int, batch: int, keys: int = KEYS) -> Timed:
    with JobService.from_settings(settings_for(backend), source=f"bench-{os.getpid()}") as client:
        client.queue_config(queue)
        started = time.time()
        # The two processes' jobs take turns over the same keys.
        done = enqueue_keyed(client, queue, jobs, batch, keys, first=os.getpid())
        ended = time.time()
    return done, started, ended


def pl_enqueue_unique(backend: str, queue: str, jobs: int, batch: int) -> Timed:
    with JobService.from_settings(settings_for(backend), source=f"bench-{os.getpid()}") as client:
        client.queue_config(queue)
        started = time.time()
        done = enqueue_unique(client, queue, jobs, batch, first=os.getpid())
        ended = time.time()
    return done, started, ended


# -- ceilings -----------------------------------------------------------------------
def raw_redis_enqueue(_: str, key: str, jobs: int, batch: int) -> Timed:
    r = redis.Redis.from_url(REDIS_SHARD)
    r.ping()
    done = 0
    started = time.time()
    now = int(time.time() * 1000)
    while done < jobs:
        n = min(batch, jobs - done)
        ids = r.incrby(f"{key}:ids", n)
        pipe = r.pipeline(transaction=False)
        for i in range(ids - n + 1, ids + 1):
            pipe.hset(f"{key}:j:{i}", mapping={"body": BODY, "state": 0, "attempts": 2, "run_after": now})
            pipe.zadd(f"{key}:pending", {str(i): now})
        pipe.execute()
        done += n
    return done, started, time.time()


def raw_redis_drain(_: str, key: str, jobs: int, batch: int) -> Timed:
    r = redis.Redis.from_url(REDIS_SHARD)
    r.ping()
    done = 0
    started = time.time()
    while done < jobs:
        popped = r.zpopmin(f"{key}:pending", min(batch, jobs - done))
        if not popped:
            break
        now = int(time.time() * 1000)
        pipe = r.pipeline(transaction=False)
        for member, _score in popped:
            pipe.hset(f"{key}:j:{member.decode()}", "state", 1)
            pipe.zadd(f"{key}:running", {member: now})
            pipe.hget(f"{key}:j:{member.decode()}", "body")
        pipe.execute()
        pipe = r.pipeline(transaction=False)
        for member, _score in popped:
            pipe.zrem(f"{key}:running", member)
            pipe.hset(f"{key}:j:{member.decode()}", "state", 2)
            pipe.zadd(f"{key}:succeeded", {member: now})
        pipe.execute()
        done += len(popped)
    return done, started, time.time()


def _mysql() -> pymysql.connections.Connection:
    return pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater",
                           database="pinlater_bench_raw", autocommit=True)


def raw_mysql_enqueue(_: str, table: str, jobs: int, batch: int) -> Timed:
    conn = _mysql()
    done = 0
    started = time.time()
    with conn.cursor() as cur:
        while done < jobs:
            n = min(batch, jobs - done)
            cur.executemany(
                # All placeholders: PyMySQL only folds executemany into one
                # multi-row INSERT when the VALUES tuple is nothing but %s.
                f"INSERT INTO {table} (state, body, attempts_remaining, run_after, updated_at) "
                "VALUES (%s, %s, %s, %s, %s)",
                [(0, BODY, 2, int(time.time() * 1000), int(time.time() * 1000))] * n,
            )
            done += n
    ended = time.time()
    conn.close()
    return done, started, ended


def raw_mysql_drain(_: str, table: str, jobs: int, batch: int) -> Timed:
    conn = _mysql()
    done = 0
    started = time.time()
    with conn.cursor() as cur:
        while done < jobs:
            claim = secrets.token_hex(8)
            now = int(time.time() * 1000)
            try:
                cur.execute(
                    f"UPDATE {table} SET state = 1, claim = %s, updated_at = %s "
                    "WHERE state = 0 AND run_after <= %s ORDER BY run_after, id LIMIT %s",
                    (claim, now, now, min(batch, jobs - done)),
                )
            except pymysql.err.OperationalError as exc:
                # Concurrent claims can deadlock; the statement was rolled
                # back, so claim again (as the job service's pool does).
                if exc.args[0] in (1205, 1213):
                    continue
                raise
            cur.execute(f"SELECT id, body FROM {table} WHERE claim = %s", (claim,))
            rows = cur.fetchall()
            if not rows:
                break
            fair_floor.raw_ack(cur, table, [row[0] for row in rows])
            done += len(rows)
    ended = time.time()
    conn.close()
    return done, started, ended


def prepare_raw_mysql() -> str:
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", autocommit=True)
    table = f"raw_{uuid.uuid4().hex[:8]}"
    with conn.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS pinlater_bench_raw")
        cur.execute(
            f"CREATE TABLE pinlater_bench_raw.{table} (id BIGINT UNSIGNED AUTO_INCREMENT PRIMARY KEY, "
            "state TINYINT NOT NULL, body MEDIUMBLOB, attempts_remaining INT, run_after BIGINT, "
            "updated_at BIGINT, claim VARCHAR(255), KEY state_run_after (state, run_after, id), "
            "KEY claim (claim)) ENGINE=InnoDB"
        )
    conn.close()
    return table


# -- harness --------------------------------------------------------------------------
Work = Callable[[str, str, int, int], Timed]


def run_parallel(pool: ProcessPoolExecutor, fn: Work, backend: str, target: str, jobs: int, batch: int) -> float:
    """Jobs per second of PROCESSES workers together, from the first one's
    start to the last one's end (each starts its clock after its set-up)."""
    share = jobs // PROCESSES
    futures = [pool.submit(fn, backend, target, share, batch) for _ in range(PROCESSES)]
    results = [f.result() for f in futures]
    done = sum(r[0] for r in results)
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    if done < share * PROCESSES:
        raise RuntimeError(f"{getattr(fn, '__name__', fn)} did only {done} of {share * PROCESSES} jobs")
    return done / elapsed


Maker = Callable[[], tuple[Work, str]]  # a workload and a fresh target for it


# The key-limited case's limits: above what any key has, so that the run
# times their steps, not a wait.
KEY_CAP = 1_000
KEY_RATE = 1e6


def drained(
    pool: ProcessPoolExecutor, client: JobService, backend: str, batch: int, jobs: int, label: str,
    enqueue: Work = pl_enqueue, **config: object,
) -> Maker:
    """A fresh queue (its config set) holding ``jobs`` jobs, enqueued
    untimed, for a timed drain."""

    def make() -> tuple[Work, str]:
        queue = f"bench_{backend}_{batch}_{label}_{uuid.uuid4().hex[:6]}"
        client.create_queue(queue)
        if config:
            client.update_queue(queue, **config)
        run_parallel(pool, enqueue, backend, queue, jobs, batch)
        return pl_drain, queue
    return make


def drain_rows(
    pool: ProcessPoolExecutor, client: JobService, backend: str, batch: int, jobs: int, peak: float, rounds: int,
    keys: int,
) -> list[dict[str, object]]:
    """Dequeue+ACK under a concurrency cap above what the workers hold at
    once (each holds a batch until its ACKs ride on its next dequeue),
    against the same without a cap (``vs_uncapped``); of jobs with ``keys``
    fairness keys, every dequeue taking them in turn, against the same
    without keys (``vs_unkeyed``); and the keyed drain again under per-key
    limits that never bind, against the keyed one (``vs_keyed``). Each the
    median of paired rounds on fresh queues (``paired``): as one drain
    against another, Redis's capped row read 0.96 and 1.35 in two runs
    three minutes apart, and 0.61 later that day."""
    cap = CAP_PER_BATCH * batch
    keyed_jobs = functools.partial(pl_enqueue_keyed, keys=keys)
    plain = drained(pool, client, backend, batch, jobs, "plain")
    keyed = drained(pool, client, backend, batch, jobs, "keyed", keyed_jobs)
    cases: list[tuple[str, Maker, Maker, str, dict[str, object], str]] = [
        ("capped", plain, drained(pool, client, backend, batch, jobs, "capped", max_running=cap), "vs_uncapped",
         {"max_running": cap}, f"cap {cap}: {{:5.2f}} of the same without a cap"),
        ("keyed", plain, keyed, "vs_unkeyed", {"keys": keys},
         f"{keys:,} keys: {{:5.2f}} of the same without keys"),
        ("key-limited", keyed,
         drained(pool, client, backend, batch, jobs, "keylim", keyed_jobs, key_max_running=KEY_CAP,
                 key_rate=KEY_RATE),
         "vs_keyed", {"keys": keys, "key_max_running": KEY_CAP, "key_rate": KEY_RATE},
         "per-key cap and rate: {:5.2f} of the keyed run"),
    ]
    rows: list[dict[str, object]] = []
    for name, base, other, field, extra, says in cases:
        vs, rate = paired(pool, backend, jobs, batch, rounds, base, other)
        print(f"{backend:6} {name:12} batch {batch:4}: {rate:9,.0f} jobs/s   {says.format(vs)} "
              f"(median of {rounds} paired rounds)", flush=True)
        rows.append({"backend": backend, "op": f"dequeue+ack {name}", "batch": batch, "jobs": jobs, **extra,
                     "jobs_per_s": round(rate), "ceiling_per_s": round(peak), "ratio": round(rate / peak, 2),
                     field: round(vs, 2), "rounds": rounds})
        if backend == "mysql" and name == "keyed":
            def raw(fn: Work, with_keys: int) -> Maker:
                return lambda: (fn, fair_floor.prepare(jobs, with_keys))

            sfq = paired(pool, backend, jobs, batch, rounds, raw(fair_floor.plain_drain, 0),
                         raw(fair_floor.sfq_drain, keys))[0]
            rows[-1]["sfq_vs_unkeyed"] = round(sfq, 2)
            print(f"{'':6} {'':12} {'':10}  raw SQL: the same keys served by start-time fair queuing "
                  f"{sfq:5.2f} of the same without keys (bench/fair_floor.py)", flush=True)
    return rows


def paired(
    pool: ProcessPoolExecutor, backend: str, jobs: int, batch: int, rounds: int, base: Maker, other: Maker,
) -> tuple[float, float]:
    """The median over ``rounds`` of ``other``'s rate over ``base``'s, each
    round running both on fresh targets and taking turns at going first,
    so that neither always meets the warmer store; and ``other``'s median
    rate. One run of each is a second or two here, where the machine's
    spread from one run to the next is as large as the effects measured."""
    ratios: list[float] = []
    rates: list[float] = []
    for r in range(rounds):
        got: dict[int, float] = {}
        for k in ((0, 1) if r % 2 == 0 else (1, 0)):
            fn, target = (base, other)[k]()
            got[k] = run_parallel(pool, fn, backend, target, jobs, batch)
        ratios.append(got[1] / got[0])
        rates.append(got[1])
    return statistics.median(ratios), statistics.median(rates)


def unique_row(
    pool: ProcessPoolExecutor, client: JobService, backend: str, batch: int, jobs: int, peak: float, rounds: int,
) -> dict[str, object]:
    """Enqueue with a unique key per job (each checked, none held), against
    plain enqueue in the same rounds (``vs_plain``, ``paired``); on MySQL
    also the floor its schema sets (``bench/unique_floor.py``)."""

    def on_queue(fn: Work) -> Maker:
        def make() -> tuple[Work, str]:
            queue = f"bench_{backend}_{batch}_u_{uuid.uuid4().hex[:6]}"
            client.create_queue(queue)
            return fn, queue
        return make

    vs_plain, rate = paired(pool, backend, jobs, batch, rounds, on_queue(pl_enqueue), on_queue(pl_enqueue_unique))
    print(f"{backend:6} {'unique':12} batch {batch:4}: {rate:9,.0f} jobs/s   a unique key each: "
          f"{vs_plain:5.2f} of plain enqueue (median of {rounds} paired rounds)", flush=True)
    row: dict[str, object] = {
        "backend": backend, "op": "enqueue unique", "batch": batch, "jobs": jobs, "jobs_per_s": round(rate),
        "ceiling_per_s": round(peak), "ratio": round(rate / peak, 2), "vs_plain": round(vs_plain, 2),
        "rounds": rounds}
    if backend == "mysql":
        for kind, (without, with_key) in (("floor", (unique_floor.floor_plain, unique_floor.floor_unique)),
                                          ("in_row", (unique_floor.in_row_plain, unique_floor.in_row_unique))):
            def raw(fn: Work, kind: str = kind) -> Maker:
                return lambda: (fn, unique_floor.prepare(kind))

            row[f"{kind}_vs_plain"] = round(paired(pool, backend, jobs, batch, rounds, raw(without),
                                                   raw(with_key))[0], 2)
        print(f"{'':6} {'':12} {'':10}  raw SQL: the store's statements {row['floor_vs_plain']:5.2f}, "
              f"a key in the job's row {row['in_row_vs_plain']:5.2f} (bench/unique_floor.py)", flush=True)
    return row


def fresh_stores() -> None:
    """Empties the Redis databases and drops the MySQL databases the
    benches' job services use: what earlier runs left (jobs, tables, the
    control store's batches) would skew the figures."""
    redis.Redis.from_url(REDIS_SHARD).flushdb()
    redis.Redis.from_url(REDIS_CONTROL).flushdb()
    conn = pymysql.connect(host="127.0.0.1", port=13306, user="pinlater", password="pinlater", autocommit=True)
    with conn.cursor() as cur:
        cur.execute("DROP DATABASE IF EXISTS pinlater_bench")
        cur.execute("DROP DATABASE IF EXISTS pinlater_bench_raw")
    conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="a few seconds, for CI")
    parser.add_argument("--backends", default="redis,mysql")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--rows", default="unique,drains",
                        help="which rows beside enqueue and dequeue+ack against their ceilings: "
                             "unique, drains (capped, keyed, key-limited), both, or none")
    args = parser.parse_args()
    extra = {r for r in args.rows.split(",") if r and r != "none"}
    if not extra <= {"unique", "drains"}:
        parser.error(f"--rows: unique, drains or none, not {args.rows!r}")
    scale = 0.1 if args.smoke else 1.0
    rounds = 1 if args.smoke else 3
    sizes = {1: int(10_000 * scale), 100: int(60_000 * scale)}

    fresh_stores()
    rows: list[dict[str, object]] = []
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(PROCESSES, mp_context=context) as pool:
        pool.submit(time.sleep, 0).result()  # start the workers before timing
        for backend in args.backends.split(","):
            with JobService.from_settings(settings_for(backend), source="bench-setup") as client:
                for batch, jobs in sizes.items():
                    queue = f"bench_{backend}_{batch}_{uuid.uuid4().hex[:6]}"
                    client.create_queue(queue)
                    raw_enq: Work
                    raw_drain: Work
                    if backend == "redis":
                        raw_target = f"raw:{uuid.uuid4().hex[:8]}"
                        raw_enq, raw_drain = raw_redis_enqueue, raw_redis_drain
                    else:
                        raw_target = prepare_raw_mysql()
                        raw_enq, raw_drain = raw_mysql_enqueue, raw_mysql_drain
                    for op, ours, ceiling in (("enqueue", pl_enqueue, raw_enq), ("dequeue+ack", pl_drain, raw_drain)):
                        rate = run_parallel(pool, ours, backend, queue, jobs, batch)
                        peak = run_parallel(pool, ceiling, backend, raw_target, jobs, batch)
                        rows.append({"backend": backend, "op": op, "batch": batch, "jobs": jobs,
                                     "jobs_per_s": round(rate), "ceiling_per_s": round(peak),
                                     "ratio": round(rate / peak, 2)})
                        print(f"{backend:6} {op:12} batch {batch:4}: {rate:9,.0f} jobs/s   "
                              f"ceiling {peak:9,.0f} jobs/s   ratio {rate / peak:5.2f}", flush=True)
                        if op == "enqueue" and "unique" in extra:
                            rows.append(unique_row(pool, client, backend, batch, jobs, peak, rounds))
                        if op == "dequeue+ack" and "drains" in extra:
                            keys = KEYS if not args.smoke else KEYS // 10
                            rows += drain_rows(pool, client, backend, batch, jobs, peak, rounds, keys)
    write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
