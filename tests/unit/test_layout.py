"""The repository's layout rules: the test suite's, and where the daemon's SQL lives."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
DAEMON = TESTS.parent / "daemon"
IMPORT_OF_A_TEST_MODULE = re.compile(r"^\s*(from|import)\s+tests\.\w+\.test_\w+", re.M)


def test_tests_import_helpers_from_the_harness_never_from_another_test_module() -> None:
    """Shared helpers live in tests/daemon/harness.py (or a _private module);
    a test module never imports another test module."""
    offenders = [
        str(path.relative_to(TESTS))
        for path in sorted(TESTS.rglob("*.py"))
        if IMPORT_OF_A_TEST_MODULE.search(path.read_text())
    ]
    assert offenders == []


# -- all SQL in daemon/store/ ----------------------------------------------------------

SQL_METHODS = frozenset({"execute", "executemany", "executescript"})
# Statement openings as they appear in a string literal (upper case, as our
# SQL is written; the verb-object pairs in any case).
SQL_TEXT = re.compile(
    r"\b(SELECT|PRAGMA|SAVEPOINT|ROLLBACK|COMMIT|BEGIN\s+(IMMEDIATE|EXCLUSIVE|DEFERRED))\b"
    r"|(?i:\bINSERT\s+(OR\s+\w+\s+)?INTO\s|\bREPLACE\s+INTO\s|\bDELETE\s+FROM\s"
    r"|\bUPDATE\s+\w+\s+SET\s|\b(CREATE|DROP)\s+(TEMP\s+)?(TABLE|INDEX|TRIGGER|VIEW)\s"
    r"|\bALTER\s+TABLE\s|\bSELECT\s+[\w*,.\s()]+\s+FROM\s+\w+)"
)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (prose may name a statement)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def sql_in(source: str) -> list[str]:
    """Where ``source`` uses SQL: a connection's execute methods (called or
    not) and string literals (f-string parts included) that hold a statement."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in SQL_METHODS:
            found.append(f"{node.lineno}: .{node.attr}")
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docs
            and SQL_TEXT.search(node.value)
        ):
            found.append(f"{node.lineno}: {node.value.strip()[:60]!r}")
    return found


def daemon_modules() -> list[Path]:
    return sorted(p for p in DAEMON.rglob("*.py") if "store" not in p.relative_to(DAEMON).parts)


class TestSqlOnlyInTheStore:
    def test_no_daemon_module_outside_the_store_holds_sql(self) -> None:
        """Outside daemon/store/ no daemon module (the core, the units, the
        app, recovery included) runs or spells an SQL statement."""
        offenders = {
            str(path.relative_to(DAEMON)): hits
            for path in daemon_modules()
            if (hits := sql_in(path.read_text()))
        }
        assert offenders == {}

    def test_the_store_holds_sql(self) -> None:
        """The scan finds the store's own statements (it is not blind)."""
        assert sql_in((DAEMON / "store" / "boots.py").read_text())
        assert sql_in((DAEMON / "store" / "reads.py").read_text())
        assert sql_in((DAEMON / "store" / "load.py").read_text())
        assert sql_in((DAEMON / "store" / "apply.py").read_text())

    @pytest.mark.parametrize(
        "source",
        [
            'conn.execute("SELECT 1")',
            "rows = self.reads.conn.execute(q, params)",
            "run = conn.executemany",
            "conn.executescript(SCRIPT)",
            'Q = "SELECT boot_id, clean FROM boots ORDER BY id DESC LIMIT 1"',
            'Q = ("INSERT INTO boots(boot_id, started_at)" " VALUES (?, ?)")',
            'q = f"DELETE FROM outcomes WHERE attempt_id IN ({ids})"',
            'Q = "update boots set clean = 1 where boot_id = ?"',
            'Q = "select 1 from neurons where neuron = ?"',
            'Q = "PRAGMA query_only = ON"',
            'Q = "create table t(a)"',
            'def f():\n    """Doc."""\n    return "BEGIN IMMEDIATE"',
        ],
    )
    def test_the_scan_finds_sql_in_code(self, source: str) -> None:
        """Each way of writing a statement or running one is found."""
        assert sql_in(source) != []

    @pytest.mark.parametrize(
        "source",
        [
            'def f():\n    """Runs SELECT 1 FROM neurons, then COMMIT."""',
            'raise UnknownNeuron("neuron is not registered")',
            'log.info("selected", reason="select a worker")',
            "async def _execute(self): return await self._dispatch()",
            'msg = "the update of the grant was refused; delete the file"',
        ],
    )
    def test_the_scan_leaves_prose_and_other_names_alone(self, source: str) -> None:
        """Docstrings, messages and names that merely contain a word are not SQL."""
        assert sql_in(source) == []
