"""Loaders: rows in, the core's typed records out (:mod:`wardd.daemon.core.records`).

Each loader reads on the connection it is given: the writer's, inside a
unit (the records a decision reads are those it then changes, in the same
transaction), or a reader's, inside one snapshot.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from wardd.protocol import AttemptState, OpState, ProgState

from ..core.records import (
    Attempt,
    Grant,
    Neuron,
    Op,
    OpView,
    Outcome,
    Prog,
    ProgView,
    Reservation,
    Tombstone,
)
from .encoding import dec
from .schema import COLUMNS

__all__ = [
    "LOADED",
    "Columns",
    "neuron",
    "next_id",
    "op_attempts",
    "op_id_of_attempt",
    "op_named",
    "op_view",
    "op_view_by_id",
    "open_ops_of_prog",
    "open_reservations",
    "prog_view",
]

# Row ids never handed out again once a pruned record held them (contract §2:
# seq is global and increasing; an attempt id names one attempt for ever; a
# tombstone keeps its op's row id, which list_operations pages by).
_NEXT_ID = {
    "attempts": "SELECT 1 + max(coalesce((SELECT max(id) FROM attempts), 0),"
    " coalesce((SELECT attempt_hw FROM prune_stats WHERE id = 1), 0))",
    "operations": "SELECT 1 + max(coalesce((SELECT max(id) FROM operations), 0),"
    " coalesce((SELECT max(id) FROM tombstones), 0))",
    "neurons": "SELECT 1 + coalesce((SELECT max(id) FROM neurons), 0)",
    "progs": "SELECT 1 + coalesce((SELECT max(id) FROM progs), 0)",
}


_ATTEMPT_STATE = {s.value: s for s in AttemptState}
_OP_STATE = {s.value: s for s in OpState}
_PROG_STATE = {s.value: s for s in ProgState}


def next_id(conn: sqlite3.Connection, table: str) -> int:
    (value,) = conn.execute(_NEXT_ID[table]).fetchone()
    return int(value)


class Columns:
    """The columns one builder reads of one table, by name.

    ``names`` are read, in this order (``sql``: the SELECT list, each
    column as ``alias.name``); ``unread`` are the table's other columns,
    named so that a column the schema adds is never left out unseen: the
    two together must be the table's columns (:data:`.schema.COLUMNS`),
    or this module does not import."""

    __slots__ = ("alias", "at", "names", "sql", "table", "unread", "width")

    def __init__(
        self, table: str, alias: str, names: tuple[str, ...], unread: tuple[str, ...] = ()
    ) -> None:
        if sorted(names + unread) != sorted(COLUMNS[table]):
            raise AssertionError(f"{table}: read {names} and unread {unread} are not its columns")
        self.table = table
        self.alias = alias
        self.names = names
        self.unread = unread
        self.sql = ", ".join(f"{alias}.{name}" for name in names)
        self.at = {name: i for i, name in enumerate(names)}
        self.width = len(names)


def _layout(*parts: Columns) -> tuple[dict[str, int], ...]:
    """Each part's index map in a row that holds ``parts``' columns one
    after the other (the maps are made once, here: builders index by name
    and never slice)."""
    maps = []
    at = 0
    for part in parts:
        maps.append({name: at + i for name, i in part.at.items()})
        at += part.width
    return tuple(maps)


def _width(*parts: Columns) -> int:
    return sum(part.width for part in parts)


def _select(*parts: Columns) -> str:
    return ", ".join(part.sql for part in parts)


# what each record's builder reads (and what it leaves), the SQL's order
NEURON = Columns(
    "neurons",
    "n",
    ("id", "neuron", "epoch", "policy_version", "placement_generation", "placement")
    + ("placement_digest",),
    unread=("created_at", "last_seq"),
)
OP = Columns(
    "operations",
    "o",
    ("id", "neuron_id", "op", "prog_id", "act", "args", "state", "attempts", "cancelled")
    + ("result_epoch", "last_seq"),
    # retention's and the counts' (schema 7): no decision reads them
    unread=("ended_at", "counted_state"),
)
PROG = Columns(
    "progs",
    "p",
    ("id", "neuron_id", "prog", "state", "state_version", "step_limit", "steps_used")
    + ("steps_reserved", "exhausted", "grant_acts", "grant_enabled", "reservation_seq"),
)
ATTEMPT = Columns(
    "attempts",
    "a",
    ("id", "op_id", "attempt", "kind", "epoch", "policy_version", "placement_generation")
    + ("digest", "worker", "boot", "state", "reason", "evidence"),
    # the descriptor is kept with the binding, for the record (since schema 6 once
    # per digest, in `descriptors`, and NULL in the row); created_at is the reads';
    # the claim's and the outcome's columns (schema 6) are read through their views
    unread=("descriptor", "created_at")
    + ("claim_generation", "claim_digest", "claim_worker", "claim_boot", "claim_info")
    + ("claimed_at", "outcome_status", "outcome_value", "outcome_error", "outcome_source")
    + ("outcome_at",),
)
OUTCOME = Columns(
    "outcomes", "oc", ("status", "value", "error", "source"), unread=("attempt_id", "at")
)
RESERVATION = Columns(
    "reservations", "r", ("id", "prog_id", "reservation", "steps", "state", "settled", "number")
)
TOMBSTONE = Columns(
    "tombstones",
    "t",
    ("prog_id", "act", "args_digest", "state"),
    unread=("id", "neuron_id", "op", "ended_at", "pruned_at"),  # the reads' (prune)
)
LOADED = (NEURON, OP, PROG, ATTEMPT, OUTCOME, RESERVATION, TOMBSTONE)

_N = NEURON.at
_O = OP.at
_P = PROG.at
_A, _OC = _layout(ATTEMPT, OUTCOME)  # an attempt and its outcome in one row
_NEURON = f"SELECT {NEURON.sql} FROM neurons n"
_PROG = f"SELECT {PROG.sql} FROM progs p"
_OP = f"SELECT {OP.sql} FROM operations o"


def _neuron(row: Any, i: dict[str, int] = _N) -> Neuron:
    return Neuron(
        id=row[i["id"]],
        neuron=row[i["neuron"]],
        epoch=row[i["epoch"]],
        policy_version=row[i["policy_version"]],
        placement_generation=row[i["placement_generation"]],
        placement=dec(row[i["placement"]]),
        placement_digest=row[i["placement_digest"]],
    )


def neuron(conn: sqlite3.Connection, name: str) -> Neuron | None:
    row = conn.execute(_NEURON + " WHERE n.neuron = ?", (name,)).fetchone()
    return None if row is None else _neuron(row)


def _prog(row: Any, i: dict[str, int] = _P) -> Prog:
    enabled = row[i["grant_enabled"]]
    grant = None if enabled is None else Grant(frozenset(dec(row[i["grant_acts"]])), bool(enabled))
    return Prog(
        id=row[i["id"]],
        neuron_id=row[i["neuron_id"]],
        prog=row[i["prog"]],
        state=_PROG_STATE[row[i["state"]]],
        state_version=row[i["state_version"]],
        step_limit=row[i["step_limit"]],
        steps_used=row[i["steps_used"]],
        steps_reserved=row[i["steps_reserved"]],
        exhausted=bool(row[i["exhausted"]]),
        grant=grant,
        reservation_seq=row[i["reservation_seq"]],
    )


def _some_prog(row: Any) -> Prog | None:
    return None if row is None else _prog(row)


def _op(row: Any, i: dict[str, int] = _O) -> Op:
    state = _OP_STATE[row[i["state"]]]
    return Op(
        id=row[i["id"]],
        neuron_id=row[i["neuron_id"]],
        op=row[i["op"]],
        prog_id=row[i["prog_id"]],
        act=row[i["act"]],
        args=bytes(row[i["args"]]),
        state=state,
        attempts=row[i["attempts"]],
        cancelled=bool(row[i["cancelled"]]),
        # the schema keeps no column of its own for it (a schema change is
        # for another release): consumed is terminal, so the state says it
        consumed=state == OpState.CONSUMED,
        result_epoch=row[i["result_epoch"]],
        last_seq=row[i["last_seq"]],
    )


def _some_op(row: Any) -> Op | None:
    return None if row is None else _op(row)


# an attempt and its outcome (None: none yet), in one row
_ATTEMPT_OUTCOME = _select(ATTEMPT, OUTCOME)
_ATTEMPT = (
    f"SELECT {_ATTEMPT_OUTCOME} FROM attempts a LEFT JOIN outcomes oc ON oc.attempt_id = a.id"
)


def _attempt(
    row: Any, a: dict[str, int] = _A, oc: dict[str, int] = _OC
) -> tuple[Attempt, Outcome | None]:
    """An attempt and its outcome from a row that holds both (LEFT JOIN)."""
    state = _ATTEMPT_STATE[row[a["state"]]]
    kind = row[a["kind"]]
    source = row[oc["source"]]
    outcome = None
    if source is not None:
        outcome = Outcome(
            attempt_id=row[a["id"]],
            status=_ATTEMPT_STATE[row[oc["status"]]],
            value=dec(row[oc["value"]]),
            error=row[oc["error"]],
            source=source,
        )
    attempt = Attempt(
        id=row[a["id"]],
        op_id=row[a["op_id"]],
        attempt=row[a["attempt"]],
        kind=kind,
        epoch=row[a["epoch"]],
        policy_version=row[a["policy_version"]],
        placement_generation=row[a["placement_generation"]],
        digest=row[a["digest"]],
        worker=row[a["worker"]],
        boot=row[a["boot"]],
        state=state,
        reason=row[a["reason"]],
        evidence=dec(row[a["evidence"]]),
        # recorded: only a receipt or a reconcile resolves an unknown
        # attempt (core.states.ATTEMPT_MOVES), and their outcomes say so
        ever_unknown=state == AttemptState.UNKNOWN
        or kind == "manual"
        or source in ("receipt", "reconcile"),
    )
    return attempt, outcome


def _attempts(rows: list[Any]) -> tuple[tuple[Attempt, ...], dict[int, Outcome]]:
    attempts = []
    outcomes: dict[int, Outcome] = {}
    for row in rows:
        attempt, outcome = _attempt(row)
        if outcome is not None:
            outcomes[attempt.attempt] = outcome
        attempts.append(attempt)
    return tuple(attempts), outcomes


_TOMBSTONE = f"SELECT {TOMBSTONE.sql} FROM tombstones t WHERE t.neuron_id = ? AND t.op = ?"


def _tombstone(conn: sqlite3.Connection, neuron_id: int, op: str) -> Tombstone | None:
    row = conn.execute(_TOMBSTONE, (neuron_id, op)).fetchone()
    if row is None:
        return None
    i = TOMBSTONE.at
    return Tombstone(
        op=op,
        prog_id=row[i["prog_id"]],
        act=row[i["act"]],
        args_digest=bytes(row[i["args_digest"]]),
        state=_OP_STATE[row[i["state"]]],
    )


def _pruned_view(conn: sqlite3.Connection, n: Neuron, name: str) -> OpView:
    """No op ``name`` of ``n``: its tombstone (and prog) if it was pruned."""
    tomb = _tombstone(conn, n.id, name)
    prog = None
    if tomb is not None:
        prog = _some_prog(conn.execute(_PROG + " WHERE p.id = ?", (tomb.prog_id,)).fetchone())
    return OpView(neuron=n, name=name, op=None, prog=prog, tombstone=tomb)


# the neuron, its op and the op's prog in one statement (the hot path's first
# read), and with _NEXT the id the next new attempt gets (a decision that
# creates one); the op's and the prog's are NULL when the op is not there
_JOINED = _select(NEURON, OP, PROG)
_JN, _JO, _JP = _layout(NEURON, OP, PROG)
_NEXT = _width(NEURON, OP, PROG)
_NEURON_OP_PROG = (
    f"SELECT {_JOINED} FROM neurons n"
    " LEFT JOIN operations o ON o.neuron_id = n.id AND o.op = ?"
    " LEFT JOIN progs p ON p.id = o.prog_id WHERE n.neuron = ?"
)
_NEURON_OP_PROG_NEXT = _NEURON_OP_PROG.replace(
    " FROM neurons n", f", ({_NEXT_ID['attempts']}) FROM neurons n", 1
)
_OP_NEURON_PROG = (
    f"SELECT {_JOINED} FROM operations o JOIN neurons n ON n.id = o.neuron_id"
    " JOIN progs p ON p.id = o.prog_id WHERE o.id = ?"
)


def _joined(conn: sqlite3.Connection, row: Any, name: str, next_attempt: bool) -> OpView:
    if row is None:
        return OpView(neuron=None, name=name, op=None, prog=None)
    n = _neuron(row, _JN)
    if row[_JO["id"]] is None:
        return _pruned_view(conn, n, name)
    op = _op(row, _JO)
    attempts, outcomes = _attempts(
        conn.execute(_ATTEMPT + " WHERE a.op_id = ? ORDER BY a.attempt", (op.id,)).fetchall()
    )
    return OpView(
        neuron=n,
        name=name,
        op=op,
        prog=_prog(row, _JP),
        attempts=attempts,
        outcomes=outcomes,
        next_attempt_id=row[_NEXT] if next_attempt else 0,
    )


def op_view(
    conn: sqlite3.Connection, neuron_name: str, op: str, *, next_attempt: bool = False
) -> OpView:
    """The op ``op`` of the neuron ``neuron_name``, with what decisions about it read."""
    sql = _NEURON_OP_PROG_NEXT if next_attempt else _NEURON_OP_PROG
    row = conn.execute(sql, (op, neuron_name)).fetchone()
    return _joined(conn, row, op, next_attempt)


def op_view_by_id(conn: sqlite3.Connection, op_id: int) -> OpView:
    """The op with row id ``op_id`` (an attempt's op); ``op`` None once pruned."""
    row = conn.execute(_OP_NEURON_PROG, (op_id,)).fetchone()
    if row is None:
        return OpView(neuron=None, name="", op=None, prog=None)
    return _joined(conn, row, row[_JO["op"]], False)


def op_named(conn: sqlite3.Connection, n: Neuron | None, name: str) -> OpView:
    """The op ``name`` of ``n`` (or its tombstone), without its attempts or
    prog: what ``submit`` compares a new op with, the neuron already loaded."""
    if n is None:
        return OpView(neuron=None, name=name, op=None, prog=None)
    op = _some_op(
        conn.execute(_OP + " WHERE o.neuron_id = ? AND o.op = ?", (n.id, name)).fetchone()
    )
    if op is None:
        return _pruned_view(conn, n, name)
    return OpView(neuron=n, name=name, op=op, prog=None)


def op_attempts(conn: sqlite3.Connection, op_id: int) -> OpView:
    """The op with row id ``op_id`` and its attempts only (neuron and prog
    not loaded: None), for the decisions that read nothing else: an
    outcome and a void."""
    o = _some_op(conn.execute(_OP + " WHERE o.id = ?", (op_id,)).fetchone())
    if o is None:
        return OpView(neuron=None, name="", op=None, prog=None)
    attempts, outcomes = _attempts(
        conn.execute(_ATTEMPT + " WHERE a.op_id = ? ORDER BY a.attempt", (op_id,)).fetchall()
    )
    return OpView(neuron=None, name=o.op, op=o, prog=None, attempts=attempts, outcomes=outcomes)


def op_id_of_attempt(conn: sqlite3.Connection, attempt_id: int) -> int | None:
    row = conn.execute("SELECT op_id FROM attempts WHERE id = ?", (attempt_id,)).fetchone()
    return None if row is None else int(row[0])


# an op and one of its attempts (with its outcome), in one row: _OP_ATTEMPT
# then the table clauses; _op_attempt() reads such a row
_OP_ATTEMPT_COLUMNS = _select(OP, ATTEMPT, OUTCOME)
_OP_ATTEMPT = f"SELECT {_OP_ATTEMPT_COLUMNS}"
_OAO, _OAA, _OAOC = _layout(OP, ATTEMPT, OUTCOME)


def _op_attempt(row: Any) -> tuple[Op, Attempt | None]:
    op = _op(row, _OAO)
    if row[_OAA["id"]] is None:  # no attempt (a LEFT JOIN found none)
        return op, None
    attempt, _ = _attempt(row, _OAA, _OAOC)
    return op, attempt


def _prepared(
    conn: sqlite3.Connection, where: str, params: tuple[Any, ...]
) -> tuple[tuple[Op, Attempt], ...]:
    out = []
    for row in conn.execute(
        _OP_ATTEMPT + " FROM attempts a LEFT JOIN outcomes oc ON oc.attempt_id = a.id"
        " JOIN operations o ON o.id = a.op_id"
        f" WHERE a.state = 'prepared' AND {where} ORDER BY a.id",
        params,
    ).fetchall():
        op, attempt = _op_attempt(row)
        assert attempt is not None
        out.append((op, attempt))
    return tuple(out)


_RESERVATION = (
    f"SELECT {RESERVATION.sql} FROM reservations r WHERE r.prog_id = ? AND r.reservation = ?"
)


def _reservation(row: Any, i: dict[str, int] = RESERVATION.at) -> Reservation:
    return Reservation(
        id=row[i["id"]],
        prog_id=row[i["prog_id"]],
        reservation=row[i["reservation"]],
        steps=row[i["steps"]],
        state=row[i["state"]],
        settled=row[i["settled"]],
        number=row[i["number"]],
    )


def prog_view(
    conn: sqlite3.Connection,
    neuron_name: str,
    prog: str,
    *,
    prepared: str | None = None,
    reservation: str | None = None,
    open_counts: bool = False,
) -> ProgView:
    """The prog ``prog`` of the neuron (``prog`` may be "" for a neuron-wide
    write); ``prepared``: "neuron" or "prog", the prepared attempts a write
    may void; ``reservation``: the one the request names; ``open_counts``:
    what an archive checks."""
    n = neuron(conn, neuron_name)
    if n is None:
        return ProgView(neuron=None, name=prog, prog=None)
    p = _some_prog(
        conn.execute(_PROG + " WHERE p.neuron_id = ? AND p.prog = ?", (n.id, prog)).fetchone()
    )
    pairs: tuple[tuple[Op, Attempt], ...] = ()
    if prepared == "neuron":
        pairs = _prepared(conn, "o.neuron_id = ?", (n.id,))
    elif prepared == "prog" and p is not None:
        pairs = _prepared(conn, "o.prog_id = ?", (p.id,))
    r = None
    if reservation is not None and p is not None:
        row = conn.execute(_RESERVATION, (p.id, reservation)).fetchone()
        if row is not None:
            r = _reservation(row)
    ops = atts = 0
    if open_counts and p is not None:
        (ops,) = conn.execute(
            "SELECT count(*) FROM operations WHERE prog_id = ?"
            " AND state NOT IN ('consumed', 'cancelled')",
            (p.id,),
        ).fetchone()
        (atts,) = conn.execute(
            "SELECT count(*) FROM attempts a JOIN operations o ON o.id = a.op_id"
            " WHERE o.prog_id = ? AND a.state IN ('running', 'unknown')",
            (p.id,),
        ).fetchone()
    return ProgView(
        neuron=n,
        name=prog,
        prog=p,
        prepared=pairs,
        reservation=r,
        open_ops=ops,
        open_attempts=atts,
    )


def open_ops_of_prog(
    conn: sqlite3.Connection, prog_id: int
) -> tuple[tuple[Op, Attempt | None], ...]:
    """The prog's ops not consumed or cancelled, each with its latest attempt."""
    return tuple(
        _op_attempt(row)
        for row in conn.execute(
            _OP_ATTEMPT + " FROM operations o"
            " LEFT JOIN attempts a ON a.op_id = o.id AND a.attempt = o.attempts"
            " LEFT JOIN outcomes oc ON oc.attempt_id = a.id"
            " WHERE o.prog_id = ? AND o.state NOT IN ('consumed', 'cancelled') ORDER BY o.id",
            (prog_id,),
        ).fetchall()
    )


def open_reservations(conn: sqlite3.Connection, prog_id: int) -> tuple[tuple[int, int], ...]:
    """(number, steps) of the prog's open reservations."""
    return tuple(
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "SELECT number, steps FROM reservations WHERE prog_id = ? AND state = 'open'",
            (prog_id,),
        ).fetchall()
    )
