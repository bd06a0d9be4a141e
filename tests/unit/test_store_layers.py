"""A store kind is one folder: ``pinlater/stores/<kind>/``. Outside
``pinlater`` nothing imports the stores (the records the dashboard keeps go
through ``pinlater.records``), outside its folder nothing names a kind's
modules, and MySQL is named outside its folder only in docs and in the
settings' examples."""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORES = ROOT / "pinlater" / "stores"
KIND_FOLDERS = sorted(path for path in STORES.iterdir() if (path / "__init__.py").exists())
# What a package outside pinlater may import of the stores, and why.
OUTSIDE_IMPORTS = {
    # The app-data shard map reads its URLs with the MySQL kind's parser.
    ("tasks", "pinlater.stores.mysql.public"),
    # bench/unique_floor.py times the MySQL kind's own statements as raw SQL.
    ("bench", "pinlater.stores.mysql.statements"),
}
# Lines outside the MySQL kind's folder that name MySQL in code rather than in
# a comment or docstring: the settings' examples and help texts.
MYSQL_EXAMPLES = {
    ("pinlater/settings.py", '"the shards, ID=URL,... (redis://, rediss://, mysql:// or memory://)'),
    ("pinlater/settings.py", '"merge ACKs of different callers too (costs CPU on MySQL)"'),
    ("pinlater/demo.py", '"d1=mysql://pinlater:pinlater@127.0.0.1:13306/pinlater_demo_d1"'),
}


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_the_kinds_are_folders() -> None:
    assert {path.name for path in KIND_FOLDERS} >= {"redis", "mysql", "memory"}


@pytest.mark.parametrize("package", ["dashboards", "workers", "tasks", "bench"])
def test_only_pinlater_imports_the_stores(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    found = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in files
        for name in imported_modules(path)
        if name.startswith("pinlater.stores") and (package, name) not in OUTSIDE_IMPORTS
    }
    assert found == set()


def kind_modules_named(path: Path) -> set[str]:
    """The kind modules ``path`` imports or names in a dotted string."""
    text = path.read_text("utf-8")
    prefixes = [f"pinlater.stores.{folder.name}" for folder in KIND_FOLDERS]
    named = {name for name in imported_modules(path) if name.startswith(tuple(prefixes))}
    named.update(prefix for prefix in prefixes if f'"{prefix}' in text)
    return named


def test_nothing_outside_a_kind_folder_names_a_kind_module() -> None:
    outside = [
        path for top in ("pinlater", "dashboards", "workers") for path in sorted((ROOT / top).rglob("*.py"))
        if not any(folder in path.parents for folder in KIND_FOLDERS)
    ]
    assert len(outside) > 50
    found = {f"{path.relative_to(ROOT)}: {sorted(names)}" for path in outside if (names := kind_modules_named(path))}
    assert found == set()


def test_the_check_sees_a_kind_module_named(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('from pinlater.stores import kinds\nLUA = ("pinlater.stores.redis", "x")\n')
    assert kind_modules_named(module) == {"pinlater.stores.redis"}
    module.write_text("from pinlater.stores.mysql.pool import Session\n")
    assert kind_modules_named(module) == {"pinlater.stores.mysql.pool"}


def _docstring_lines(source: str) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(
                first.value.value, str
            ):
                lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return lines


def mysql_in_code(path: Path, root: Path = ROOT) -> list[tuple[str, str]]:
    """(file, line) of each line of ``path`` naming MySQL other than in a
    comment, a docstring or a Markdown page."""
    if path.suffix == ".md":
        return []
    source = path.read_text("utf-8")
    if path.suffix != ".py":
        return [(str(path.relative_to(root)), line.strip()) for line in source.splitlines() if "mysql" in line.lower()]
    docstrings = _docstring_lines(source)
    lines = source.splitlines()
    found: list[tuple[str, str]] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if "mysql" not in token.string.lower() or token.type == tokenize.COMMENT:
            continue
        if token.type == tokenize.STRING and token.start[0] in docstrings:
            continue
        found.append((str(path.relative_to(root)), lines[token.start[0] - 1].strip()))
    return found


def test_mysql_is_named_outside_its_folder_only_in_docs_and_setting_examples() -> None:
    """``grep -rni mysql pinlater dashboards workers`` outside
    pinlater/stores/mysql/, less comments, docstrings and Markdown."""
    mysql_folder = STORES / "mysql"
    found = [
        hit
        for top in ("pinlater", "dashboards", "workers")
        for path in sorted((ROOT / top).rglob("*"))
        if path.is_file() and mysql_folder not in path.parents and "__pycache__" not in path.parts
        and path.suffix not in {".pyc", ".pem", ".key"}
        for hit in mysql_in_code(path)
    ]
    unexpected = [
        (file, line) for file, line in found
        if not any(file == where and line.startswith(start) for where, start in MYSQL_EXAMPLES)
    ]
    assert unexpected == []
    assert len(found) == len(MYSQL_EXAMPLES)  # every example is still there: the allowlist stays small


def test_the_mysql_check_tells_code_from_docs(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text('"""Docs may say MySQL."""\n# so may comments: MySQL\nKIND = "mysql"\n')
    assert mysql_in_code(module, tmp_path) == [("m.py", 'KIND = "mysql"')]
