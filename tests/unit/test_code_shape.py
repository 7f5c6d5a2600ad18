"""The code's shape, read from the source with ``ast``: no import cycle among
the daemon's modules, and no class over 300 lines nor function over 60 in
daemon/ and client/, counted plainly: from the ``class`` or ``def`` line to
the last line, blank and comment lines included.

Every import counts, at any depth (inside a function, under
``TYPE_CHECKING``), relative ones resolved. Each checker is also run on a
made-up tree that breaks its rule, to show it can fail.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import wardd.client
import wardd.daemon
from tests.unit._imports import imports, module_name

DAEMON = Path(wardd.daemon.__file__).resolve().parent
CLIENT = Path(wardd.client.__file__).resolve().parent
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Each module under ``root`` and the modules of the same tree it imports.
    The root package itself is left out: it only re-exports, on first use
    (PEP 562), what the modules define; every sub-package counts."""
    files = {module_name(p, root, package): p for p in sorted(root.rglob("*.py"))}
    modules = set(files) - {package}
    return {
        m: {i for _line, i in imports(files[m], m) if i in modules and i != m}
        for m in sorted(modules)
    }


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: one per strongly connected set of
    modules larger than one (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            members = []
            while True:
                w = stack.pop()
                members.append(w)
                if w == v:
                    break
            if len(members) > 1:
                found.append(sorted(members))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def too_long(root: Path) -> list[str]:
    """Each class over ``MAX_CLASS_LINES`` and function over
    ``MAX_FUNCTION_LINES`` under ``root``, counted from its ``class`` or
    ``def`` line to its last (decorators not counted; blank and comment
    lines within it are)."""
    out = []
    for path in sorted(root.rglob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.ClassDef):
                limit = MAX_CLASS_LINES
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                limit = MAX_FUNCTION_LINES
            else:
                continue
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                out.append(f"{path.relative_to(root)}:{node.lineno}: {node.name} ({lines} lines)")
    return out


class TestNoImportCycle:
    def test_no_module_of_the_daemon_imports_itself_back(self) -> None:
        """No daemon module imports, through any chain, a module that imports it."""
        graph = import_graph(DAEMON, "wardd.daemon")
        assert "wardd.daemon.dispatch.router" in graph
        assert cycles(graph) == []

    def test_the_checker_finds_a_cycle_made_up_for_it(self, tmp_path: Path) -> None:
        """Three modules importing each other in a ring (one under
        TYPE_CHECKING, one inside a function) are one cycle."""
        pkg = tmp_path / "pkg"
        (pkg / "sub").mkdir(parents=True)
        (pkg / "__init__.py").write_text("")
        (pkg / "sub" / "__init__.py").write_text("")
        (pkg / "a.py").write_text("from .sub import b\n")
        (pkg / "sub" / "b.py").write_text(
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..c import C\n"
        )
        (pkg / "c.py").write_text("def f():\n    import pkg.a\n")
        (pkg / "d.py").write_text("from . import a\n")
        assert cycles(import_graph(pkg, "pkg")) == [["pkg.a", "pkg.c", "pkg.sub.b"]]


class TestSizeLimits:
    def test_no_class_over_300_lines_nor_function_over_60(self) -> None:
        """In daemon/ and client/: classes at most 300 lines, functions at most 60."""
        assert too_long(DAEMON) + too_long(CLIENT) == []

    def test_the_checker_counts_a_long_function_and_a_long_class(self, tmp_path: Path) -> None:
        """A 61-line function and a 301-line class are reported; 60 and 300
        are not. The blank and comment lines within them count."""
        body = "    x = 1\n"
        gap = "\n    # a comment\n"  # a blank line and a comment line, inside the body
        (tmp_path / "m.py").write_text(
            "def ok():\n"
            + body * 29
            + gap
            + body * 28
            + "def long():\n"
            + body * 29
            + gap
            + body * 29
            + "class Ok:\n"
            + body * 149
            + gap
            + body * 148
            + "class Long:\n"
            + body * 149
            + gap
            + body * 149
        )
        assert too_long(tmp_path) == ["m.py:61: long (61 lines)", "m.py:422: Long (301 lines)"]
