"""The counts ``status`` shows, kept by the writer: ops by state, unknown
attempts, ops pruned (contract §3.9, §4).

``status`` answers on the event loop, and is served even while recovering.
A statement there lets go of the GIL and must take it back, which under load
means waiting behind a busy writer or worker thread (up to a switch
interval, 5 ms, each time); and a count grows with the database. So
``status`` runs no statement: it reads :attr:`Counters.figures`, an
immutable value the writer replaces whole after each committed batch that
changed a count (one reference, read and written under the GIL: a reader
never sees half a batch).

How the figures stay exact:

- **Seeded once**, when the store opens and before the writer runs
  (:meth:`Counters.seed`): the ops by state from the last snapshot
  (``counts``, schema 7: the figures as of the record ``seq``, a pruned op
  counted under its final state) plus a bounded catch-up over the ops with
  a record past that seq (each counts under its state now instead of
  ``counted_state``, the state the snapshot counted it under, which a
  trigger saves at the op's first write after the snapshot); pruning
  figures from ``prune_stats``; and one count of the unknown attempts, over
  the partial index ``attempts_unknown`` (as long as the unknown attempts,
  not the attempts). A SIGKILL loses nothing the next start does not read
  back: every change after the snapshot left a record past its seq.
- **Persisted rarely** (:meth:`Counters.persist`), by the writer, in a batch
  it commits anyway, just before its COMMIT: at most about once a second
  (:data:`PERSIST_EVERY_S`), and in every batch that prunes (the catch-up
  cannot see an op whose row is gone, so no pruned op may have a record
  past the snapshot). One page, not one page in every commit that moves an
  op, as the triggers of schema 3–6 wrote.
- **Noted as applied**: :func:`note` sees each decision's changes once
  they are written (a new op is ``pending``; a :class:`~..core.changes.SetOp`
  or :class:`~..core.changes.SetAttempt` says the state it leaves,
  ``was``), the start's set-wise marks note the ops they move and, in one
  note, the attempts they make unknown (:func:`note_marked`), and a
  pruning unit notes what it pruned (:func:`note_pruned`).
  Each goes to the list of notes it is handed, the batch's
  (:class:`.writer.Tx`), which the writer cuts back when a unit rolls back.
- **Added once committed** (:meth:`Counters.add`), by the writer, before
  any caller hears of the commit: a reply is never ahead of the figures. A
  batch whose commit fails adds nothing.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from ..core import changes as ch
from .schema import LAST_SEQ

__all__ = [
    "PERSIST_EVERY_S",
    "Counters",
    "Figures",
    "Note",
    "count_afresh",
    "note",
    "note_marked",
    "note_pruned",
    "snapshot_afresh",
]

# how often, at most, the writer persists the counts (one page) while ops
# move; a pruning batch persists them whatever the time
PERSIST_EVERY_S: Final = 1.0

# a note: (what, was, now). _OP: an op left state ``was`` (None: a new op)
# for ``now``; _UNKNOWN: an attempt entered (+1) or left (-1) ``unknown``
# (``was``); _PRUNED: ``was`` ops pruned at ``now``
_OP: Final = 0
_UNKNOWN: Final = 1
_PRUNED: Final = 2
Note = tuple[int, Any, Any]
_UNKNOWN_STATE: Final = "unknown"


def note(notes: list[Note], changes: Iterable[ch.Change]) -> None:
    """Add to ``notes`` the counts ``changes`` (one decision's, just written) move."""
    for c in changes:
        if isinstance(c, ch.SetOp):
            now = c.fields.get("state")
            if now is not None:
                notes.append((_OP, str(c.was), str(now)))
        elif isinstance(c, ch.SetAttempt):
            if c.state is not None and (c.state == _UNKNOWN_STATE) != (c.was == _UNKNOWN_STATE):
                notes.append((_UNKNOWN, 1 if c.state == _UNKNOWN_STATE else -1, None))
        elif isinstance(c, ch.NewOp):
            notes.append((_OP, None, "pending"))
        elif isinstance(c, ch.NewAttempt) and c.state == _UNKNOWN_STATE:
            notes.append((_UNKNOWN, 1, None))


def note_marked(notes: list[Note], ops: Iterable[tuple[str, str]], entered_unknown: int) -> None:
    """A set-wise unit (``store/marks.py``) moved each op of ``ops`` from
    ``was`` to ``now`` and made ``entered_unknown`` attempts unknown: add to
    ``notes`` the counts :func:`note` would take from the same changes one
    by one."""
    notes.extend((_OP, was, now) for was, now in ops)
    if entered_unknown:
        notes.append((_UNKNOWN, entered_unknown, None))


def note_pruned(notes: list[Note], ops: int, at: str) -> None:
    """A pruning unit turned ``ops`` ops into tombstones at ``at`` (their
    counts by state do not move: a pruned op counts under its final state)."""
    if ops:
        notes.append((_PRUNED, ops, at))


@attrs.frozen
class Figures:
    """What ``status`` shows of the store, as of the last committed batch."""

    operations: Mapping[str, int]  # ops by state, pruned ones under their final state
    unknown_attempts: int
    pruned_ops: int  # over the database's life
    last_pruned_at: str | None

    def wire(self) -> tuple[dict[str, int], int, dict[str, Any]]:
        """``status.operations`` (states with no op left out), unknown
        attempts, and ``status.db``'s pruning figures."""
        ops = {state: n for state, n in self.operations.items() if n > 0}
        return (
            ops,
            self.unknown_attempts,
            {
                "pruned_ops": self.pruned_ops,
                "last_pruned_at": self.last_pruned_at,
            },
        )


class Counters:
    """The figures, replaced whole by the writer (see the module)."""

    def __init__(self) -> None:
        self.figures = Figures({}, 0, 0, None)
        self.persist_every_s = PERSIST_EVERY_S
        self._persisted: float | None = None  # monotonic time of the last snapshot written

    def seed(self, conn: sqlite3.Connection) -> None:
        """Read the figures from the database (before the writer runs)."""
        seq, text = conn.execute("SELECT seq, ops FROM counts WHERE id = 1").fetchone()
        ops: dict[str, int] = json.loads(text)
        # the ops written after the snapshot: each moves from the state the
        # snapshot counted (none for an op it did not know) to its own now
        for state, counted, n in conn.execute(
            "SELECT o.state, o.counted_state, count(*) FROM operations o WHERE o.id IN"
            " (SELECT e.op_id FROM events e WHERE e.seq > ? AND e.op_id IS NOT NULL)"
            " GROUP BY 1, 2",
            (seq,),
        ):
            ops[state] = ops.get(state, 0) + n
            if counted is not None:
                ops[counted] = ops.get(counted, 0) - n
        (unknown,) = conn.execute(
            "SELECT count(*) FROM attempts WHERE state = 'unknown'"
        ).fetchone()
        pruned, last = conn.execute(
            "SELECT pruned_ops, last_pruned_at FROM prune_stats WHERE id = 1"
        ).fetchone()
        self.figures = Figures(ops, unknown, pruned, last)

    def persist(self, conn: sqlite3.Connection, notes: list[Note]) -> None:
        """Write the snapshot as the batch in progress leaves the figures, if
        one is due (on the writer's thread, inside the batch's transaction,
        after its last unit): an exact snapshot commits with the changes it
        counts, or not at all."""
        if not notes:
            return
        t = time.monotonic()
        prunes = any(what == _PRUNED for what, _, _ in notes)
        last = self._persisted
        if not prunes and last is not None and t - last < self.persist_every_s:
            return
        _write_snapshot(conn, _after(self.figures, notes).operations)
        self._persisted = t

    def add(self, notes: list[Note]) -> None:
        """A batch with these notes has committed (on the writer's thread)."""
        if notes:
            self.figures = _after(self.figures, notes)


def _write_snapshot(conn: sqlite3.Connection, operations: Mapping[str, int]) -> None:
    """The snapshot: ``operations`` as of the last record handed out."""
    ops = {state: n for state, n in sorted(operations.items()) if n}
    conn.execute(
        f"UPDATE counts SET seq = {LAST_SEQ}, ops = ? WHERE id = 1",
        (json.dumps(ops, separators=(",", ":")),),
    )


def snapshot_afresh(conn: sqlite3.Connection) -> None:
    """Write the snapshot from a fresh count of every op and tombstone: for
    a database written outside the writer (a benchmark's, built by SQL or by
    units in a plain loop), what the writer would have left. Never on the
    daemon's path (it reads every op)."""
    _write_snapshot(conn, count_afresh(conn).operations)


def _after(f: Figures, notes: list[Note]) -> Figures:
    """The figures ``f`` moved by ``notes``."""
    ops = dict(f.operations)
    unknown, pruned, last = f.unknown_attempts, f.pruned_ops, f.last_pruned_at
    for what, was, now in notes:
        if what == _OP:
            if was is not None:
                ops[was] = ops.get(was, 0) - 1
            ops[now] = ops.get(now, 0) + 1
        elif what == _UNKNOWN:
            unknown += was
        else:
            pruned += was
            last = now
    return Figures(ops, unknown, pruned, last)


def count_afresh(conn: sqlite3.Connection) -> Figures:
    """The figures counted from the rows themselves, every op and tombstone
    read (for tests and checks: what :class:`Counters` must always equal)."""
    ops: dict[str, int] = {}
    for table in ("operations", "tombstones"):
        for state, n in conn.execute(f"SELECT state, count(*) FROM {table} GROUP BY state"):
            ops[state] = ops.get(state, 0) + n
    (unknown,) = conn.execute(
        "SELECT count(*) FROM attempts NOT INDEXED WHERE state = 'unknown'"
    ).fetchone()
    pruned, last = conn.execute(
        "SELECT (SELECT count(*) FROM tombstones), last_pruned_at FROM prune_stats WHERE id = 1"
    ).fetchone()
    return Figures(ops, unknown, pruned, last)
