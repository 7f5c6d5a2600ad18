"""In-process tests of status's counts (daemon/store/counters.py) on a real
SQLite file and the real writer thread: seeded from what the database keeps,
added to only by what a batch commits, never by a unit that rolled back."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.unit._store import Store, neuron_and_prog
from wardd.daemon.core import changes as ch
from wardd.daemon.store.apply import apply
from wardd.daemon.store.counters import Counters, count_afresh, note_pruned
from wardd.daemon.store.writer import Tx, Unit, Writer, connect
from wardd.protocol import AttemptState, Conflict, OpState


@pytest.fixture
def path(store: Store) -> Path:
    """The migrated store's file, with one neuron and its prog."""
    store.write(*neuron_and_prog())
    return store.path


@pytest.fixture
def writer(path: Path) -> Iterator[Writer]:
    """A writer on ``path``, its counts seeded, not started."""
    conn = connect(path)
    w = Writer(conn, on_fatal=lambda why: None)
    w.counters.seed(conn)
    try:
        yield w
    finally:
        if w._thread.is_alive():
            w.stop()
        conn.close()


def new_op(op_id: int, *, then: ch.Change | None = None, fail: bool = False) -> Unit:
    """A unit that writes a new op (and ``then``), and raises a refusal at its
    end if ``fail``: its writes and its counts must both be undone."""

    def unit(tx: Tx) -> None:
        new = ch.NewOp(op_id, 1, f"op-{op_id}", 1, "echo", b"")
        apply(tx, ch.Decision((new, ch.AppendEvent("submitted", 1, op_id=op_id))))
        if then is not None:
            apply(tx, ch.Decision((then,)))
        if fail:
            raise Conflict("refused after its writes")

    return unit


def manual(op_id: int) -> ch.Change:
    """An unknown attempt of the op (as a manual take makes it)."""
    return ch.NewAttempt(
        op_id, op_id, 1, "manual", 1, 1, None, None, None, None, "b", AttemptState.UNKNOWN, None
    )


def move(op_id: int, was: OpState, to: OpState) -> Unit:
    """A unit that moves an op from ``was`` to ``to`` with its record (as
    the core's every move of an op does)."""

    def unit(tx: Tx) -> None:
        changes = (ch.AppendEvent("moved", 1, op_id=op_id), ch.SetOp(op_id, {"state": to}, was=was))
        apply(tx, ch.Decision(changes))

    return unit


def seeded(path: Path) -> tuple[object, ...]:
    """The figures a new start seeds from ``path``."""
    again = Counters()
    conn = sqlite3.connect(path)
    try:
        again.seed(conn)
    finally:
        conn.close()
    return again.figures.wire()


def snapshot_seq(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute("SELECT seq FROM counts").fetchone()[0])
    finally:
        conn.close()


def fresh(path: Path) -> tuple[object, ...]:
    conn = sqlite3.connect(path)
    try:
        return count_afresh(conn).wire()
    finally:
        conn.close()


class TestCounters:
    def test_a_batch_counts_its_committed_units_and_not_the_one_rolled_back(
        self, writer: Writer, path: Path
    ) -> None:
        """Three units in one batch, the middle one refused after its writes:
        the counts are the two others', as a fresh count finds them."""
        futures = [
            writer.submit(new_op(1)),
            writer.submit(new_op(2, then=manual(2), fail=True)),
            writer.submit(new_op(3, then=manual(3))),
        ]
        writer.start()  # queued before the start: one batch
        assert [f.exception() is None for f in futures] == [True, False, True]
        assert writer.stats.batches == 1
        assert writer.counters.figures.wire()[:2] == ({"pending": 2}, 1)
        assert writer.counters.figures.wire() == fresh(path)

    def test_a_unit_alone_that_is_refused_counts_nothing(self, writer: Writer, path: Path) -> None:
        """A batch of one refused unit (its transaction undone) leaves the figures as they were."""
        writer.start()
        before = writer.counters.figures
        with pytest.raises(Conflict):
            writer.call(new_op(1, fail=True))
        assert writer.counters.figures is before
        assert writer.counters.figures.wire() == fresh(path)

    def test_the_seed_reads_back_what_a_batch_counted(self, writer: Writer, path: Path) -> None:
        """A new start (here: counters seeded afresh) sees the same figures."""
        writer.start()
        writer.call(new_op(1, then=manual(1)))
        writer.call(new_op(2))
        writer.stop()
        again = seeded(path)
        assert again == writer.counters.figures.wire() == fresh(path)
        assert again[:2] == ({"pending": 2}, 1)


P, R, C = OpState.PENDING, OpState.RUNNING, OpState.CANCELLED


class TestSnapshot:
    """Schema 7: the counts are persisted rarely, and a start reads them back
    exactly from the snapshot and the ops written after it."""

    def test_the_snapshot_is_written_at_most_once_per_interval(
        self, writer: Writer, path: Path
    ) -> None:
        """The first batch that counts writes the snapshot; the next ones,
        within the interval, do not (no page of theirs), yet a start reads
        their counts back from their records."""
        writer.counters.persist_every_s = 3600.0
        writer.start()
        writer.call(new_op(1))
        first = snapshot_seq(path)
        assert first > 0
        writer.call(new_op(2))
        writer.call(move(1, P, R))
        assert snapshot_seq(path) == first
        writer.stop()
        assert seeded(path) == writer.counters.figures.wire() == fresh(path)
        assert fresh(path)[0] == {"pending": 1, "running": 1}

    def test_every_move_after_the_snapshot_is_caught_up(self, writer: Writer, path: Path) -> None:
        """Ops the snapshot counted, moved once or twice after it; ops made
        after it, moved or not: the seed equals a fresh count."""
        writer.counters.persist_every_s = 0.0
        writer.start()
        for op_id in (1, 2, 3):
            writer.call(new_op(op_id))
        writer.call(move(3, P, R))
        writer.counters.persist_every_s = 3600.0
        at = snapshot_seq(path)
        writer.call(move(1, P, R))
        writer.call(move(2, P, R))
        writer.call(move(2, R, C))
        writer.call(move(3, R, P))
        writer.call(new_op(4))
        writer.call(new_op(5))
        writer.call(move(5, P, C))
        assert snapshot_seq(path) == at
        writer.stop()
        assert fresh(path)[0] == {"pending": 2, "running": 1, "cancelled": 2}
        assert seeded(path) == writer.counters.figures.wire() == fresh(path)

    def test_a_pruning_batch_writes_the_snapshot(self, writer: Writer, path: Path) -> None:
        """Pruning deletes ops the catch-up could not see again: a batch that
        prunes writes the snapshot, whatever the interval."""
        writer.counters.persist_every_s = 3600.0
        writer.start()
        writer.call(new_op(1))
        at = snapshot_seq(path)
        writer.call(new_op(2))
        assert snapshot_seq(path) == at

        def prunes(tx: Tx) -> None:
            note_pruned(tx.notes, 1, "t")

        writer.call(prunes)
        assert snapshot_seq(path) > at
