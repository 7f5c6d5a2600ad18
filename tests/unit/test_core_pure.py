"""The pure core stays pure: wardd.daemon.core imports no I/O, thread, clock or store module.

Read from the source with ``ast`` (every ``import`` and ``from ... import``,
at any depth, relative ones resolved), so an import inside a function or
under ``TYPE_CHECKING`` counts too. The checker is run on a copy with a bad
import added, to show it can fail.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import wardd.daemon.core
from tests.unit._imports import imports, module_name

PACKAGE = "wardd.daemon.core"
CORE = Path(wardd.daemon.core.__file__).resolve().parent

#: modules that do I/O, keep time, draw randomness or run threads
FORBIDDEN = frozenset(
    {
        "sqlite3",
        "trio",
        "threading",
        "socket",
        "os",
        "subprocess",
        "io",
        "pathlib",
        "time",
        "datetime",
        "random",
        "asyncio",
        "importlib",
        "builtins",
        "secrets",
        "shutil",
        "tempfile",
        "logging",
        "structlog",
        "signal",
        "sys",
    }
)
#: what the core may import (by top-level name): attrs and pure helpers of
#: the standard library; of ours, its own package and the protocol's
#: vocabulary. Anything else is refused until it is added here on purpose.
ALLOWED = frozenset(
    {
        "__future__",
        "attrs",
        "hashlib",
        "enum",
        "typing",
        "collections",
        "functools",
        "itertools",
        "operator",
        "math",
        "re",
        "types",
    }
)
ALLOWED_WARDD = ("wardd.protocol", PACKAGE)


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, a module of ``PACKAGE``."""
    return imports(path, module_name(path, root, PACKAGE))


def _allowed(module: str) -> bool:
    """Allowed by the top-level name (``from typing import Any`` gives
    ``typing.Any``: a name, not a module) or, for ours, by package prefix."""
    top = module.split(".")[0]
    if top in FORBIDDEN:
        return False
    if top in ALLOWED:
        return True
    return any(module == w or module.startswith(w + ".") for w in ALLOWED_WARDD)


def violations(root: Path) -> list[str]:
    """Every import of a module under ``root`` that the core may not make."""
    return [
        f"{path.relative_to(root)}:{line}: {module}"
        for path in sorted(root.rglob("*.py"))
        for line, module in _imports(path, root)
        if not _allowed(module)
    ]


def test_the_core_imports_no_io_clock_thread_or_store_module():
    """No module of the core imports sqlite3, trio, threading, the OS, a clock or the store."""
    modules = sorted(p.name for p in CORE.glob("*.py"))
    assert {"attempts.py", "ops.py", "states.py", "records.py"} <= set(modules)
    assert violations(CORE) == []


BAD_IMPORTS = [
    ("import-os", "import os"),
    ("import-os-path", "import os.path"),
    ("from-sqlite3", "from sqlite3 import connect"),
    ("import-trio-as", "import trio as t"),
    ("from-threading", "from threading import Lock"),
    ("from-time", "from time import monotonic"),
    ("import-datetime", "import datetime"),
    ("import-random", "import random"),
    ("import-subprocess", "import subprocess"),
    ("from-io", "from io import BytesIO"),
    ("from-pathlib", "from pathlib import Path"),
    ("import-socket", "import socket"),
    ("relative-store", "from ..store import load"),
    ("relative-store-module", "from .. import store"),
    ("absolute-store", "from wardd.daemon.store import apply"),
    ("daemon-writer", "from wardd.daemon import _writer"),
    ("daemon-app", "import wardd.daemon.life.app"),
    ("client", "from wardd.client import Session"),
    ("in-function", "def f():\n    import sqlite3\n    return sqlite3"),
    (
        "type-checking",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import trio",
    ),
    ("dunder-import", "X = __import__('os')"),
    ("not-listed", "import shelve"),
    ("not-listed-from", "from wardd import daemon"),
]


@pytest.mark.parametrize("line", [b[1] for b in BAD_IMPORTS], ids=[b[0] for b in BAD_IMPORTS])
def test_the_purity_check_catches_a_bad_import(tmp_path, line):
    """The checker reports a forbidden import added to a copy of the core, in any import form."""
    copy = tmp_path / "core"
    shutil.copytree(CORE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert violations(copy) == []
    target = copy / "states.py"
    target.write_text(target.read_text() + "\n" + line + "\n")
    found = violations(copy)
    assert len(found) >= 1 and all(v.startswith("states.py:") for v in found), found
