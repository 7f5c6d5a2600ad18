"""In-process tests of the pruning units and the pruner (daemon/store/prune.py)
on real SQLite files: batches bounded by time, not by a count; a look walks
the prunable ops once (no batch goes back below the cursor); the pages a
batch frees go back to the file system in the same unit.

No assertion here is about speed (the bench shows that): a budget of 0
means "one chunk, then stop", a budget of an hour means "never stop for time".
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from tests.unit._store import Store, ended_op, neuron_and_prog
from wardd.daemon.core.ops import args_digest
from wardd.daemon.store import prune
from wardd.daemon.store.prune import (
    PACES,
    BatchResult,
    Cursor,
    Load,
    Pruner,
    load_of,
    pause_s,
    prune_batch,
)
from wardd.daemon.store.writer import Tx, Unit, Writer, connect

BEFORE = "2030-01-01T00:00:00.000Z"  # every op below ended before this
HOUR = 3600.0
# the op ids a pruning statement names
OP_IDS = re.compile(r"(?:o\.id|op_id|operations WHERE id) IN \(([\d,]+)\)")


@pytest.fixture
def db(store: Store) -> sqlite3.Connection:
    """The migrated store (auto_vacuum = INCREMENTAL) with one neuron and prog."""
    store.write(*neuron_and_prog())
    return store.conn


def run(conn: sqlite3.Connection, unit: Unit) -> BatchResult:
    conn.execute("BEGIN IMMEDIATE")
    res: BatchResult = unit(Tx(conn))
    conn.execute("COMMIT")
    return res


def tombstoned(conn: sqlite3.Connection) -> list[int]:
    return [i for (i,) in conn.execute("SELECT id FROM tombstones ORDER BY id")]


def free_pages(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA freelist_count").fetchone()[0])


class TestPace:
    """The writer's load after a batch -> how the next one runs (pure)."""

    @pytest.mark.parametrize(
        "others,queued,load",
        [
            (0, 0, Load.IDLE),
            (1, 0, Load.LIGHT),
            (40, 0, Load.LIGHT),
            (0, 1, Load.LIGHT),
            (1, 1, Load.LIGHT),
            (0, 2, Load.BUSY),
            (40, 9, Load.BUSY),
        ],
    )
    def test_the_load_is_read_from_the_others_units_and_the_queue(self, others, queued, load):
        assert load_of(others, queued) is load

    def test_an_idle_writer_gets_long_batches_back_to_back(self):
        p = PACES[Load.IDLE]
        assert (p.budget_s, p.yield_after_s) == (prune.IDLE_BUDGET_S, 0.0)
        assert pause_s(p, wall_s=0.05, work_s=0.008) == 0.0

    def test_a_light_load_pauses_as_long_as_the_batch_worked(self):
        p = PACES[Load.LIGHT]
        assert p.budget_s == prune.IDLE_BUDGET_S and p.yield_after_s > 0
        assert pause_s(p, wall_s=0.05, work_s=0.008) == 0.008
        assert pause_s(p, wall_s=0.05, work_s=0.0001) == prune.PAUSE_S

    def test_a_busy_writer_gets_short_batches_and_pauses_twice_their_wall_time(self):
        p = PACES[Load.BUSY]
        assert (p.budget_s, p.yield_after_s, p.chunk_ops) == (
            prune.BUSY_BUDGET_S,
            0.0,
            prune.CHUNK_OPS,
        )
        assert pause_s(p, wall_s=0.01, work_s=0.002) == prune.BUSY_FACTOR * 0.01
        assert pause_s(p, wall_s=0.0001, work_s=0.0001) == prune.PAUSE_S

    def test_every_load_has_a_pace_and_no_batch_is_bounded_by_a_count(self):
        assert set(PACES) == set(Load)
        assert all(p.budget_s <= 0.01 for p in PACES.values())  # a few ms at most


