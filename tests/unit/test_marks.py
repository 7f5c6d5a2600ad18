"""The start's set-wise marks (daemon/store/marks.py) leave the database the
core's per-attempt decision (``core.mark_unknown``) applied by the per-change
applier (daemon/store/apply.py) leaves: the same attempts are marked both
ways, on two copies of one real SQLite file, and every table is compared row
by row, with the counts noted and the moves logged. The core's rule in
figures (``core.unknown_mark``) is checked against ``mark_unknown`` for every
input."""

from __future__ import annotations

import itertools
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import cbor2
import pytest

from tests.unit._store import Store, dispatched_op, neuron_and_prog
from wardd.daemon.core import attempts as core
from wardd.daemon.core import changes as ch
from wardd.daemon.core.records import Attempt, Op
from wardd.daemon.life import recovery_units as recovery
from wardd.daemon.store import apply as apply_mod
from wardd.daemon.store import load
from wardd.daemon.store import marks as marks_mod
from wardd.daemon.store.apply import apply
from wardd.daemon.store.counters import Counters, count_afresh, snapshot_afresh
from wardd.daemon.store.writer import Tx, connect
from wardd.protocol import AttemptState, Internal, OpState

A, S = AttemptState, OpState
OLD_BOOT, OTHER_BOOT, BOOT = "0" * 31 + "1", "0" * 31 + "2", "f" * 32
AT = "2026-01-01T00:00:00.000Z"
DESCRIPTOR = {"v": 1, "executor": {"worker": "w0", "boot": OLD_BOOT}}


KINDS = ("running", "prepared", "done", "cancelled", "running", "current", "prepared")


@pytest.fixture
def crashed(store: Store) -> Path:
    """A database two earlier boots left with open attempts of every kind,
    written by the real applier: 3 neurons, 42 ops (its WAL checkpointed:
    the tests copy the file)."""
    conn = store.conn
    conn.execute("BEGIN IMMEDIATE")
    tx = Tx(conn)
    for n in (1, 2, 3):
        apply(tx, ch.Decision(neuron_and_prog(n, f"neuron-{n}", "p", 1000)))
    for op_id in range(1, 43):
        kind = KINDS[op_id % len(KINDS)]
        boot = BOOT if kind == "current" else OTHER_BOOT if op_id % 5 == 0 else OLD_BOOT
        kind = "running" if kind == "current" else kind
        apply(tx, ch.Decision(dispatched_op(op_id, op_id % 3 + 1, kind, boot)))
        if op_id == 20:
            # the counts' snapshot, as the writer persists one now and then: the ops
            # written before it get their `counted_state` at their next write (a mark)
            snapshot_afresh(conn)
    conn.execute("COMMIT")
    assert conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0  # not busy
    return store.path


@pytest.fixture
def not_latest(crashed: Path) -> Path:
    """The crashed database, where op 1's prepared attempt is no longer its
    op's latest (a second attempt, voided, follows it): no start may mark it."""
    conn = connect(crashed)
    conn.execute("BEGIN IMMEDIATE")
    (op_id,) = conn.execute(
        "SELECT op_id FROM attempts WHERE state = 'prepared' AND boot = ? ORDER BY id LIMIT 1",
        (OLD_BOOT,),
    ).fetchone()
    apply(
        Tx(conn),
        ch.Decision(
            (
                ch.NewAttempt(
                    100, op_id, 2, "guarded", 1, 1, 1, DESCRIPTOR, "d" * 64, "w0", OLD_BOOT,
                    A.VOID, None,
                ),
                ch.SetOp(op_id, {"attempts": 2}),
            )
        ),
    )  # fmt: skip
    conn.execute("COMMIT")
    conn.close()
    return crashed


