"""The set-wise applier: many decisions of one unit written with one
statement per shape (``executemany``) instead of one per change.

The core still decides each record alone (:mod:`wardd.daemon.core`); this
only changes how the decisions' changes reach SQLite, for a unit that
writes thousands of them (the start's recovery marks every attempt an
earlier boot left open). The database it leaves is the one
:func:`.apply.apply` leaves, applied to each decision in turn in the same
unit: the same rows, the same event records with the same seqs and
``follows`` links, the same triggers fired on the same rows, the same
counts noted (:mod:`.counters`) and moves logged (:data:`.apply.MOVES`);
tests/unit/test_apply_batch.py compares every table both ways. Only the
time stamp differs: one for the unit, not one per decision (its records
commit together).

A *run* is a sequence of decisions that change only attempts' states and
evidence, append event records and set ops' fields, each on ops no earlier
decision of the run touches: such decisions commute, so their changes are
written grouped by statement (every attempt's UPDATE, then every record's
INSERT, then every op's UPDATE, as :func:`.apply.apply` orders them within
one decision). A decision that is not of that kind (a new row of any
table, a claim or an outcome, or an op the run already changed) closes the
run; one that cannot join any run is written by :func:`.apply.apply`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from .._records import enc, now
from ..core import changes as ch
from ..core.records import Op
from .apply import (
    _OP_COLUMNS,
    _OP_UNSTORED,
    NEXT_SEQ,
    _sql_value,
    apply,
    attempt_fields,
    last_record,
    stored_columns,
)
from .counters import note

__all__ = ["apply_batch"]

_BATCHED = (ch.SetAttempt, ch.AppendEvent, ch.SetOp)
_INSERT_EVENTS = (
    "INSERT INTO events(seq, at, kind, neuron_id, op_id, attempt, follows, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)


class _Run:
    """The changes of a run of commuting decisions, by statement. A
    record's seq is known as it is added: nothing is written between the
    run's first record and its flush (the seq apply would give it then)."""

    def __init__(self, conn: sqlite3.Connection, at: str) -> None:
        self.conn = conn
        self.at = at
        # attempt UPDATEs by the columns they set: rows of (values..., op id, number)
        self.attempts: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        self.events: list[tuple[Any, ...]] = []  # INSERT rows, in seq order
        self.ops: dict[int, dict[str, Any]] = {}  # each op's columns, written once
        self.last_seq: dict[int, int | None] = {}  # each op's last record: loaded, or added
        self.touched: set[int] = set()  # ops of the run's decisions
        self._seq = 0  # the next record's seq, once the run has a record
        self._last: tuple[Any, bytes | None] = (None, None)  # the last value encoded

    def takes(self, decision: ch.Decision) -> bool:
        """Whether ``decision`` commutes with the run (module docstring)."""
        touched = self.touched
        attempts: set[tuple[int, int]] = set()
        for c in decision.changes:
            if not isinstance(c, _BATCHED):
                return False
            if c.op_id in touched:
                return False
            if isinstance(c, ch.SetAttempt):
                if (c.state, c.reason, c.evidence) == (None,) * 3:
                    return False  # nothing to set: left to apply (which refuses it)
                if (c.op_id, c.attempt) in attempts:
                    # a second update of one attempt: grouped by the columns they set, the two
                    # could be written in the other order; apply writes them as they come
                    return False
                attempts.add((c.op_id, c.attempt))
        return True

    def add(self, decision: ch.Decision, loaded: Op | None) -> None:
        if loaded is not None:
            self.last_seq[loaded.id] = loaded.last_seq
        ops = []
        for c in decision.changes:
            if isinstance(c, ch.SetAttempt):
                self._set_attempt(c)
                ops.append(c.op_id)
            elif isinstance(c, ch.AppendEvent):
                self._append_event(c)
                if c.op_id is not None:
                    ops.append(c.op_id)
            elif isinstance(c, ch.SetOp):
                self._set_op(c)
                ops.append(c.op_id)
        self.touched.update(ops)  # after: a decision may change its own op twice
        note(decision.changes)

    def _set_attempt(self, c: ch.SetAttempt) -> None:
        fields = attempt_fields(c, self._enc)
        rows = self.attempts.setdefault(tuple(fields), [])
        rows.append((*fields.values(), c.op_id, c.attempt))

    def _append_event(self, c: ch.AppendEvent) -> None:
        if not self.events:
            (self._seq,) = self.conn.execute(f"SELECT {NEXT_SEQ}").fetchone()
        seq = self._seq
        self._seq += 1
        follows = None
        if c.op_id is not None:
            # not loaded nor appended to: no decision of the run changed it, its row is current
            follows = last_record(self.conn, c.op_id, self.last_seq)
            self.last_seq[c.op_id] = seq
            self.ops.setdefault(c.op_id, {})["last_seq"] = seq
        data = self._enc(c.data)
        self.events.append((seq, self.at, c.kind, c.neuron_id, c.op_id, c.attempt, follows, data))

    def _enc(self, value: Any) -> bytes | None:
        """``enc(value)``; a move's record usually carries the very mapping
        its attempt's evidence does (one encoding for both)."""
        if value is not self._last[0]:
            self._last = (value, enc(value))
        return self._last[1]

    def _set_op(self, c: ch.SetOp) -> None:
        stored_columns("SetOp", "operations", _OP_COLUMNS, c.fields, _OP_UNSTORED)  # refuses
        self.ops.setdefault(c.op_id, {}).update(c.fields)

    def flush(self) -> None:
        """Write the run: attempts, then records, then ops (as apply orders
        one decision's changes: an op's triggers see its attempt and record)."""
        conn = self.conn
        for cols, rows in self.attempts.items():
            conn.executemany(
                f"UPDATE attempts SET {', '.join(f'{k} = ?' for k in cols)}"
                " WHERE op_id = ? AND attempt = ?",
                rows,
            )
        conn.executemany(_INSERT_EVENTS, self.events)
        by_shape: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for op_id, fields in self.ops.items():
            cols = tuple(k for k in fields if k not in _OP_UNSTORED)
            if cols:
                row = (*(_sql_value(k, fields[k]) for k in cols), op_id)
                by_shape.setdefault(cols, []).append(row)
        for cols, rows in by_shape.items():
            conn.executemany(
                f"UPDATE operations SET {', '.join(f'{k} = ?' for k in cols)} WHERE id = ?", rows
            )


def apply_batch(
    conn: sqlite3.Connection, decisions: Iterable[tuple[ch.Decision, Op | None]]
) -> list[Any]:
    """Write each decision's changes, as :func:`.apply.apply` would one
    after the other (``(decision, loaded)``: ``loaded`` as apply takes it);
    return their replies, in order."""
    at = now()
    run = _Run(conn, at)
    replies: list[Any] = []
    for decision, loaded in decisions:
        if not run.takes(decision):
            run.flush()
            run = _Run(conn, at)
            if not run.takes(decision):
                replies.append(apply(conn, decision, loaded))
                continue
        run.add(decision, loaded)
        replies.append(decision.reply)
    run.flush()
    return replies
