# mypy: disable-error-code="no-untyped-call"
# (Celery's remote control is untyped.)
"""A new app is its folder and one entry point: the tiny app's queue and task
appear in a worker, its table in ``pinlater-hbase tables``, its panel on the
dashboard and its command under ``pinlater app``, with no other file naming it (tests/apps/support.py installs it).
Real servers: Redis shards, HBase, Celery worker and dashboard processes."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from pinlater import Job
from pinlater.kit.apps import App
from pinlater.service import JobService
from pinlater.settings import Settings
from tests.apps.support import env_with_app, install
from tests.dashboards.http import call
from tests.servers import REPO, ensure_services
from tests.support.hbase import tables_pair, test_settings
from tests.support.stores import settings_for
from tests.support.tinyapp.app import APP, QUEUE
from tests.support.waits import wait_until
from tests.workers.harness import make_test_app, processes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install(tmp_path_factory.mktemp("site"))


def run(site: Path, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env_with_app(site, **env), cwd=REPO, capture_output=True, text=True,
                          timeout=180)


def test_the_entry_point_alone_installs_the_app(site: Path) -> None:
    script = "from pinlater.kit import apps; a, u = apps.installed(); print([x.name for x in a], u)"
    shown = run(site, [sys.executable, "-c", script]).stdout.strip()
    assert shown == "['backfill', 'feeds', 'tinyapp', 'typeahead'] []"
    # Without it, the project knows nothing of the app.
    alone = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert alone.stdout.strip() == "['backfill', 'feeds', 'typeahead'] []"
    assert isinstance(APP, App) and APP.queue_names == (QUEUE,)


def test_pinlater_app_lists_the_app_and_runs_its_command(site: Path) -> None:
    pinlater = str(Path(sys.executable).parent / "pinlater")
    listed = run(site, [pinlater, "app"])
    assert listed.returncode == 0, listed.stderr
    assert "tinyapp  queues: tinyapp_notes  tables  panel  command: pinlater app tinyapp" in listed.stdout.splitlines()
    ran = run(site, [pinlater, "app", "tinyapp", "queue"])
    assert (ran.returncode, ran.stdout) == (0, "tinyapp_notes  claim timeout 30000 ms  exponential retries 3\n")
    bad = run(site, [pinlater, "app", "tinyapp", "nope"])
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
    assert "invalid choice: 'nope'" in bad.stderr
    # Without the entry point there is no such app, said in one line.
    alone = subprocess.run([pinlater, "app", "tinyapp", "queue"], cwd=REPO, capture_output=True, text=True,
                           timeout=60)
    assert (alone.returncode, alone.stdout) == (2, "")
    assert alone.stderr == "error: no app 'tinyapp' is installed (installed: backfill, feeds, typeahead)\n"


def empty_redis() -> Settings:
    """This process's Redis shard and control store, emptied."""
    ensure_services(hbase=False)
    settings = settings_for("redis")
    for url in {s.url for s in settings.shards} | {str(settings.control_url)}:
        with redis.Redis.from_url(url) as r:
            r.flushdb()
    return settings


def test_a_worker_consumes_the_apps_queue_and_runs_its_task(site: Path, tmp_path: Path) -> None:
    settings = empty_redis()
    env = env_with_app(
        site,
        PINLATER_SHARDS=",".join(f"{s.id}={s.url}" for s in settings.shards),
        PINLATER_CONTROL_URL=str(settings.control_url),
        PINLATER_BUS_PREFIX=f"tiny{uuid.uuid4().hex[:6]}:",
        PINLATER_POLL_INTERVAL_S="0.5",
    )
    app = make_test_app(env)
    host = f"tiny@{socket.gethostname()}"
    with processes(env, tmp_path) as procs, JobService.from_settings(settings, source="tinyapp-test") as service:
        # No -Q and no PINLATER_CELERY_IMPORTS: the worker takes what the installed apps declare.
        procs.start("tiny", ["worker", "-n", "tiny@%h", "-c", "1", "--without-gossip", "--without-mingle",
                             "-l", "info"])
        queues = wait_until(lambda: (app.control.inspect(timeout=0.5, destination=[host]).active_queues() or {})
                            .get(host), 60, what=lambda: procs.log("tiny")[-2000:])
        assert QUEUE in {q["name"] for q in queues}
        registered = app.control.inspect(timeout=2, destination=[host]).registered() or {}
        assert "tinyapp.note" in registered[host]
        # A raw job enqueued by another client: the worker runs the queue's task on it.
        wait_until(lambda: QUEUE in service.queue_names(), 30, what="the worker creating the app's queue")
        config = service.queue_config(QUEUE, fresh=True)
        assert (config.retry, config.claim_timeout_ms) == (APP.queue(QUEUE).retry, APP.queue(QUEUE).claim_timeout_ms)
        service.enqueue(QUEUE, [Job(b"a note")])
        wait_until(lambda: service.count(QUEUE, "succeeded") == 1, 30,
                   what=lambda: procs.log("tiny")[-2000:])
    app.close()


@pytest.mark.xdist_group("hbase_tables_cli")
def test_pinlater_hbase_tables_lists_and_creates_the_apps_table(site: Path) -> None:
    ensure_services()
    prefix = f"t{uuid.uuid4().hex[:8]}"
    hbase = test_settings(table_prefix=prefix)
    env = {
        "PINLATER_HBASE_PRIMARY": str(hbase.primary), "PINLATER_HBASE_STANDBY": str(hbase.standby),
        "PINLATER_HBASE_PRIMARY_THRIFT2": str(hbase.primary_thrift2),
        "PINLATER_HBASE_STANDBY_THRIFT2": str(hbase.standby_thrift2),
        "PINLATER_HBASE_TABLE_PREFIX": prefix,
    }
    command = [str(Path(sys.executable).with_name("pinlater-hbase")), "tables"]
    with tables_pair(prefix):  # the other apps' tables made, and every table dropped at the end
        shown = run(site, command, **env)
        assert shown.returncode == 3, shown.stderr
        lines = shown.stdout.splitlines()
        assert "drift: primary tinyapp_notes: table missing" in lines
        assert "drift: standby tinyapp_notes: table missing" in lines
        assert "ok: primary following_feed" in lines  # and the other apps' tables beside it
        applied = run(site, [*command, "--apply"], **env)
        assert applied.returncode == 0, applied.stdout + applied.stderr
        again = run(site, command, **env)
        assert again.returncode == 0 and "ok: standby tinyapp_notes" in again.stdout.splitlines()


@pytest.fixture
def dashboard(site: Path) -> Iterator[str]:
    settings = empty_redis()
    env = env_with_app(site, PINLATER_SHARDS=",".join(f"{s.id}={s.url}" for s in settings.shards),
                       PINLATER_CONTROL_URL=str(settings.control_url))
    with subprocess.Popen([sys.executable, "-m", "pinlater.cli", "dashboard", "--host", "127.0.0.1", "--port", "0"],
                          env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert " on http://127.0.0.1:" in line, line
            yield line.split(" on ", 1)[1].split("/ ", 1)[0]
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()


def test_the_dashboard_shows_the_apps_panel(dashboard: str) -> None:
    status, config = call(dashboard + "/api/config")
    assert status == 200 and config["unavailable_panels"] == []
    page = call(dashboard + "/")[1]
    assert 'id="tinyapp-panel"' in page and "/static/panels/tinyapp/tinyapp.js" in page
    deadline = time.monotonic() + 20
    while (answer := call(dashboard + "/api/tinyapp"))[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.2)  # answered once the first snapshot is taken
    assert answer == (200, {"queue": QUEUE, "exists": False})