@pytest.fixture
def fixed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both ways stamp the same time (the one thing they may differ in)."""
    monkeypatch.setattr(apply_mod, "now", lambda: AT)
    monkeypatch.setattr(marks_mod, "now", lambda: AT)


def _tables(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    names = [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    ]
    return {
        name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for name in names
    }


def _orphans(conn: sqlite3.Connection) -> set[int]:
    """Every third open attempt had a program that outlived its boot."""
    return {r[0] for r in conn.execute("SELECT id FROM attempts WHERE id % 3 = 0")}


def _by_core(tx: Tx) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The reference: each open attempt of an earlier boot (found here by a
    plain query) loaded as the core's records, decided by ``mark_unknown``
    and applied by ``apply``, one after the other."""
    conn = tx.conn
    orphans = _orphans(conn)
    marks = []
    for attempt_id, op_id, claimed in conn.execute(
        "SELECT id, op_id, claimed_at IS NOT NULL FROM attempts"
        " WHERE state IN ('prepared', 'running') AND boot != ? ORDER BY id",
        (BOOT,),
    ).fetchall():
        view = load.op_attempts(conn, op_id)
        assert view.op is not None
        (found,) = (a for a in view.attempts if a.id == attempt_id)
        decision, evidence = core.mark_unknown(
            view.op, found, claimed=bool(claimed), orphan_killed=attempt_id in orphans
        )
        apply(tx, decision, view.op)
        (neuron,) = conn.execute(
            "SELECT neuron FROM neurons WHERE id = ?", (view.op.neuron_id,)
        ).fetchone()
        where = {"neuron": neuron, "op": view.op.op, "attempt": found.attempt, "act": "echo"}
        marks.append((where, evidence))
    return marks


def _set_wise(tx: Tx) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """The start's unit, as recovery runs it."""
    marks: list[tuple[dict[str, Any], dict[str, Any]]] = []
    recovery.mark_unknown(BOOT, marks, _orphans(tx.conn))(tx)
    return marks


@pytest.fixture
def both_ways(crashed: Path, fixed_time: None) -> Iterator[Callable[..., Any]]:
    """``run()``: the marks made both ways on two copies of the crashed
    database, each in one transaction; returns both copies' tables, the
    figures their notes move, the moves logged and the marks listed."""
    conns: list[sqlite3.Connection] = []

    def run() -> list[dict[str, Any]]:
        out = []
        for way, mark in (("core", _by_core), ("set-wise", _set_wise)):
            path = crashed.with_name(f"{way}.db")
            shutil.copyfile(crashed, path)
            conn = connect(path)
            conns.append(conn)
            tx = Tx(conn)  # the lists a writer's batch would hand on
            conn.execute("BEGIN IMMEDIATE")
            marks = mark(tx)
            conn.execute("COMMIT")
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            counters = Counters()
            counters.add(tx.notes)
            # what the next start reads back (snapshot + catch-up) is a fresh count
            seeded = Counters()
            seeded.seed(conn)
            assert seeded.figures.wire() == count_afresh(conn).wire()
            (counted,) = conn.execute(
                "SELECT count(*) FROM operations WHERE counted_state IS NOT NULL"
            ).fetchone()
            out.append(
                {
                    "tables": _tables(conn),
                    "figures": counters.figures,
                    "counted": counted,
                    "moves": list(tx.moves),
                    "marks": marks,
                }
            )
        return out

    try:
        yield run
    finally:
        for conn in conns:
            conn.close()