class TestBatches:
    def test_a_batch_stops_at_its_time_bound_and_the_next_resumes_after_it(self, db):
        """Budget 0: each batch prunes one chunk and says where it stopped;
        the next, given that cursor, prunes the next chunk; together they
        prune every op once, oldest first."""
        n = 3 * prune.CHUNK_OPS + 3
        ids = [ended_op(db, f"o{i}", ended=f"2020-01-01T00:00:{i:02d}.000Z") for i in range(n)]
        cursor = None
        seen: list[list[int]] = []
        while True:
            before = set(tombstoned(db))
            res = run(db, prune_batch(BEFORE, after=cursor, budget_s=0.0))
            if res.examined == 0:
                break
            seen.append(sorted(set(tombstoned(db)) - before))
            assert res.pruned == res.examined == len(seen[-1]) <= prune.CHUNK_OPS
            assert res.cursor == Cursor(
                f"2020-01-01T00:00:{ids.index(seen[-1][-1]):02d}.000Z", seen[-1][-1]
            )
            cursor = res.cursor
        assert [len(s) for s in seen] == [prune.CHUNK_OPS] * 3 + [3]
        assert [i for s in seen for i in s] == ids
        assert db.execute("SELECT pruned_ops FROM prune_stats").fetchone() == (n,)

    def test_without_a_time_bound_one_batch_prunes_every_op_not_a_count_of_them(self, db):
        n = 10 * prune.CHUNK_OPS + 1  # more than the old count of 64
        ids = [ended_op(db, f"o{i}") for i in range(n)]
        res = run(db, prune_batch(BEFORE, budget_s=HOUR))
        assert (res.pruned, res.examined, res.cursor.id if res.cursor else None) == (
            n,
            n,
            ids[-1],
        )
        assert tombstoned(db) == ids
        assert db.execute("SELECT count(*) FROM operations").fetchone() == (0,)

    def test_a_batch_stops_after_a_chunk_once_another_unit_waits(self, db):
        for i in range(3 * prune.CHUNK_OPS):
            ended_op(db, f"o{i}")
        res = run(db, prune_batch(BEFORE, budget_s=HOUR, yield_to=lambda: True))
        assert res.pruned == prune.CHUNK_OPS

    def test_a_batch_yields_only_once_it_has_worked_its_yield_after(self, db):
        """Under a light load a batch does not stop for a queued unit before
        ``yield_after_s``: here an hour, so it runs to its end."""
        for i in range(3 * prune.CHUNK_OPS):
            ended_op(db, f"o{i}")
        res = run(
            db,
            prune_batch(BEFORE, budget_s=HOUR, yield_to=lambda: True, yield_after_s=HOUR),
        )
        assert res.pruned == 3 * prune.CHUNK_OPS

    def test_the_chunk_size_is_the_batchs_own(self, db):
        for i in range(3 * prune.CHUNK_OPS):
            ended_op(db, f"o{i}")
        res = run(db, prune_batch(BEFORE, budget_s=0.0, chunk_ops=2 * prune.CHUNK_OPS))
        assert res.pruned == 2 * prune.CHUNK_OPS

    def test_the_next_batch_never_goes_back_below_the_cursor(self, db):
        """An op that became prunable below the cursor during a look is left
        to the next look (a fresh walk from the start), and the statements of
        the second batch name no op id below the cursor."""
        early = ended_op(db, "early", state="cancelled", attempt="unknown")
        assert db.execute("SELECT ended_at FROM operations WHERE id = ?", (early,)).fetchone() == (
            None,
        )
        late = [ended_op(db, f"o{i}", ended=f"2021-01-01T00:00:{i:02d}.000Z") for i in range(20)]
        first = run(db, prune_batch(BEFORE, budget_s=0.0))
        assert first.cursor == Cursor("2021-01-01T00:00:07.000Z", late[prune.CHUNK_OPS - 1])
        # the unknown attempt is resolved: the op ends, dated before the cursor
        db.execute("UPDATE attempts SET state = 'failed' WHERE op_id = ?", (early,))
        db.execute("UPDATE operations SET last_seq = last_seq WHERE id = ?", (early,))
        assert db.execute("SELECT ended_at FROM operations WHERE id = ?", (early,)).fetchone() == (
            "2020-01-01T00:00:00.000Z",
        )
        statements: list[str] = []
        db.set_trace_callback(statements.append)
        second = run(db, prune_batch(BEFORE, after=first.cursor, budget_s=HOUR))
        db.set_trace_callback(None)
        assert second.pruned == 20 - prune.CHUNK_OPS and early not in tombstoned(db)
        named = {
            int(i) for s in statements for group in OP_IDS.findall(s) for i in group.split(",")
        }
        assert named and min(named) > first.cursor.id > early
        # a new look starts from the beginning
        third = run(db, prune_batch(BEFORE, budget_s=HOUR))
        assert third.pruned == 1 and early in tombstoned(db)

    def test_an_op_that_has_not_ended_is_never_pruned_and_a_stale_date_is_cleared(self, db):
        """Whatever ended_at says, an op still pending, or with an attempt in
        doubt, keeps its records; a tombstone keeps the args' digest."""
        done = ended_op(db, "done", args=b"pay 10")
        stale = ended_op(db, "stale", state="pending", attempt=None)
        db.execute("UPDATE operations SET ended_at = '2020-01-01' WHERE id = ?", (stale,))
        running = ended_op(db, "running", state="cancelled", attempt="running")
        res = run(db, prune_batch(BEFORE, budget_s=HOUR))
        assert (res.pruned, res.examined) == (1, 2)  # the running one was never a candidate
        assert tombstoned(db) == [done]
        row = db.execute("SELECT args_digest, state FROM tombstones").fetchone()
        assert row == (args_digest(b"pay 10"), "consumed")
        left = db.execute("SELECT id, ended_at FROM operations ORDER BY id").fetchall()
        assert left == [(stale, None), (running, None)]


