"""The set-wise applier (daemon/store/apply_batch.py) leaves the database the
per-change applier (daemon/store/apply.py) leaves: the same decisions are
applied both ways, on two copies of one real SQLite file, and every table
is compared row by row, with the counts noted and the moves logged."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from wardd.daemon.core import attempts as core
from wardd.daemon.core import changes as ch
from wardd.daemon.store import apply as apply_mod
from wardd.daemon.store import apply_batch as batch_mod
from wardd.daemon.store import load
from wardd.daemon.store.apply import MOVES, apply
from wardd.daemon.store.apply_batch import apply_batch
from wardd.daemon.store.counters import NOTES
from wardd.daemon.store.schema import migrate
from wardd.daemon.store.writer import connect
from wardd.protocol import AttemptState, OpState

A, S = AttemptState, OpState
OLD_BOOT, BOOT = "0" * 31 + "1", "f" * 32
AT = "2026-01-01T00:00:00.000Z"
DESCRIPTOR = {"v": 1, "executor": {"worker": "w0", "boot": OLD_BOOT}}
Decided = list[tuple[ch.Decision, Any]]


def _op_changes(op_id: int, neuron: int, kind: str, boot: str) -> list[ch.Change]:
    """An op as a dispatch leaves it: ``prepared``, ``running`` (claimed),
    ``cancelled`` while its attempt runs, or ``done`` (retained)."""
    state = A.PREPARED if kind == "prepared" else A.RUNNING
    out: list[ch.Change] = [
        ch.NewOp(op_id, neuron, f"op-{op_id}", neuron, "echo", b"x" * 8),
        ch.AppendEvent("submitted", neuron, op_id=op_id, data={"prog": "p"}),
        ch.NewAttempt(
            op_id, op_id, 1, "guarded", 1, 1, 1, DESCRIPTOR, "d" * 64, "w0", boot, state, None
        ),
        ch.AppendEvent("prepared", neuron, op_id=op_id, attempt=1, data={"boot": boot}),
        ch.SetOp(op_id, {"state": S(state.value), "attempts": 1}, was=S.PENDING),
    ]
    if state == A.RUNNING:
        out += [
            ch.NewClaim(op_id, op_id, 1, 1, "d" * 64, "w0", boot, {"adapter": "echo"}),
            ch.AppendEvent("claimed", neuron, op_id=op_id, attempt=1, data={"boot": boot}),
        ]
    if kind == "cancelled":
        out += [
            ch.AppendEvent("cancelled", neuron, op_id=op_id, data={"reason": "cancelled"}),
            ch.SetOp(op_id, {"state": S.CANCELLED, "cancelled": True}, was=S.RUNNING),
        ]
    if kind == "done":
        out += [
            ch.SetAttempt(op_id, 1, state=A.SUCCEEDED, act="echo", was=A.RUNNING),
            ch.NewOutcome(op_id, op_id, 1, A.SUCCEEDED, b"v", None, "adapter"),
            ch.AppendEvent("outcome", neuron, op_id=op_id, attempt=1, data={"status": "ok"}),
            ch.SetOp(op_id, {"state": S.RETAINED, "result_epoch": 1}, was=S.RUNNING),
        ]
    return out


KINDS = ("running", "prepared", "done", "cancelled", "running", "current", "prepared")


@pytest.fixture
def crashed(tmp_path: Path) -> Path:
    """A database an earlier boot left with open attempts of every kind,
    written by the real applier: 3 neurons, 42 ops."""
    path = tmp_path / "crashed.db"
    conn = connect(path)
    migrate(conn)
    conn.execute("BEGIN IMMEDIATE")
    for n in (1, 2, 3):
        apply(conn, ch.Decision((ch.NewNeuron(n, f"neuron-{n}"),)))
        apply(conn, ch.Decision((ch.NewProg(n, n, "p", 1000),)))
    for op_id in range(1, 43):
        kind = KINDS[op_id % len(KINDS)]
        boot = BOOT if kind == "current" else OLD_BOOT
        kind = "running" if kind == "current" else kind
        apply(conn, ch.Decision(tuple(_op_changes(op_id, op_id % 3 + 1, kind, boot))))
    conn.execute("COMMIT")
    conn.close()
    return path


@pytest.fixture
def fixed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Both appliers stamp the same time (the one thing they may differ in)."""
    monkeypatch.setattr(apply_mod, "now", lambda: AT)
    monkeypatch.setattr(batch_mod, "now", lambda: AT)