class TestSameDatabase:
    def test_the_marks_leave_the_tables_the_core_and_apply_leave(
        self, both_ways: Callable[..., Any]
    ) -> None:
        """Marking every open attempt set-wise writes the rows, records
        (seqs, follows links, data), op states and last records, the
        counts' catch-up column and the unknown-attempt index the core's
        decisions applied one by one write, notes the same counts and logs
        the same moves and marks."""
        by_core, set_wise = both_ways()
        assert set_wise == by_core
        tables = set_wise["tables"]
        marked = [r for r in tables["events"] if r[2] == "marked_unknown"]
        # running, prepared and cancelled-while-running ops of both earlier boots
        assert len(marked) == 30
        assert set_wise["moves"] == [("echo", "unknown")] * 30
        assert set_wise["figures"].unknown_attempts == 30
        boots = {e["boot"] for _w, e in set_wise["marks"]}
        assert boots == {OLD_BOOT, OTHER_BOOT}
        assert any(e.get("orphan_killed") for _w, e in set_wise["marks"])
        # the snapshot was taken half-way: marks of ops written before it set the
        # catch-up column (the trigger on last_seq), those after it do not
        assert 0 < set_wise["counted"] < 30

    def test_an_open_attempt_that_is_not_its_ops_latest_is_refused(self, not_latest: Path) -> None:
        """As ``mark_unknown`` refuses it: the start's unit raises and, in its
        rolled-back transaction, writes nothing."""
        conn = connect(not_latest)
        try:
            before = _tables(conn)
            conn.execute("BEGIN IMMEDIATE")
            with pytest.raises(Internal, match="only an op's latest attempt moves"):
                _set_wise(Tx(conn))
            conn.execute("ROLLBACK")
            assert _tables(conn) == before
        finally:
            conn.close()

    def test_a_second_mark_on_one_op_is_refused(self, crashed: Path) -> None:
        """Each record follows its op's last one: two marks on one op in
        one statement would link both to the same record."""
        conn = connect(crashed)
        try:
            conn.execute("BEGIN IMMEDIATE")
            (o, *_rest) = marks_mod.open_attempts(conn, BOOT)
            mark = marks_mod.Mark(o, S.UNKNOWN, {"claimed": False, "boot": OLD_BOOT})
            with pytest.raises(AssertionError, match="one mark per op"):
                marks_mod.write_marks(Tx(conn), [mark, mark])
            conn.execute("ROLLBACK")
        finally:
            conn.close()


def _op(state: OpState, cancelled: bool, consumed: bool, attempts: int) -> Op:
    return Op(7, 1, "op", 1, "echo", b"", state, attempts, cancelled, consumed, None, 3)


def _attempt(state: AttemptState) -> Attempt:
    return Attempt(9, 7, 2, "guarded", 1, 1, 1, "d", "w0", OLD_BOOT, state, None, None, False)


@pytest.mark.parametrize("state", list(AttemptState))
def test_the_rule_in_figures_is_mark_unknowns_decision(state: AttemptState) -> None:
    """For every attempt state, op state, cancelled, consumed and whether
    the attempt is its op's latest: ``unknown_mark`` refuses exactly what
    ``mark_unknown`` refuses, and otherwise names the op state its decision
    sets (None when it sets none)."""
    for op_is, cancelled, consumed, latest in itertools.product(
        OpState, (False, True), (False, True), (False, True)
    ):
        op = _op(op_is, cancelled, consumed, 2 if latest else 3)
        try:
            decision, _evidence = core.mark_unknown(
                op, _attempt(state), claimed=True, orphan_killed=False
            )
        except Internal as e:
            with pytest.raises(Internal) as refused:
                core.unknown_mark(state, latest, op_is, cancelled, consumed)
            assert str(refused.value) == str(e)
            continue
        to = core.unknown_mark(state, latest, op_is, cancelled, consumed)
        # the changes write_marks writes for it, and no other
        evidence = {"claimed": True, "boot": OLD_BOOT}
        expected: list[ch.Change] = [
            ch.SetAttempt(7, 2, state=A.UNKNOWN, evidence=evidence, act="echo", was=state),
            ch.AppendEvent("marked_unknown", 1, op_id=7, attempt=2, data=evidence),
        ]
        if to is not None:
            expected.append(ch.SetOp(7, {"state": to}, was=op_is))
        assert list(decision.changes) == expected


def test_the_evidence_is_mark_unknowns() -> None:
    """The set-wise marks' evidence is the evidence ``mark_unknown`` records."""
    for claimed, orphan in itertools.product((False, True), (False, True)):
        op = _op(S.RUNNING, False, False, 2)
        _d, evidence = core.mark_unknown(
            op, _attempt(A.RUNNING), claimed=claimed, orphan_killed=orphan
        )
        assert core.unknown_evidence(claimed, OLD_BOOT, orphan) == evidence


