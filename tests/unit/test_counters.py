"""In-process tests of status's counts (daemon/store/counters.py) on a real
SQLite file and the real writer thread: seeded from what the database keeps,
added to only by what a batch commits, never by a unit that rolled back."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from wardd.daemon.core import changes as ch
from wardd.daemon.store.apply import apply
from wardd.daemon.store.counters import Counters, count_afresh
from wardd.daemon.store.schema import migrate
from wardd.daemon.store.writer import Unit, Writer, connect
from wardd.protocol import AttemptState, Conflict


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """A migrated database with one neuron and its prog."""
    p = tmp_path / "wardd.db"
    conn = connect(p)
    migrate(conn)
    conn.execute(
        "INSERT INTO neurons(id, neuron, epoch, policy_version, placement_generation,"
        " created_at) VALUES (1, 'n', 1, 1, 1, 't')"
    )
    conn.execute(
        "INSERT INTO progs(id, neuron_id, prog, state, step_limit) VALUES (1, 1, 'p', 'active', 9)"
    )
    conn.close()
    return p


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

    def unit(conn: sqlite3.Connection) -> None:
        apply(conn, ch.Decision((ch.NewOp(op_id, 1, f"op-{op_id}", 1, "echo", b""),)))
        if then is not None:
            apply(conn, ch.Decision((then,)))
        if fail:
            raise Conflict("refused after its writes")

    return unit


def manual(op_id: int) -> ch.Change:
    """An unknown attempt of the op (as a manual take makes it)."""
    return ch.NewAttempt(
        op_id, op_id, 1, "manual", 1, 1, None, None, None, None, "b", AttemptState.UNKNOWN, None
    )


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
        again = Counters()
        conn = sqlite3.connect(path)
        try:
            again.seed(conn)
        finally:
            conn.close()
        assert again.figures.wire() == writer.counters.figures.wire() == fresh(path)
        assert again.figures.wire()[:2] == ({"pending": 2}, 1)
