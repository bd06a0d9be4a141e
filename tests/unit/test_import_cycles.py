"""No two modules of the core package import each other, directly or
through others: a cycle makes their order of import matter and lets
neither be read nor tested alone.

Module-level imports count, including those under ``if TYPE_CHECKING``
(a cycle of annotations is still two modules that need each other); an
import inside a function does not."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["pinlater"]


def modules(package: str) -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            yield from module_level_imports(node.body)
            yield from module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from module_level_imports(block)


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the known modules it imports. ``from a import b`` is an
    import of ``a.b`` when that is a module, else of ``a``."""
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in module_level_imports(ast.parse(path.read_text(), str(path)).body):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names if alias.name in known)
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in known:
                    targets.add(f"{source}.{alias.name}")
                elif source in known:
                    targets.add(source)
        targets.discard(name)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as the modules along it (the first repeated at the end), or None."""
    done: set[str] = set()
    for start in sorted(graph):
        if start in done:
            continue
        path: list[str] = []
        on_path: set[str] = set()
        stack: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        path.append(start)
        on_path.add(start)
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif child in on_path:
                return [*path[path.index(child):], child]
            elif child not in done:
                stack.append((child, iter(sorted(graph[child]))))
                path.append(child)
                on_path.add(child)
    return None


def test_find_cycle_reports_the_modules_along_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_import_graph_sees_type_checking_and_relative_imports(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n"
    )
    (tmp_path / "pkg" / "b.py").write_text("from . import a\ndef f():\n    import pkg.c\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    known = {
        "pkg": tmp_path / "pkg" / "__init__.py",
        **{f"pkg.{m}": tmp_path / "pkg" / f"{m}.py" for m in "abc"},
    }
    assert import_graph(known) == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}, "pkg.c": {"pkg.a"}}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycles(package: str) -> None:
    known = modules(package)
    assert len(known) > 20
    cycle = find_cycle(import_graph(known))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])
