"""In-process tests of the store (daemon/store/) on real SQLite files."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.unit._store import Store
from wardd.daemon.store.boots import mark_clean_stop, record_boot
from wardd.daemon.store.reads import Reads
from wardd.daemon.store.writer import Tx, connect, connect_reader

MAX_FRAME = 1 << 20
WRITES = [
    "INSERT INTO boots(boot_id, started_at, pid, version) VALUES ('b', 't', 1, 'v')",
    "UPDATE prune_stats SET pruned_ops = 5",
    "DELETE FROM prune_stats",
    "CREATE TABLE extra(a)",
    "DROP TABLE boots",
]


def contents(conn: sqlite3.Connection) -> tuple[object, ...]:
    return (
        conn.execute("SELECT count(*) FROM boots").fetchone()[0],
        conn.execute("SELECT pruned_ops FROM prune_stats").fetchall(),
        conn.execute("SELECT name FROM sqlite_master ORDER BY name").fetchall(),
    )


class TestReadersAreReadOnly:
    @pytest.mark.parametrize("opener", [connect_reader, connect], ids=["reader", "plain"])
    @pytest.mark.parametrize("sql", WRITES)
    def test_a_write_through_the_readers_connection_is_refused_and_changes_nothing(
        self, store: Store, opener: Callable[..., object], sql: str
    ) -> None:
        """Whatever connection `Reads` is given, SQLite refuses a write through it."""
        path, wconn = store.path, store.conn
        before = contents(wconn)
        reads = Reads(opener(path), MAX_FRAME)  # type: ignore[arg-type]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            reads.conn.execute(sql)
        with pytest.raises(sqlite3.OperationalError, match="readonly"), reads.snapshot() as conn:
            conn.execute(sql)
        assert contents(wconn) == before

    def test_a_read_snapshot_sees_one_committed_state_on_the_read_only_connection(
        self, store: Store
    ) -> None:
        """`Reads.snapshot()` still holds one state: a commit made meanwhile shows after it."""
        path, wconn = store.path, store.conn
        reads = Reads(connect_reader(path), MAX_FRAME)
        with reads.snapshot():
            assert reads.metrics_figures()[2] == 0
            wconn.execute("UPDATE prune_stats SET pruned_ops = 7")
            assert reads.metrics_figures()[2] == 0
        assert reads.metrics_figures()[2] == 7

    def test_a_reader_connection_can_still_checkpoint_the_wal(self, store: Store) -> None:
        """The pruner's checkpoint connection is read-only and still truncates the WAL."""
        path, wconn = store.path, store.conn
        wconn.execute("UPDATE prune_stats SET pruned_ops = 1")
        assert Path(f"{path}-wal").stat().st_size > 0
        reader = connect_reader(path)
        busy, _, _ = reader.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        assert busy == 0
        assert Path(f"{path}-wal").stat().st_size == 0


class TestBoots:
    def test_each_start_sees_the_previous_one_and_whether_it_stopped_cleanly(
        self, store: Store
    ) -> None:
        """`record_boot` answers the previous start (None for the first), clean only once
        `mark_clean_stop` ran for it."""
        wconn = store.conn

        def start(boot: str) -> object:
            return record_boot(wconn, boot=boot, started_at="t", pid=1, version="v")

        assert start("b1") is None
        assert start("b2") == {"boot": "b1", "clean": False}  # b1 never stopped cleanly
        mark_clean_stop("b2", "2026-01-01T00:00:00Z")(Tx(wconn))
        assert start("b3") == {"boot": "b2", "clean": True}
        rows = wconn.execute("SELECT boot_id, stopped_at, clean FROM boots ORDER BY id").fetchall()
        assert rows == [
            ("b1", None, 0),
            ("b2", "2026-01-01T00:00:00Z", 1),
            ("b3", None, 0),
        ]
