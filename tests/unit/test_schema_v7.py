"""Schema 7 (smaller dispatch commits, again): the op counts are a snapshot
written rarely plus a catch-up over the ops written after it, not a table
kept by triggers in every commit; ``operations_state`` orders the states by
an op's life (``life``), so a claim and an outcome each rewrite one leaf of
it. Every earlier fixture migrates with its counts exact, and every read by
state still searches the index."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tests.unit._store import query_plan, released
from wardd.daemon.core import changes as ch
from wardd.daemon.store.apply import apply
from wardd.daemon.store.counters import Counters, count_afresh
from wardd.daemon.store.reads import Reads
from wardd.daemon.store.schema import OP_LIFE, SCHEMA_VERSION, SQLiteTooOld, migrate
from wardd.daemon.store.writer import Tx, connect
from wardd.protocol import OpState

VERSIONS = [1, 2, 3, 4, 5, 6]


def _migrated(tmp_path: Path, version: int) -> sqlite3.Connection:
    conn = connect(released(tmp_path, version))
    assert migrate(conn) == (version, SCHEMA_VERSION) and SCHEMA_VERSION == 7
    return conn


def _seeded(conn: sqlite3.Connection) -> dict[str, int]:
    c = Counters()
    c.seed(conn)
    return {s: n for s, n in c.figures.operations.items() if n}


def _afresh(conn: sqlite3.Connection) -> dict[str, int]:
    return {s: n for s, n in count_afresh(conn).operations.items() if n}


class TestMigration:
    @pytest.mark.parametrize("version", VERSIONS)
    def test_every_fixture_keeps_its_counts_exact(self, tmp_path, version):
        """The trigger-kept counts become the snapshot, as of the last record;
        the triggers and their table are gone; a start seeds what a fresh
        count finds."""
        conn = _migrated(tmp_path, version)
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
        assert not {n for n in names if n.startswith("op_counts") or n == "tombstones_count"}
        (seq,) = conn.execute("SELECT seq FROM counts").fetchone()
        assert seq == conn.execute("SELECT max(seq) FROM events").fetchone()[0]
        assert _seeded(conn) == _afresh(conn) and _afresh(conn)
        conn.close()

    @pytest.mark.parametrize("version", VERSIONS)
    def test_each_state_is_listed_through_the_index_in_life_order(self, tmp_path, version):
        """list_operations by state finds what a scan finds, searching
        operations_state by (neuron, life), never scanning the ops."""
        conn = _migrated(tmp_path, version)
        (neuron,) = conn.execute("SELECT neuron FROM neurons ORDER BY id LIMIT 1").fetchone()
        reads = Reads(conn, 1 << 20)
        for state in OP_LIFE:
            listed = reads.list_operations(neuron, state, None, None, 100)["operations"]
            want = [
                op
                for (op,) in conn.execute(
                    "SELECT op FROM operations NOT INDEXED WHERE state = ?"
                    " UNION ALL SELECT op FROM tombstones WHERE state = ?",
                    (state, state),
                )
            ]
            if state != "unknown":  # unknown lists the ops holding an unknown attempt
                assert sorted(o["op"] for o in listed) == sorted(want), state
        plan = query_plan(
            conn,
            "SELECT o.id FROM operations o WHERE o.neuron_id = ? AND o.id > ?"
            " AND o.life = ? AND o.state = ? ORDER BY o.id LIMIT 10",
            (1, 0, OP_LIFE["running"], "running"),
        )
        assert "USING INDEX operations_state (neuron_id=? AND life=? AND id>?)" in plan, plan
        conn.close()


class TestLife:
    def test_the_generated_column_orders_the_states_as_op_life_says(self, tmp_path):
        """``life`` (SQL) and OP_LIFE (Python) agree on every op state, and an
        op's life runs backwards: each state's successor sorts just below it."""
        conn = _migrated(tmp_path, 6)
        assert set(OP_LIFE) == {s.value for s in OpState}
        for state, rank in OP_LIFE.items():
            conn.execute("UPDATE operations SET state = ? WHERE op = 'done'", (state,))
            (life,) = conn.execute("SELECT life FROM operations WHERE op = 'done'").fetchone()
            assert life == rank, state
        path = ["pending", "prepared", "running", "retained", "consumed"]
        assert [OP_LIFE[s] for s in path] == sorted((OP_LIFE[s] for s in path), reverse=True)
        conn.close()


class TestCountedState:
    def test_the_first_write_after_the_snapshot_saves_the_state_it_counted(self, tmp_path):
        """An op written after the snapshot keeps, in counted_state, the state
        the snapshot counted it under, through every later write; a start
        moves it from there to its state now."""
        conn = _migrated(tmp_path, 6)
        (op_id,) = conn.execute("SELECT id FROM operations WHERE op = 'done'").fetchone()

        def move(was: OpState, to: OpState) -> None:
            changes = (ch.AppendEvent("moved", 1, op_id=op_id), ch.SetOp(op_id, {"state": to}))
            conn.execute("BEGIN IMMEDIATE")
            apply(Tx(conn), ch.Decision(changes))
            conn.execute("COMMIT")

        def counted() -> object:
            return conn.execute(
                "SELECT counted_state FROM operations WHERE id = ?", (op_id,)
            ).fetchone()[0]

        before = _seeded(conn)
        move(OpState.RETAINED, OpState.CONSUMED)
        assert counted() == "retained"
        move(OpState.CONSUMED, OpState.CANCELLED)
        assert counted() == "retained"
        after = _seeded(conn)
        assert after == _afresh(conn)
        assert after.get("retained", 0) == before["retained"] - 1
        assert after["cancelled"] == before.get("cancelled", 0) + 1
        conn.close()


def test_an_older_sqlite_refuses_the_migration_before_it_begins(tmp_path, monkeypatch):
    """On SQLite older than 3.31 migrate raises SQLiteTooOld and writes nothing."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    try:
        monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 30, 1))
        with pytest.raises(SQLiteTooOld, match="older than 3.31.0"):
            migrate(conn)
        assert conn.execute("PRAGMA user_version").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    finally:
        conn.close()
