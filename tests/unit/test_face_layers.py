"""The packages built on the core see only its public faces: the client's
face (the top-level modules), the kit the apps build on, observability
(the seam and spans the apps report through), the Thrift client, the
Thrift server's kit for an app's own service, and the operators' API. The
service's internals (``pinlater.engine``, the backends, the control
stores, the server) are free to move without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_layers import imported_modules

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = ("workers", "tasks", "dashboards", "bench", "scripts")
FACE = {
    f"pinlater.{name}" for name in (
        "client_api", "models", "errors", "retry", "queue_config", "descriptor", "states", "limits", "validation",
        "settings", "service", "operators", "demo", "cli", "cli_commands", "migrate", "records",
    )
} | {"pinlater", "pinlater.thrift", "pinlater.thrift.client", "pinlater.thrift.serving"}
PUBLIC_PACKAGES = ("pinlater.kit", "pinlater.observe")
# The app data is a MySQL client of its own, beside the job service's
# shards: it reads mysql:// URLs as the mysql store kind does, through the
# one module that kind publishes for it.
APP_DATA_MYSQL = {
    ("tasks/appdata/db.py", "pinlater.stores.mysql.public"),
    ("tasks/appdata/shardmap.py", "pinlater.stores.mysql.public"),
}
# Measure the server's framing and the store-call seam themselves, as no client could.
BENCHES_OF_INTERNALS = {
    ("bench/seam.py", "pinlater.engine.shards"),
    ("bench/echo_server.py", "pinlater.thrift.framing"),
    ("bench/echo_server.py", "pinlater.thrift.walk"),
    # The MySQL kind's own statements and job table, timed as raw SQL: the
    # floor of its schema, and of a fair queuing design on its job table.
    ("bench/unique_floor.py", "pinlater.stores.mysql.statements"),
    ("bench/fair_floor.py", "pinlater.stores.mysql.statements"),
}


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def allowed(path: str, module: str) -> bool:
    if module in FACE or _within(module, PUBLIC_PACKAGES):
        return True
    return (path, module) in BENCHES_OF_INTERNALS | APP_DATA_MYSQL


def internal_imports(root: Path, packages: tuple[str, ...]) -> set[str]:
    found: set[str] = set()
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = str(path.relative_to(root))
            for name in imported_modules(path):
                if name.split(".")[0] == "pinlater" and not allowed(rel, name):
                    found.add(f"{rel}: {name}")
    return found


def test_outside_packages_import_only_the_core_s_faces() -> None:
    assert internal_imports(ROOT, OUTSIDE) == set()


@pytest.mark.parametrize(
    ("line", "internal"),
    [
        ("from pinlater.engine.shards import ShardHealth", True),
        ("import pinlater.stores.redis.shard", True),
        ("from pinlater.thrift.server import serve", True),
        ("from pinlater.operators import Monitor", False),
        ("from pinlater.thrift.client import ThriftClient", False),
        ("from pinlater.kit.cli_output import one_line", False),
        ("from pinlater.stores.mysql.public import MySQLUrl", True),
        ("from pinlater import connect", False),
    ],
)
def test_the_check_sees_an_internal_import(tmp_path: Path, line: str, internal: bool) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "m.py").write_text(line + "\n")
    assert bool(internal_imports(tmp_path, ("app",))) is internal
