"""Record helpers shared by the writer units: time, CBOR columns, events,
and the op-state projection (contract §2, §3.3).

Everything here runs inside a writer unit (one SAVEPOINT of a batch) or on
a reader connection; nothing here knows about trio or sockets.
"""

from __future__ import annotations

import datetime
import sqlite3
from typing import Any

import cbor2

from wardd.protocol import AttemptState, OpState, encode_item

__all__ = [
    "append_event",
    "dec",
    "enc",
    "now",
    "refresh_op_state",
]

# attempt states after which the op is pending again (contract §3.3)
_REOPENING = frozenset({AttemptState.VOID, AttemptState.FAILED, AttemptState.NOT_EXECUTED})

# How deep a stored value may sit inside the deepest reply that carries it
# (get_operation: reply → result → attempts → [i] → outcome → value).
REPLY_NESTING = 8


def wire_safe(value: Any) -> tuple[Any, str | None]:
    """``(value, None)`` if ``value`` can be sent in every reply that embeds
    it; else a placeholder and why (the daemon never stores what it could
    not send back)."""
    probe: Any = value
    for _ in range(REPLY_NESTING):
        probe = [probe]
    try:
        encode_item(probe)
    except (TypeError, ValueError, OverflowError) as exc:
        why = f"a {type(value).__name__} that is not a wire value: {str(exc)[:200]}"
        return {"omitted": "not_a_wire_value"}, why
    return value, None


def now() -> str:
    """RFC 3339 UTC with milliseconds."""
    t = datetime.datetime.now(datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def enc(value: Any) -> bytes:
    return cbor2.dumps(value)


def dec(blob: bytes | None) -> Any:
    return None if blob is None else cbor2.loads(blob)


# Row ids never handed out again once a pruned op held them (contract §2:
# seq is global and increasing; an attempt id names one attempt for ever).
NEXT_SEQ = (
    "1 + max(coalesce((SELECT max(seq) FROM events), 0),"
    " coalesce((SELECT seq_hw FROM prune_stats WHERE id = 1), 0))"
)
NEXT_ATTEMPT_ID = (
    "1 + max(coalesce((SELECT max(id) FROM attempts), 0),"
    " coalesce((SELECT attempt_hw FROM prune_stats WHERE id = 1), 0))"
)


def append_event(
    conn: sqlite3.Connection,
    kind: str,
    neuron_id: int,
    *,
    op_id: int | None = None,
    attempt: int | None = None,
    data: dict[str, Any] | None = None,
    at: str | None = None,
) -> int:
    """Append one event record; ``follows`` is the op's previous record
    (null for its first and for per-neuron records)."""
    follows = None
    if op_id is not None:
        (follows,) = conn.execute(
            "SELECT last_seq FROM operations WHERE id = ?", (op_id,)
        ).fetchone()
    cur = conn.execute(
        "INSERT INTO events(seq, at, kind, neuron_id, op_id, attempt, follows, data)"
        f" VALUES ({NEXT_SEQ}, ?, ?, ?, ?, ?, ?, ?)",
        (
            at or now(),
            kind,
            neuron_id,
            op_id,
            attempt,
            follows,
            None if data is None else enc(data),
        ),
    )
    seq = cur.lastrowid
    assert seq is not None
    if op_id is not None:
        conn.execute("UPDATE operations SET last_seq = ? WHERE id = ?", (seq, op_id))
    return seq


def move_attempt(
    conn: sqlite3.Connection,
    *,
    attempt_id: int,
    neuron_id: int,
    op_id: int,
    attempt: int,
    state: str,
    kind: str,
    data: dict[str, Any] | None,
    reason: str | None = None,
    evidence: dict[str, Any] | None = None,
    at: str | None = None,
) -> None:
    """The one way an attempt changes state: the new state (with its void
    reason or its evidence), the event record of the transition, and the
    op state that follows from it (contract §2: states evolve only by
    appending records; the binding never changes)."""
    sets: list[str] = ["state = ?"]
    params: list[Any] = [state]
    if reason is not None:
        sets.append("reason = ?")
        params.append(reason)
    if evidence is not None:
        sets.append("evidence = ?")
        params.append(enc(evidence))
    conn.execute(f"UPDATE attempts SET {', '.join(sets)} WHERE id = ?", (*params, attempt_id))
    append_event(conn, kind, neuron_id, op_id=op_id, attempt=attempt, data=data, at=at)
    refresh_op_state(conn, op_id)


def derive_op_state(cancelled: bool, consumed: bool, latest: str | None) -> str:
    """contract §3.3: the op state follows its latest attempt; cancelled and
    consumed are terminal and override it."""
    if cancelled:
        return OpState.CANCELLED
    if consumed:
        return OpState.CONSUMED
    if latest is None or latest in _REOPENING:
        return OpState.PENDING
    if latest == AttemptState.SUCCEEDED:
        return OpState.RETAINED
    return OpState(latest)  # prepared, running, unknown


def refresh_op_state(conn: sqlite3.Connection, op_id: int) -> str:
    row = conn.execute(
        "SELECT o.state, o.cancelled,"
        " (SELECT a.state FROM attempts a WHERE a.op_id = o.id ORDER BY a.attempt DESC LIMIT 1)"
        " FROM operations o WHERE o.id = ?",
        (op_id,),
    ).fetchone()
    state, cancelled, latest = row
    new = derive_op_state(bool(cancelled), state == "consumed", latest)
    if new != state:
        conn.execute("UPDATE operations SET state = ? WHERE id = ?", (new, op_id))
    return new