class TestOrphansRecordedFirst:
    """The unit committed before an orphan is killed (``recovery.record_orphans``)."""

    def _events(self, conn: sqlite3.Connection, kind: str) -> list[tuple[int, Any]]:
        return conn.execute(
            "SELECT op_id, data FROM events WHERE kind = ? ORDER BY seq", (kind,)
        ).fetchall()

    def test_it_marks_its_open_attempts_and_the_start_marks_the_rest(
        self, crashed: Path, fixed_time: None
    ) -> None:
        """Orphans' open attempts are marked unknown with orphan_killed as the
        start's unit marks them; the start's unit after it marks the other
        open attempts (not those again), without orphan_killed: 30 marks in
        all, one record each, the counts exact."""
        conn = connect(crashed)
        try:
            conn.execute("BEGIN IMMEDIATE")
            open_ids = [o.id for o in marks_mod.open_attempts(conn, BOOT)]
            orphans = set(open_ids[:4])
            first: list[tuple[dict[str, Any], dict[str, Any]]] = []
            marked = recovery.record_orphans(BOOT, orphans, first)(Tx(conn))
            assert sorted(marked) == sorted(orphans) and len(first) == 4
            assert all(e["orphan_killed"] is True for _w, e in first)
            rest: list[tuple[dict[str, Any], dict[str, Any]]] = []
            later = recovery.mark_unknown(BOOT, rest)(Tx(conn))
            conn.execute("COMMIT")
            assert set(later) == set(open_ids) - orphans and len(open_ids) == 30
            assert not any("orphan_killed" in e for _w, e in rest)
            assert len(self._events(conn, "marked_unknown")) == 30
            assert self._events(conn, "orphan_killed") == []
            seeded = Counters()
            seeded.seed(conn)
            assert seeded.figures.wire() == count_afresh(conn).wire()
        finally:
            conn.close()

    def test_an_attempt_already_unknown_gains_orphan_killed_once(
        self, crashed: Path, fixed_time: None
    ) -> None:
        """An attempt an earlier start marked unknown (no orphan then): its
        evidence gains orphan_killed with one ``orphan_killed`` record whose
        data is the evidence; the attempt and its op stay unknown; a second
        record of the same kill adds nothing."""
        conn = connect(crashed)
        try:
            conn.execute("BEGIN IMMEDIATE")
            recovery.mark_unknown(OLD_BOOT + "x", [])(Tx(conn))  # an earlier start's marks
            (attempt_id, op_id) = conn.execute(
                "SELECT id, op_id FROM attempts WHERE state = 'unknown' ORDER BY id LIMIT 1"
            ).fetchone()
            before = load.op_attempts(conn, op_id)
            for _ in range(2):
                marks: list[tuple[dict[str, Any], dict[str, Any]]] = []
                assert recovery.record_orphans(BOOT, {attempt_id}, marks)(Tx(conn)) == []
                assert marks == []
            conn.execute("COMMIT")
            after = load.op_attempts(conn, op_id)
            (was,) = (a for a in before.attempts if a.id == attempt_id)
            (now,) = (a for a in after.attempts if a.id == attempt_id)
            assert now.state == A.UNKNOWN and after.op is not None
            assert after.op.state == before.op.state == S.UNKNOWN  # type: ignore[union-attr]
            assert now.evidence == {**(was.evidence or {}), "orphan_killed": True}
            (record,) = self._events(conn, "orphan_killed")
            assert record[0] == op_id and cbor2.loads(record[1]) == now.evidence
        finally:
            conn.close()


def test_orphan_killed_changes_nothing_but_an_unknown_attempts_evidence() -> None:
    """``core.orphan_killed`` on an attempt in any other state, or one that
    says orphan_killed already, or an attempt not in the view: no change."""
    from wardd.daemon.core.records import OpView

    op = _op(S.UNKNOWN, False, False, 2)
    for state in AttemptState:
        view = OpView(neuron=None, name="op", op=op, prog=None, attempts=(_attempt(state),))
        changes = core.orphan_killed(view, 9).changes
        assert bool(changes) == (state == A.UNKNOWN), state
        assert core.orphan_killed(view, 10).changes == ()
    said = attrs.evolve(_attempt(A.UNKNOWN), evidence={"orphan_killed": True})
    view = OpView(neuron=None, name="op", op=op, prog=None, attempts=(said,))
    assert core.orphan_killed(view, 9).changes == ()
