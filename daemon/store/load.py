"""Loaders: rows in, the core's typed records out (:mod:`wardd.daemon.core.records`).

Each loader reads on the connection it is given: the writer's, inside a
unit (the records a decision reads are those it then changes, in the same
transaction), or a reader's, inside one snapshot.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import cbor2

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

__all__ = [
    "neuron",
    "op_attempts",
    "op_id_of_attempt",
    "op_named",
    "next_id",
    "op_view",
    "op_view_by_id",
    "open_before",
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


def _dec(blob: bytes | None) -> Any:
    return None if blob is None else cbor2.loads(blob)


def next_id(conn: sqlite3.Connection, table: str) -> int:
    (value,) = conn.execute(_NEXT_ID[table]).fetchone()
    return int(value)


def _columns(alias: str, names: str) -> str:
    return ", ".join(f"{alias}.{name}" for name in names.split())


# each record's columns, in the order its builder reads them
_N = _columns("n", "id neuron epoch policy_version placement_generation placement placement_digest")
_O = _columns(
    "o", "id neuron_id op prog_id act args state attempts cancelled result_epoch last_seq"
)
_P = _columns(
    "p",
    "id neuron_id prog state state_version step_limit steps_used steps_reserved exhausted"
    " grant_acts grant_enabled reservation_seq",
)
_NEURON = f"SELECT {_N} FROM neurons n"
_PROG = f"SELECT {_P} FROM progs p"
_OP = f"SELECT {_O} FROM operations o"


def _neuron(row: Any) -> Neuron | None:
    if row is None:
        return None
    return Neuron(
        id=row[0],
        neuron=row[1],
        epoch=row[2],
        policy_version=row[3],
        placement_generation=row[4],
        placement=_dec(row[5]),
        placement_digest=row[6],
    )


def neuron(conn: sqlite3.Connection, name: str) -> Neuron | None:
    return _neuron(conn.execute(_NEURON + " WHERE n.neuron = ?", (name,)).fetchone())


def _prog(row: Any) -> Prog | None:
    if row is None:
        return None
    grant = None if row[10] is None else Grant(frozenset(_dec(row[9])), bool(row[10]))
    return Prog(
        id=row[0],
        neuron_id=row[1],
        prog=row[2],
        state=_PROG_STATE[row[3]],
        state_version=row[4],
        step_limit=row[5],
        steps_used=row[6],
        steps_reserved=row[7],
        exhausted=bool(row[8]),
        grant=grant,
        reservation_seq=row[11],
    )


def _op(row: Any) -> Op | None:
    if row is None:
        return None
    state = _OP_STATE[row[6]]
    return Op(
        id=row[0],
        neuron_id=row[1],
        op=row[2],
        prog_id=row[3],
        act=row[4],
        args=bytes(row[5]),
        state=state,
        attempts=row[7],
        cancelled=bool(row[8]),
        # the schema keeps no column of its own for it (a schema change is
        # for another release): consumed is terminal, so the state says it
        consumed=state == OpState.CONSUMED,
        result_epoch=row[9],
        last_seq=row[10],
    )


_ATTEMPT_COLUMNS = (
    "a.id, a.op_id, a.attempt, a.kind, a.epoch, a.policy_version,"
    " a.placement_generation, a.digest, a.worker, a.boot, a.state, a.reason, a.evidence,"
    " oc.status, oc.value, oc.error, oc.source"
)
_ATTEMPT = (
    f"SELECT {_ATTEMPT_COLUMNS} FROM attempts a LEFT JOIN outcomes oc ON oc.attempt_id = a.id"
)


def _attempts(rows: list[Any]) -> tuple[tuple[Attempt, ...], dict[int, Outcome]]:
    attempts = []
    outcomes: dict[int, Outcome] = {}
    for r in rows:
        state = _ATTEMPT_STATE[r[10]]
        source = r[16]
        if source is not None:
            outcomes[r[2]] = Outcome(
                attempt_id=r[0],
                status=_ATTEMPT_STATE[r[13]],
                value=_dec(r[14]),
                error=r[15],
                source=source,
            )
        attempts.append(
            Attempt(
                id=r[0],
                op_id=r[1],
                attempt=r[2],
                kind=r[3],
                epoch=r[4],
                policy_version=r[5],
                placement_generation=r[6],
                digest=r[7],
                worker=r[8],
                boot=r[9],
                state=state,
                reason=r[11],
                evidence=_dec(r[12]),
                # recorded: only a receipt or a reconcile resolves an unknown
                # attempt (core.states.ATTEMPT_MOVES), and their outcomes say so
                ever_unknown=state == AttemptState.UNKNOWN
                or r[3] == "manual"
                or source in ("receipt", "reconcile"),
            )
        )
    return tuple(attempts), outcomes


def _tombstone(conn: sqlite3.Connection, neuron_id: int, op: str) -> Tombstone | None:
    row = conn.execute(
        "SELECT prog_id, act, args_digest, state FROM tombstones WHERE neuron_id = ? AND op = ?",
        (neuron_id, op),
    ).fetchone()
    if row is None:
        return None
    return Tombstone(
        op=op, prog_id=row[0], act=row[1], args_digest=bytes(row[2]), state=OpState(row[3])
    )


def _pruned_view(conn: sqlite3.Connection, n: Neuron, name: str) -> OpView:
    """No op ``name`` of ``n``: its tombstone (and prog) if it was pruned."""
    tomb = _tombstone(conn, n.id, name)
    prog = None
    if tomb is not None:
        prog = _prog(conn.execute(_PROG + " WHERE p.id = ?", (tomb.prog_id,)).fetchone())
    return OpView(neuron=n, name=name, op=None, prog=prog, tombstone=tomb)


# the neuron, its op and the op's prog in one statement (the hot path's first read)
_NEURON_OP_PROG = (
    f"SELECT {_N}, {_O}, {_P} FROM neurons n"
    " LEFT JOIN operations o ON o.neuron_id = n.id AND o.op = ?"
    " LEFT JOIN progs p ON p.id = o.prog_id WHERE n.neuron = ?"
)
# the same, and the id the next new attempt gets (a decision that creates one)
_NEURON_OP_PROG_NEXT = _NEURON_OP_PROG.replace(
    f"{_P} FROM", f"{_P}, ({_NEXT_ID['attempts']}) FROM", 1
)
_OP_NEURON_PROG = (
    f"SELECT {_N}, {_O}, {_P} FROM operations o JOIN neurons n ON n.id = o.neuron_id"
    " JOIN progs p ON p.id = o.prog_id WHERE o.id = ?"
)


def _joined(conn: sqlite3.Connection, row: Any, name: str, next_attempt: bool) -> OpView:
    n = _neuron(None if row is None else row[0:7])
    if n is None:
        return OpView(neuron=None, name=name, op=None, prog=None)
    op = None if row[7] is None else _op(row[7:18])
    if op is None:
        return _pruned_view(conn, n, name)
    attempts, outcomes = _attempts(
        conn.execute(_ATTEMPT + " WHERE a.op_id = ? ORDER BY a.attempt", (op.id,)).fetchall()
    )
    return OpView(
        neuron=n,
        name=name,
        op=op,
        prog=_prog(row[18:30]),
        attempts=attempts,
        outcomes=outcomes,
        next_attempt_id=row[30] if next_attempt else 0,
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
    return _joined(conn, row, row[9], False)


def op_named(conn: sqlite3.Connection, n: Neuron | None, name: str) -> OpView:
    """The op ``name`` of ``n`` (or its tombstone), without its attempts or
    prog: what ``submit`` compares a new op with, the neuron already loaded."""
    if n is None:
        return OpView(neuron=None, name=name, op=None, prog=None)
    op = _op(conn.execute(_OP + " WHERE o.neuron_id = ? AND o.op = ?", (n.id, name)).fetchone())
    if op is None:
        return _pruned_view(conn, n, name)
    return OpView(neuron=n, name=name, op=op, prog=None)


def op_attempts(conn: sqlite3.Connection, op_id: int) -> OpView:
    """The op with row id ``op_id`` and its attempts only (neuron and prog
    not loaded: None), for the decisions that read nothing else: an
    outcome and a void."""
    o = _op(conn.execute(_OP + " WHERE o.id = ?", (op_id,)).fetchone())
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
# then the table clauses; _op_attempt() reads such a row from ``at``
_OP_ATTEMPT = f"SELECT {_O}, {_ATTEMPT_COLUMNS}"


def _op_attempt(row: Any, at: int = 0) -> tuple[Op, Attempt | None]:
    op = _op(row[at : at + 11])
    assert op is not None
    if row[at + 11] is None:  # no attempt (a LEFT JOIN found none)
        return op, None
    (attempt,), _ = _attempts([row[at + 11 : at + 28]])
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
    p = _prog(
        conn.execute(_PROG + " WHERE p.neuron_id = ? AND p.prog = ?", (n.id, prog)).fetchone()
    )
    pairs: tuple[tuple[Op, Attempt], ...] = ()
    if prepared == "neuron":
        pairs = _prepared(conn, "o.neuron_id = ?", (n.id,))
    elif prepared == "prog" and p is not None:
        pairs = _prepared(conn, "o.prog_id = ?", (p.id,))
    r = None
    if reservation is not None and p is not None:
        row = conn.execute(
            "SELECT id, prog_id, reservation, steps, state, settled, number FROM reservations"
            " WHERE prog_id = ? AND reservation = ?",
            (p.id, reservation),
        ).fetchone()
        if row is not None:
            r = Reservation(*row)
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


def open_before(conn: sqlite3.Connection, boot: str) -> list[tuple[str, Op, Attempt, bool]]:
    """Every attempt an earlier boot left prepared or running (contract
    §3.6), with its neuron's id text, its op and whether it was claimed, in
    one statement (a start after a crash may find thousands)."""
    rows = conn.execute(
        f"SELECT n.neuron, {_O}, {_ATTEMPT_COLUMNS},"  # _op_attempt() at 1
        " EXISTS (SELECT 1 FROM claims c WHERE c.attempt_id = a.id)"
        " FROM attempts a LEFT JOIN outcomes oc ON oc.attempt_id = a.id"
        " JOIN operations o ON o.id = a.op_id JOIN neurons n ON n.id = o.neuron_id"
        " WHERE a.state IN ('prepared', 'running') AND a.boot != ? ORDER BY a.id",
        (boot,),
    ).fetchall()
    out = []
    for r in rows:
        op, attempt = _op_attempt(r, 1)
        assert attempt is not None
        out.append((str(r[0]), op, attempt, bool(r[29])))
    return out
