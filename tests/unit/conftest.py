"""Fixtures of the unit tests: one migrated store (its builders and the
released databases are in tests/unit/_store.py), and a directory short
enough for a Unix socket's path."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit._store import Store, migrated


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A new database file (``wardd.db`` in the test's tmp_path), migrated by
    the daemon's schema code, and a writer's connection to it, closed at the end."""
    path = tmp_path / "wardd.db"
    conn = migrated(path)
    try:
        yield Store(path, conn)
    finally:
        conn.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory whose socket paths fit in sun_path (pytest's tmp_path may not)."""
    with tempfile.TemporaryDirectory(prefix="wc-", dir="/tmp") as d:
        yield Path(d)
