"""The applier: a decision's changes written in order, inside the unit's
SAVEPOINT (:mod:`.writer`), and the decision's reply handed back.

The one place that turns :mod:`wardd.daemon.core.changes` into SQL. Event
records get their seq here (never one a pruned record held) and are linked
to their op's previous record (``follows``); times are stamped here.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from wardd.protocol import ClaimConflict, Internal

from ..core import changes as ch
from ..core.records import Op
from .counters import note
from .encoding import enc, enc_value, now
from .schema import COLUMNS, LAST_SEQ
from .writer import Move, Tx

__all__ = ["apply"]


NEXT_SEQ = "1 + " + LAST_SEQ


def _settable(table: str, names: frozenset[str]) -> frozenset[str]:
    """``names``, each a column of ``table`` (:data:`.schema.COLUMNS`)."""
    if not names <= set(COLUMNS[table]):
        raise AssertionError(f"{table} has no column {sorted(names - set(COLUMNS[table]))}")
    return names


# The fields each Set… change may carry: the columns it sets. A field that is
# none of these is refused (a core that names a field the store does not
# know must not lose it unseen). SetOp's ``consumed`` has no column of its
# own: the op's state says it (the loader reads it back from there).
_OP_COLUMNS = _settable(
    "operations", frozenset({"state", "cancelled", "result_epoch", "attempts", "last_seq"})
)
_OP_UNSTORED = frozenset({"consumed"})
_NEURON_COLUMNS = _settable(
    "neurons",
    frozenset({"epoch", "policy_version", "placement_generation", "placement", "placement_digest"}),
)
_PROG_COLUMNS = _settable(
    "progs",
    frozenset(
        {
            "state",
            "step_limit",
            "steps_used",
            "exhausted",
            "grant_acts",
            "grant_enabled",
            "reservation_seq",
        }
    ),
)
_BLOBS = frozenset({"placement", "grant_acts"})


def _sql_value(name: str, value: Any) -> Any:
    if name in _BLOBS:
        return enc(value)
    if isinstance(value, bool):
        return int(value)
    return value


def _set(
    conn: sqlite3.Connection,
    kind: str,
    table: str,
    allowed: frozenset[str],
    row_id: int,
    fields: Mapping[str, Any],
    extra: str = "",
    unstored: frozenset[str] = frozenset(),
) -> None:
    """UPDATE the columns ``fields`` names (and ``extra``, SQL) of one row
    of ``table``; ``kind`` is the change that carries them."""
    cols = []
    for name in fields:
        if name in allowed:
            cols.append(name)
        elif name not in unstored:
            raise Internal(f"the store has no field {name!r} of a {kind} ({table})")
    sets = [f"{k} = ?" for k in cols]
    if extra:
        sets.append(extra)
    if not sets:
        return
    conn.execute(
        f"UPDATE {table} SET {', '.join(sets)} WHERE id = ?",
        (*(_sql_value(k, fields[k]) for k in cols), row_id),
    )


# a new attempt's row: every column of the table, in its order (its INSERT's columns)
_ATTEMPT_ROW = COLUMNS["attempts"]
_INSERT_ATTEMPT = (
    f"INSERT INTO attempts({', '.join(_ATTEMPT_ROW)}) VALUES ({', '.join('?' * len(_ATTEMPT_ROW))})"
)


class _Pending:
    """What one apply defers to its end. A new attempt's row is inserted
    once, as the decision leaves it (``invoke``'s attempt, claim and move
    to running are one INSERT: its state's index never sees it prepared).
    Each op's own row is written once (its fields and the seq of its last
    record), after its attempts and records, so that a decision that moves
    an op twice (prepared, then running) costs one UPDATE and the op's
    triggers see only its final state (contract §3.3: the projection
    follows the records)."""

    def __init__(self, at: str, moves: list[Move]) -> None:
        self.at = at
        self.moves = moves  # the batch's (Tx.moves): each attempt move applied
        self.ops: dict[int, dict[str, Any]] = {}
        self.last_seq: dict[int, int | None] = {}
        self.attempts: dict[int, dict[str, Any]] = {}  # new ones, by attempt id
        self.attempt_ids: dict[tuple[int, int], int] = {}  # (op id, number) -> id

    def flush(self, conn: sqlite3.Connection) -> None:
        for row in self.attempts.values():
            conn.execute(_INSERT_ATTEMPT, tuple(row.get(k) for k in _ATTEMPT_ROW))
        for op_id, fields in self.ops.items():
            _set(conn, "SetOp", "operations", _OP_COLUMNS, op_id, fields, unstored=_OP_UNSTORED)


def apply(tx: Tx, decision: ch.Decision, loaded: Op | None = None) -> Any:
    """Write ``decision.changes`` in order on ``tx.conn``, adding its attempt
    moves and its notes to ``tx``'s; return ``decision.reply``.

    ``loaded``: the op the decision was made on, loaded in this same unit
    (so its ``last_seq`` is the stored one): its next record is linked to
    it without reading it again."""
    conn = tx.conn
    pending = _Pending(now(), tx.moves)
    if loaded is not None:
        pending.last_seq[loaded.id] = loaded.last_seq
    for c in decision.changes:
        _APPLY[type(c)](conn, c, pending)
    pending.flush(conn)
    note(tx.notes, decision.changes)  # status's counts, added once the batch commits
    return decision.reply


def _new_neuron(conn: sqlite3.Connection, c: ch.NewNeuron, p: _Pending) -> None:
    conn.execute(
        "INSERT INTO neurons(id, neuron, epoch, policy_version, placement_generation, created_at)"
        " VALUES (?, ?, 1, 0, 0, ?)",
        (c.id, c.neuron, p.at),
    )


def _set_neuron(conn: sqlite3.Connection, c: ch.SetNeuron, p: _Pending) -> None:
    _set(conn, "SetNeuron", "neurons", _NEURON_COLUMNS, c.neuron_id, c.fields)


def _new_prog(conn: sqlite3.Connection, c: ch.NewProg, p: _Pending) -> None:
    conn.execute(
        "INSERT INTO progs(id, neuron_id, prog, state, step_limit) VALUES (?,?,?, 'active', ?)",
        (c.id, c.neuron_id, c.prog, c.step_limit),
    )


def _set_prog(conn: sqlite3.Connection, c: ch.SetProg, p: _Pending) -> None:
    extra = []
    if c.bump_version:  # contract §3.1: a state change; the version never comes back
        extra.append("state_version = state_version + 1")
    if c.reserved_delta:
        extra.append(f"steps_reserved = steps_reserved + {int(c.reserved_delta)}")
    _set(conn, "SetProg", "progs", _PROG_COLUMNS, c.prog_id, c.fields, ", ".join(extra))


def _new_op(conn: sqlite3.Connection, c: ch.NewOp, p: _Pending) -> None:
    conn.execute(
        "INSERT INTO operations(id, neuron_id, op, prog_id, act, args, state)"
        " VALUES (?,?,?,?,?,?, 'pending')",
        (c.id, c.neuron_id, c.op, c.prog_id, c.act, c.args),
    )


def _set_op(conn: sqlite3.Connection, c: ch.SetOp, p: _Pending) -> None:
    p.ops.setdefault(c.op_id, {}).update(c.fields)


def _new_attempt(conn: sqlite3.Connection, c: ch.NewAttempt, p: _Pending) -> None:
    """A new attempt, written at the end of the decision (:class:`_Pending`);
    its descriptor is kept once per digest (schema 6), named by the binding's
    ``digest``."""
    descriptor = enc(c.descriptor)
    if descriptor is not None and c.digest is not None:
        conn.execute(
            "INSERT OR IGNORE INTO descriptors(digest, descriptor) VALUES (?, ?)",
            (c.digest, descriptor),
        )
        descriptor = None
    p.attempt_ids[(c.op_id, c.attempt)] = c.id
    p.attempts[c.id] = {
        "id": c.id,
        "op_id": c.op_id,
        "attempt": c.attempt,
        "kind": c.kind,
        "epoch": c.epoch,
        "policy_version": c.policy_version,
        "placement_generation": c.placement_generation,
        "descriptor": descriptor,
        "digest": c.digest,
        "worker": c.worker,
        "boot": c.boot,
        "created_at": p.at,
        "state": c.state.value,
        "evidence": enc(c.evidence),
    }


def _set_attempt(conn: sqlite3.Connection, c: ch.SetAttempt, p: _Pending) -> None:
    fields: dict[str, Any] = {}
    if c.state is not None:
        fields["state"] = c.state.value
        if c.act is not None:
            p.moves.append((c.act, c.state.value))
    if c.reason is not None:
        fields["reason"] = c.reason
    if c.evidence is not None:
        fields["evidence"] = enc(c.evidence)
    new = p.attempt_ids.get((c.op_id, c.attempt))
    if new is not None:  # created by this decision: its row is not written yet
        p.attempts[new].update(fields)
        return
    conn.execute(
        f"UPDATE attempts SET {', '.join(f'{k} = ?' for k in fields)}"
        " WHERE op_id = ? AND attempt = ?",
        (*fields.values(), c.op_id, c.attempt),
    )


def _new_claim(conn: sqlite3.Connection, c: ch.NewClaim, p: _Pending) -> None:
    """The claim's columns of the attempt's row (schema 6), set once: an
    attempt already claimed matches no row (the claim's CAS)."""
    new = p.attempts.get(c.attempt_id)
    if new is not None:  # created by this decision (invoke): claimed as it is written
        new.update(
            claim_generation=c.placement_generation,
            claim_digest=c.digest,
            claim_worker=c.worker,
            claim_boot=c.boot,
            claim_info=enc(c.claim_info),
            claimed_at=p.at,
        )
        return
    cur = conn.execute(
        "UPDATE attempts SET claim_generation = ?, claim_digest = ?, claim_worker = ?,"
        " claim_boot = ?, claim_info = ?, claimed_at = ? WHERE id = ? AND claimed_at IS NULL",
        (
            c.placement_generation,
            c.digest,
            c.worker,
            c.boot,
            enc(c.claim_info),
            p.at,
            c.attempt_id,
        ),
    )
    if cur.rowcount != 1:  # the one claim of an attempt
        raise ClaimConflict("the attempt is already claimed")


def _new_outcome(conn: sqlite3.Connection, c: ch.NewOutcome, p: _Pending) -> None:
    """The outcome's columns of the attempt's row (schema 6); a trigger
    refuses a second outcome of an attempt."""
    new = p.attempts.get(c.attempt_id)
    if new is not None:  # created by this decision: its row is not written yet
        new.update(
            outcome_status=c.status.value,
            outcome_value=enc_value(c.value),
            outcome_error=c.error,
            outcome_source=c.source,
            outcome_at=p.at,
        )
        return
    cur = conn.execute(
        "UPDATE attempts SET outcome_status = ?, outcome_value = ?, outcome_error = ?,"
        " outcome_source = ?, outcome_at = ? WHERE id = ?",
        (c.status.value, enc_value(c.value), c.error, c.source, p.at, c.attempt_id),
    )
    if cur.rowcount != 1:
        raise Internal(f"no attempt {c.attempt_id} for its outcome")


def _new_reservation(conn: sqlite3.Connection, c: ch.NewReservation, p: _Pending) -> None:
    conn.execute(
        "INSERT INTO reservations(prog_id, reservation, steps, state, number)"
        " VALUES (?,?,?, 'open', ?)",
        (c.prog_id, c.reservation, c.steps, c.number),
    )


def _set_reservation(conn: sqlite3.Connection, c: ch.SetReservation, p: _Pending) -> None:
    conn.execute(
        "UPDATE reservations SET state = ?, settled = ? WHERE id = ?",
        (c.state, c.settled, c.reservation_id),
    )


def _release(conn: sqlite3.Connection, c: ch.ReleaseReservations, p: _Pending) -> None:
    where = "prog_id = ? AND state = 'open'"
    args: tuple[Any, ...] = (c.prog_id,)
    if c.before is not None:
        where += " AND number < ?"
        args += (c.before,)
    conn.execute(f"UPDATE reservations SET state = 'released' WHERE {where}", args)


def _append_event(conn: sqlite3.Connection, c: ch.AppendEvent, p: _Pending) -> None:
    """One event record; ``follows`` is the op's previous record (null for
    its first and for per-neuron records)."""
    follows = None
    if c.op_id is not None:
        if c.op_id in p.last_seq:
            follows = p.last_seq[c.op_id]
        else:
            (follows,) = conn.execute(
                "SELECT last_seq FROM operations WHERE id = ?", (c.op_id,)
            ).fetchone()
    cur = conn.execute(
        "INSERT INTO events(seq, at, kind, neuron_id, op_id, attempt, follows, data)"
        f" VALUES ({NEXT_SEQ}, ?, ?, ?, ?, ?, ?, ?)",
        (p.at, c.kind, c.neuron_id, c.op_id, c.attempt, follows, enc(c.data)),
    )
    if c.op_id is not None:
        p.last_seq[c.op_id] = cur.lastrowid
        p.ops.setdefault(c.op_id, {})["last_seq"] = cur.lastrowid


_APPLY: dict[type, Any] = {
    ch.NewNeuron: _new_neuron,
    ch.SetNeuron: _set_neuron,
    ch.NewProg: _new_prog,
    ch.SetProg: _set_prog,
    ch.NewOp: _new_op,
    ch.SetOp: _set_op,
    ch.NewAttempt: _new_attempt,
    ch.SetAttempt: _set_attempt,
    ch.NewClaim: _new_claim,
    ch.NewOutcome: _new_outcome,
    ch.NewReservation: _new_reservation,
    ch.SetReservation: _set_reservation,
    ch.ReleaseReservations: _release,
    ch.AppendEvent: _append_event,
}