class TestSpaceBack:
    def test_a_batch_gives_back_the_pages_it_freed_in_the_same_unit(self, db):
        for i in range(2 * prune.CHUNK_OPS):
            ended_op(db, f"big{i}", args=bytes([i]) * 16384)
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        res = run(db, prune_batch(BEFORE, budget_s=HOUR))
        assert res.pruned == 2 * prune.CHUNK_OPS
        # about 9 pages per op (args, outcome value, record data: 16 KiB each)
        assert res.pages_freed >= 2 * prune.CHUNK_OPS * 8
        assert free_pages(db) == 0
        assert db.execute("PRAGMA page_count").fetchone()[0] == pages - res.pages_freed

    def test_without_vacuum_the_pages_stay_free_and_give_back_returns_them(self, db):
        for i in range(prune.CHUNK_OPS):
            ended_op(db, f"big{i}", args=bytes([i]) * 16384)
        res = run(db, prune_batch(BEFORE, budget_s=HOUR, vacuum_pages=0))
        assert res.pages_freed == 0
        free = free_pages(db)
        assert free >= prune.CHUNK_OPS * 8
        # one incremental_vacuum statement per page: each frees exactly one
        db.execute("BEGIN IMMEDIATE")
        assert prune.give_back_pages(db, 5, budget_s=HOUR) == 5
        db.execute("COMMIT")
        assert free_pages(db) == free - 5
        db.execute("BEGIN IMMEDIATE")
        assert prune.vacuum_step(free)(Tx(db)) == (free - 5, 0)
        db.execute("COMMIT")

    def test_give_back_stops_at_its_time_bound(self, db):
        for i in range(prune.CHUNK_OPS):
            ended_op(db, f"big{i}", args=bytes([i]) * 16384)
        run(db, prune_batch(BEFORE, budget_s=HOUR, vacuum_pages=0))
        db.execute("BEGIN IMMEDIATE")
        assert prune.give_back_pages(db, 10_000, budget_s=0.0) == 32  # one round, then the clock
        db.execute("ROLLBACK")


class TestPruner:
    async def test_a_look_prunes_every_op_through_the_writer_and_leaves_no_free_page(
        self, store: Store
    ):
        """The pruner on a real writer thread: many batches, each a unit of
        its own; every op ends a tombstone and the space is back."""
        store.write(*neuron_and_prog())
        path, conn = store.path, store.conn
        setup = connect(path)
        n = 300
        setup.execute("BEGIN")
        for i in range(n):
            ended_op(setup, f"o{i}", args=bytes([i % 256]) * (4096 if i % 3 else 64))
        setup.execute("COMMIT")
        writer = Writer(conn, on_fatal=lambda why: None)
        writer.start()
        pruner = Pruner(writer, path, retention_s=1, interval_s=1, stopping=lambda: False)
        try:
            assert await pruner.look() == n
            assert await pruner.look() == 0
        finally:
            writer.stop()
            if pruner._ckpt is not None:
                pruner._ckpt.close()
        assert setup.execute("SELECT count(*) FROM tombstones").fetchone() == (n,)
        assert setup.execute("SELECT count(*) FROM operations").fetchone() == (0,)
        assert free_pages(setup) == 0
        # the pages the batches gave back left the WAL too: a truncating checkpoint ran
        assert Path(f"{path}-wal").stat().st_size == 0
        assert setup.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        setup.close()
