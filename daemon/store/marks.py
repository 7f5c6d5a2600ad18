"""The start's marks, read and written set-wise (contract §3.6).

After a crash a start may find thousands of attempts an earlier boot left
``prepared`` or ``running``; every one becomes ``unknown`` in one unit
before anything is served. Loading each as the core's records, asking
:func:`~..core.attempts.mark_unknown` for a decision of change objects and
handing those to a set-wise applier cost ~23 µs of Python per attempt, more
than the SQL itself. Here the same marks are made from the rows themselves:

- :func:`open_attempts` reads, in one statement, the few columns the
  mark depends on (:class:`Open`);
- the unit asks the core, for each attempt, what the mark does to its op
  (:func:`~..core.attempts.unknown_mark`, the same refusals as
  ``mark_unknown``) and for its evidence
  (:func:`~..core.attempts.unknown_evidence`);
- :func:`write_marks` writes them with one statement per shape
  (``executemany``): every attempt's state and evidence, then every
  ``marked_unknown`` record (numbered and linked as :func:`.apply.apply`
  numbers and links them), then every op's ``last_seq`` and state; it notes
  the counts (:mod:`.counters`) and the moves in the unit's :class:`.writer.Tx`.

The database left is the one ``mark_unknown`` and ``apply`` leave applied to
each attempt in turn (the same rows, records, triggers fired, counts and
moves); only the time stamp is one for the unit, whose records commit
together. tests/unit/test_marks.py compares every table both ways, and
checks :func:`~..core.attempts.unknown_mark` against ``mark_unknown`` for
every input.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, NamedTuple

from wardd.protocol import AttemptState, OpState

from .apply import NEXT_SEQ
from .counters import note_marked
from .encoding import enc, now
from .load import _ATTEMPT_STATE, _OP_STATE
from .schema import attempts_in
from .writer import Tx

__all__ = ["Mark", "Open", "open_attempts", "write_marks"]


class Open(NamedTuple):
    """An attempt an earlier boot left open, with what its mark depends on."""

    id: int
    op_id: int
    attempt: int
    state: AttemptState
    boot: str
    claimed: bool
    op_attempts: int  # the op's number of attempts: its latest is this number
    op_state: OpState
    cancelled: bool
    last_seq: int | None  # the op's last record, which the mark's record follows
    neuron_id: int
    neuron: str  # the neuron's id text, op name and act: where it is, for the log
    op: str
    act: str


class Mark(NamedTuple):
    """One attempt to mark: the op state it leaves its op in (None: the op
    keeps its state) and its evidence, which is also its record's data."""

    open: Open
    op_to: OpState | None
    evidence: dict[str, Any]


_OPEN = (
    "SELECT a.id, a.op_id, a.attempt, a.state, a.boot, a.claimed_at IS NOT NULL,"
    " o.attempts, o.state, o.cancelled, o.last_seq, o.neuron_id, n.neuron, o.op, o.act"
    " FROM attempts a JOIN operations o ON o.id = a.op_id JOIN neurons n ON n.id = o.neuron_id"
    f" WHERE {attempts_in(('prepared', 'running'))} AND a.boot != ? ORDER BY a.id"
)


def open_attempts(conn: sqlite3.Connection, boot: str) -> list[Open]:
    """Every attempt an earlier boot than ``boot`` left prepared or running,
    by attempt id, in one statement."""
    a_state, o_state = _ATTEMPT_STATE, _OP_STATE
    return [
        Open(i, op_id, n, a_state[st], b, bool(cl), na, o_state[ost], bool(c), *rest)
        for i, op_id, n, st, b, cl, na, ost, c, *rest in conn.execute(_OPEN, (boot,))
    ]


_SET_ATTEMPT = "UPDATE attempts SET state = 'unknown', evidence = ? WHERE id = ?"
_INSERT_EVENT = (
    "INSERT INTO events(seq, at, kind, neuron_id, op_id, attempt, follows, data)"
    " VALUES (?, ?, 'marked_unknown', ?, ?, ?, ?, ?)"
)
_SET_OP_SEQ = "UPDATE operations SET last_seq = ? WHERE id = ?"
_SET_OP_STATE = "UPDATE operations SET last_seq = ?, state = ? WHERE id = ?"


def write_marks(tx: Tx, marks: Sequence[Mark]) -> None:
    """Write ``marks`` (each on an op of its own) as ``apply`` would write
    their decisions one after the other (module docstring)."""
    if not marks:
        return
    conn = tx.conn
    if len({m.open.op_id for m in marks}) != len(marks):
        # each record follows its op's last: a second mark on one op would not
        raise AssertionError("one mark per op")
    at = now()
    (seq,) = conn.execute(f"SELECT {NEXT_SEQ}").fetchone()
    attempts, events, same, moved, notes = [], [], [], [], []
    for m in marks:
        o = m.open
        blob = enc(m.evidence)  # the record's data is the evidence: one encoding
        attempts.append((blob, o.id))
        events.append((seq, at, o.neuron_id, o.op_id, o.attempt, o.last_seq, blob))
        if m.op_to is None:
            same.append((seq, o.op_id))
        else:
            moved.append((seq, m.op_to.value, o.op_id))
            notes.append((o.op_state.value, m.op_to.value))
        seq += 1
    # attempts, then records, then ops: as apply orders one decision's changes
    # (an op's triggers see its attempt and its record)
    conn.executemany(_SET_ATTEMPT, attempts)
    conn.executemany(_INSERT_EVENT, events)
    conn.executemany(_SET_OP_SEQ, same)
    conn.executemany(_SET_OP_STATE, moved)
    # each was prepared or running (unknown_mark refuses others)
    note_marked(tx.notes, notes, len(marks))
    tx.moves.extend((m.open.act, AttemptState.UNKNOWN.value) for m in marks)