def _tables(conn: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    names = [
        r[0]
        for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table' ORDER BY name")
    ]
    return {
        name: sorted(conn.execute(f"SELECT * FROM {name}").fetchall(), key=repr) for name in names
    }


@pytest.fixture
def both_ways(crashed: Path, fixed_time: None) -> Iterator[Callable[..., Any]]:
    """``run(decide)``: ``decide(conn) -> [(decision, loaded)]`` on two copies
    of the crashed database, one applied by ``apply`` one decision after the
    other, the other by ``apply_batch``, each in one transaction; returns
    both copies' tables, notes, moves and replies."""
    conns: list[sqlite3.Connection] = []

    def run(decide: Callable[[sqlite3.Connection], Decided]) -> list[dict[str, Any]]:
        out = []
        for way in ("apply", "batch"):
            path = crashed.with_name(f"{way}.db")
            shutil.copyfile(crashed, path)
            conn = connect(path)
            conns.append(conn)
            MOVES.log, NOTES.log = [], []
            try:
                conn.execute("BEGIN IMMEDIATE")
                decided = decide(conn)
                if way == "apply":
                    replies = [apply(conn, d, loaded) for d, loaded in decided]
                else:
                    replies = apply_batch(conn, decided)
                conn.execute("COMMIT")
                assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
                out.append(
                    {
                        "tables": _tables(conn),
                        "notes": list(NOTES.log),
                        "moves": list(MOVES.log),
                        "replies": replies,
                    }
                )
            finally:
                MOVES.log = NOTES.log = None
        return out

    try:
        yield run
    finally:
        for conn in conns:
            conn.close()


def _marks(conn: sqlite3.Connection) -> Decided:
    """The start's recovery: every earlier boot's open attempt marked unknown."""
    return [
        (core.mark_unknown(op, attempt, claimed=claimed, orphan_killed=op.id % 2 == 0)[0], op)
        for _neuron, op, attempt, claimed in load.open_before(conn, BOOT)
    ]


def _hint(mark: ch.SetAttempt, evidence: dict[str, Any], reply: Any = None) -> ch.Decision:
    """A receipt's hint on the attempt ``mark`` set: evidence alone, and its record."""
    return ch.Decision(
        (
            ch.SetAttempt(mark.op_id, mark.attempt, evidence=evidence),
            ch.AppendEvent("receipt", 1, op_id=mark.op_id, attempt=mark.attempt),
        ),
        reply=reply,
    )


class TestSameDatabase:
    def test_recovery_marks_leave_the_same_tables(self, both_ways: Callable[..., Any]) -> None:
        """Marking every open attempt set-wise writes the rows, records
        (seqs and follows links), op states, op counts and unknown-attempt
        index the per-change applier writes, and notes the same counts."""
        by_apply, by_batch = both_ways(_marks)
        assert by_batch == by_apply
        tables = by_batch["tables"]
        marked = [r for r in tables["events"] if r[2] == "marked_unknown"]
        assert len(marked) == 30  # running, prepared and cancelled-while-running ops
        assert by_batch["moves"] == [("echo", "unknown")] * 30

    def test_decisions_that_do_not_commute_still_match(self, both_ways: Callable[..., Any]) -> None:
        """Decisions on an op the run already changed (a hint, then an
        answer that resolves it), one with a new row,
        one whose op was not loaded and a per-neuron record each close the
        run where they come, and the result is still apply's."""

        def decide(conn: sqlite3.Connection) -> Decided:
            marks = _marks(conn)
            first = marks[0][0].changes[0]
            assert isinstance(first, ch.SetAttempt)
            hint = _hint(first, {"receipt_hint": "x"}, reply="hinted")
            resolve = ch.Decision(
                (
                    ch.SetAttempt(
                        first.op_id,
                        first.attempt,
                        state=A.NOT_EXECUTED,
                        evidence={"receipt": "not_executed"},
                        act="echo",
                        was=A.UNKNOWN,
                    ),
                    ch.AppendEvent("receipt", 1, op_id=first.op_id, attempt=first.attempt),
                    ch.SetOp(first.op_id, {"state": S.PENDING}, was=S.UNKNOWN),
                ),
            )
            new = ch.Decision(
                (
                    ch.NewOp(100, 1, "op-100", 1, "echo", b""),
                    ch.AppendEvent("submitted", 1, op_id=100),
                ),
                reply="new",
            )
            neuron = ch.Decision((ch.AppendEvent("grant_set", 2, data={"acts": ["echo"]}),))
            unloaded = [(d, None) for d, _op in marks[6:9]]
            return [
                *marks[:3],
                (hint, None),
                *marks[3:5],
                (resolve, None),
                (new, None),
                (neuron, None),
                *marks[5:6],
                *unloaded,
                *marks[9:],
            ]

        by_apply, by_batch = both_ways(decide)
        assert by_batch == by_apply
        assert "hinted" in by_batch["replies"] and "new" in by_batch["replies"]

    def test_a_decision_that_updates_one_attempt_twice_keeps_their_order(
        self, both_ways: Callable[..., Any]
    ) -> None:
        """An attempt set twice by one decision (state and evidence, then
        evidence alone) after a decision that set evidence alone: grouped by
        shape, the second update would run before the first and leave the
        first evidence; the run refuses it and the result is apply's."""

        def decide(conn: sqlite3.Connection) -> Decided:
            marks = _marks(conn)
            one, two = (m[0].changes[0] for m in marks[:2])
            assert isinstance(one, ch.SetAttempt) and isinstance(two, ch.SetAttempt)
            hint = _hint(one, {"hint": 1})
            twice = ch.Decision(
                (
                    ch.SetAttempt(
                        two.op_id,
                        two.attempt,
                        state=A.UNKNOWN,
                        evidence={"v": "first"},
                        act="echo",
                        was=A.RUNNING,
                    ),
                    ch.AppendEvent("marked_unknown", 1, op_id=two.op_id, attempt=two.attempt),
                    ch.SetAttempt(two.op_id, two.attempt, evidence={"v": "second"}),
                    ch.SetOp(two.op_id, {"state": S.UNKNOWN}, was=S.RUNNING),
                )
            )
            return [(hint, None), (twice, None)]

        by_apply, by_batch = both_ways(decide)
        assert by_batch == by_apply

    def test_a_field_the_store_does_not_know_is_refused(self, crashed: Path) -> None:
        """As apply does: a SetOp naming no column of operations is an
        internal error, not a field silently dropped."""
        conn = connect(crashed)
        try:
            conn.execute("BEGIN IMMEDIATE")
            bad = ch.Decision((ch.SetOp(1, {"colour": "red"}),))
            with pytest.raises(Exception, match="no field 'colour'"):
                apply_batch(conn, [(bad, None)])
            conn.execute("ROLLBACK")
        finally:
            conn.close()
