"""Each test Redis db number (``tests.servers.redis_db``) belongs to one
module: modules flush their dbs, and two modules sharing a number break each
other whenever one process runs both (a plain ``pytest tests`` does)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def db_numbers() -> dict[int, set[str]]:
    users: dict[int, set[str]] = defaultdict(set)
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "redis_db"
                    and node.args and isinstance(node.args[0], ast.Constant)
                    and isinstance(node.args[0].value, int)):
                users[node.args[0].value].add(str(path.relative_to(TESTS)))
    return users


def test_each_db_number_is_one_modules() -> None:
    users = db_numbers()
    assert len(users) >= 8  # the scan finds the suite's numbers
    shared = {n: sorted(files) for n, files in users.items() if len(files) > 1}
    assert not shared, f"Redis db numbers used by more than one module: {shared}"


def test_every_call_names_a_literal_number() -> None:
    """A computed number would escape the check above."""
    computed = []
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "redis_db"
                    and not (node.args and isinstance(node.args[0], ast.Constant)
                             and isinstance(node.args[0].value, int))):
                computed.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert not computed, f"redis_db called without a literal number: {computed}"
