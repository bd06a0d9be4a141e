"""The operators' CLI, run as a real command against real Redis."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pinlater import Job
from pinlater.cli import read_secret
from pinlater.service import JobService
from pinlater.settings import Settings, hash_secret
from tests.servers import REDIS_CONTROL_DB, REDIS_PORTS, REDIS_SHARD_DB, redis_url

# Tens of seconds a test: started early, so no process is left with one at the end.
pytestmark = pytest.mark.slow


def cli_env(**settings: str) -> dict[str, str]:
    return {
        **os.environ,
        "PINLATER_SHARDS": ",".join(
            f"r{i + 1}={redis_url(port, REDIS_SHARD_DB)}" for i, port in enumerate(REDIS_PORTS)
        ),
        "PINLATER_CONTROL_URL": redis_url(REDIS_PORTS[0], REDIS_CONTROL_DB),
        **settings,
    }


def run_cli(*args: str, env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pinlater.cli", "--json", *args],
                          capture_output=True, text=True, env=env, input=stdin, timeout=60)


def pinlater(*args: str, ok: bool = True, stdin: str | None = None) -> Any:
    result = run_cli(*args, env=cli_env(PINLATER_ADMIN_SECRET="cli-secret"), stdin=stdin)
    if not ok:
        assert result.returncode == 2, result
        return result.stderr
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if result.stdout.strip() else None


def test_cli_covers_the_operator_workflow(servers: None, queue_name: str) -> None:
    pinlater("create-queue", queue_name, "--priorities", "2")
    assert queue_name in {q["queue"] for q in pinlater("queues")}
    descriptors = pinlater("enqueue", queue_name, "a", "b", "--attempts", "1")
    descriptors += pinlater("enqueue", queue_name, "--priority", "2", stdin="c\nspam-1\n")
    [keyed] = pinlater("enqueue", queue_name, "k", "--key", "tenant-7")
    assert pinlater("lookup", keyed)[0]["key"] == "tenant-7"
    assert "key" not in pinlater("lookup", descriptors[0])[0]
    assert "job key is 65 bytes" in pinlater("enqueue", queue_name, "x", "--key", "k" * 65, ok=False)
    pinlater("delete", queue_name, "pending", "--regex", "^k$")
    assert len(descriptors) == 4
    assert pinlater("count", queue_name, "pending")["count"] == 4
    assert pinlater("count", queue_name, "pending", "--regex", "^spam")["count"] == 1
    [job] = pinlater("lookup", descriptors[0], "--body")
    assert job["state"] == "PENDING" and job["body"] == "a"
    page = pinlater("scan", queue_name, "pending", "--limit", "3")
    assert len(page["jobs"]) == 3 and page["continuation"] != "-1"

    assert pinlater("pause", queue_name)["paused"] is True
    assert pinlater("resume", queue_name)["paused"] is False
    assert pinlater("set-rate", queue_name, "25")["max_dequeue_rate"] == 25
    assert pinlater("set-rate", queue_name, "unlimited")["max_dequeue_rate"] is None
    capped = pinlater("set-concurrency", queue_name, "3")
    assert (capped["max_running"], capped["running"]) == (3, 0)
    assert {q["queue"]: q["max_running"] for q in pinlater("queues")}[queue_name] == 3
    shown = pinlater("config", queue_name)
    assert (shown["max_running"], shown["running"]) == (3, 0)
    assert pinlater("set-concurrency", queue_name, "unlimited")["max_running"] is None
    assert pinlater("set-key-limits", queue_name, "--rate", "2.5")["key_rate"] == 2.5
    assert {q["queue"]: q["key_rate"] for q in pinlater("queues")}[queue_name] == "2.5/s"
    assert pinlater("set-key-limits", queue_name, "--rate", "unlimited")["key_rate"] is None
    both = pinlater("set-key-limits", queue_name, "--max-running", "2", "--rate", "5")
    assert (both["key_max_running"], both["key_rate"]) == (2, 5)
    assert {q["queue"]: q["key_max_running"] for q in pinlater("queues")}[queue_name] == 2
    assert pinlater("set-key-limits", queue_name, "--max-running", "unlimited")["key_max_running"] is None
    assert "give --rate, --max-running or both" in pinlater("set-key-limits", queue_name, ok=False)
    [held] = pinlater("enqueue", queue_name, "sync 42", "--unique", "account:42")
    assert pinlater("enqueue", queue_name, "sync 42 again", "--unique", "account:42") == [held]
    assert pinlater("set-unique-period", queue_name, "60000")["unique_succeeded_ms"] == 60000
    assert "unique_succeeded_ms must be from 0" in pinlater("set-unique-period", queue_name, "-1", ok=False)
    assert pinlater("delete", queue_name, "pending", "--regex", "^sync 42$")["deleted"] == 1
    made = pinlater("create-batch", queue_name, "all synced", "--description", "cli batch")
    assert (made["state"], made["total"], made["description"]) == ("open", 0, "cli batch")
    [member] = pinlater("enqueue", queue_name, "batch member", "--batch", made["batch"])
    assert pinlater("seal-batch", made["batch"])["state"] == "sealed"
    assert pinlater("batch", made["batch"])["pending"] == 1
    cancelled = pinlater("cancel-batch", made["batch"])
    assert sorted(cancelled["cancelled"]) == sorted([member, made["callback"]])
    assert pinlater("batch", made["batch"])["state"] == "cancelled"
    assert "batch must be a batch id" in pinlater("batch", "nope", ok=False)
    assert pinlater("delete", queue_name, "failed", "--regex", "^(batch member|all synced)$")["deleted"] == 2
    assert pinlater("delete", queue_name, "pending", "--regex", "spam")["deleted"] == 1

    stats = pinlater("monitor", "--once")
    assert stats["errors"] == []
    assert {s["shard"]: s["healthy"] for s in pinlater("shards")} == {"r1": True, "r2": True}
    assert pinlater("retry-failed", queue_name)["retried"] == 0
    cancelled = pinlater("cancel", queue_name, descriptors[1], f"{descriptors[1][:-1]}99999")
    assert cancelled["cancelled"] == [descriptors[1]] and cancelled["unknown"] == [f"{descriptors[1][:-1]}99999"]
    assert pinlater("lookup", descriptors[1])[0]["state"] == "FAILED"
    assert pinlater("cancel", queue_name, descriptors[1])["finished"] == [descriptors[1]]
    assert "malformed" in pinlater("cancel", queue_name, "nope", ok=False)

    assert "PASSWORD_INVALID" in pinlater("delete-queue", queue_name, "--secret", "nope", ok=False)
    assert "QUEUE_NAME_INVALID" in pinlater("count", "bad-name!", "pending", ok=False)
    assert "QUEUE_NOT_FOUND" in pinlater("count", "no_such_queue_x", "pending", ok=False)
    assert "PRIORITY_NOT_SUPPORTED" in pinlater("enqueue", queue_name, "x", "--priority", "7", ok=False)
    pinlater("delete-queue", queue_name)
    assert queue_name not in {q["queue"] for q in pinlater("queues")}


def test_delete_queue_reads_the_secret_from_a_file_or_stdin_never_shown(
        servers: None, queue_name: str, tmp_path: Path) -> None:
    """The secret stays out of argv (which every user sees in ps): a file,
    or standard input. The process checks it against the configured hash."""
    secret = "Adm1n-Cli-s3cret"
    env = cli_env(PINLATER_ADMIN_SECRET_SHA256=hash_secret(secret))
    env.pop("PINLATER_ADMIN_SECRET", None)
    secret_file = tmp_path / "admin-secret"
    secret_file.write_text(secret + "\n")
    (tmp_path / "wrong").write_text("not-it\n")
    (tmp_path / "blank").write_text("\n")
    names = [f"{queue_name}_{n}" for n in range(3)]
    with JobService.from_settings(Settings.from_env(env)) as service:
        for name in names:
            service.create_queue(name)
        done = run_cli("delete-queue", names[0], "--secret-file", str(tmp_path / "wrong"), env=env)
        assert (done.returncode, done.stderr.strip()) == (2, "error (PASSWORD_INVALID): wrong admin secret"), done
        for path, problem in ((tmp_path / "blank", "is empty"), (tmp_path / "missing", ": No such file or directory")):
            with pytest.raises(ValueError, match=problem):
                read_secret(str(path))
        assert set(names) <= service.queue_names()

        by_file = run_cli("delete-queue", names[0], "--secret-file", str(secret_file), env=env)
        by_stdin = run_cli("delete-queue", names[1], "--secret-file", "-", env=env, stdin=secret + "\n")
        for done, name in ((by_file, names[0]), (by_stdin, names[1])):
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout) == {"deleted": name} and done.stderr == ""
            assert secret not in done.stdout + done.stderr
        # --secret still works, saying what it costs.
        done = run_cli("delete-queue", names[2], "--secret", secret, env=env)
        assert done.returncode == 0 and "warning: --secret shows the admin secret" in done.stderr
        assert not set(names) & service.queue_names()


def test_restore_queues_lists_and_registers_again_queues_the_control_store_lost(
        servers: None, queue_name: str) -> None:
    env = cli_env()
    with JobService.from_settings(Settings.from_env(env)) as service:
        service.create_queue(queue_name, priorities=5)
        service.enqueue(queue_name, [Job(b"kept", priority=5)])
        service.core.control.delete_queue(queue_name)  # the control store's data lost
    listed = {q["queue"]: q for q in pinlater("restore-queues")}
    assert listed[queue_name] == {"queue": queue_name, "priorities": 5, "shards": "r1,r2"}
    assert "QUEUE_NOT_FOUND" in pinlater("count", queue_name, "pending", ok=False)
    assert "not both" in pinlater("restore-queues", queue_name, "--all", ok=False)
    assert "--paused is for restoring" in pinlater("restore-queues", "--paused", ok=False)
    assert "not unregistered" in pinlater("restore-queues", queue_name + "_none", ok=False)
    assert "works on the stores themselves" in run_cli("--server", "127.0.0.1:1", "restore-queues",
                                                       env=cli_env()).stderr
    assert pinlater("restore-queues", queue_name, "--paused") == [
        {"queue": queue_name, "priorities": 5, "paused": True}]
    assert queue_name not in {q["queue"] for q in pinlater("restore-queues")}
    assert pinlater("count", queue_name, "pending", "--priority", "5")["count"] == 1
    pinlater("delete-queue", queue_name)
