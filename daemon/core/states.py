"""The state tables: how an attempt may move (contract §2, §3.2–§3.4) and
the op state that follows from its latest attempt (contract §3.3).

An attempt changes state only through :func:`move_attempt`, which refuses
any move not in :data:`ATTEMPT_MOVES`. Each move is named by the event
record it appends, so the table also says *who* may make it: an unknown
attempt leaves ``unknown`` only by a ``receipt`` or a ``reconciled``
record, never by an adapter's late answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import attrs

from wardd.protocol import AttemptState, Internal, OpState

from .changes import AppendEvent, Change, SetAttempt, SetOp
from .records import Attempt, Op

__all__ = ["ATTEMPT_MOVES", "OPEN_ATTEMPT_STATES", "move_attempt", "op_state"]

A = AttemptState

#: (from, to) -> the event kinds that may make that move.
ATTEMPT_MOVES: Final[Mapping[tuple[AttemptState, AttemptState], frozenset[str]]] = {
    (A.PREPARED, A.VOID): frozenset({"voided"}),
    (A.PREPARED, A.RUNNING): frozenset({"claimed"}),
    (A.PREPARED, A.UNKNOWN): frozenset({"marked_unknown"}),
    (A.RUNNING, A.SUCCEEDED): frozenset({"outcome"}),
    (A.RUNNING, A.FAILED): frozenset({"outcome"}),
    (A.RUNNING, A.NOT_EXECUTED): frozenset({"outcome"}),
    (A.RUNNING, A.UNKNOWN): frozenset({"outcome", "marked_unknown"}),
    (A.UNKNOWN, A.SUCCEEDED): frozenset({"receipt", "reconciled"}),
    (A.UNKNOWN, A.NOT_EXECUTED): frozenset({"receipt", "reconciled"}),
    (A.UNKNOWN, A.FAILED): frozenset({"reconciled"}),
}

#: States of an attempt that block a new one (contract §3.2.1).
OPEN_ATTEMPT_STATES: Final = frozenset({A.PREPARED, A.RUNNING, A.UNKNOWN})

_REOPENING: Final = frozenset({A.VOID, A.FAILED, A.NOT_EXECUTED})


def op_state(cancelled: bool, consumed: bool, latest: AttemptState | None) -> OpState:
    """contract §3.3: the op state follows its latest attempt; cancelled and
    consumed are terminal and override it."""
    if cancelled:
        return OpState.CANCELLED
    if consumed:
        return OpState.CONSUMED
    if latest is None or latest in _REOPENING:
        return OpState.PENDING
    if latest == A.SUCCEEDED:
        return OpState.RETAINED
    return OpState(latest.value)  # prepared, running, unknown


def _with_state(
    old: Op, new: Op, latest: AttemptState | None, *, latest_known: bool = False
) -> tuple[list[Change], Op]:
    fields: dict[str, Any] = {
        k: getattr(new, k)
        for k in ("cancelled", "consumed", "result_epoch", "attempts")
        if getattr(new, k) != getattr(old, k)
    }
    if latest_known:
        state = op_state(new.cancelled, new.consumed, latest)
    else:
        state = new.state
    if state != old.state:
        fields["state"] = state
    new = attrs.evolve(new, state=state)
    return ([SetOp(old.id, fields)] if fields else []), new


def move_attempt(
    op: Op,
    attempt: Attempt,
    to: AttemptState,
    kind: str,
    data: Mapping[str, Any] | None,
    *,
    reason: str | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> tuple[list[Change], Op, Attempt]:
    """The one way an attempt changes state: the new state (with its void
    reason or evidence), the event record of the move, and the op state that
    follows (contract §2: states evolve only by appending records).

    Refuses (``internal``, nothing written) a move that is not in the table,
    or that would not be the op's latest attempt's."""
    if kind not in ATTEMPT_MOVES.get((attempt.state, to), ()):
        raise Internal(f"an attempt cannot move {attempt.state} -> {to} by {kind!r}")
    if attempt.op_id != op.id or attempt.attempt != op.attempts:
        raise Internal("only an op's latest attempt moves")
    changes: list[Change] = [
        SetAttempt(op.id, attempt.attempt, state=to, reason=reason, evidence=evidence),
        AppendEvent(kind, op.neuron_id, op_id=op.id, attempt=attempt.attempt, data=data),
    ]
    more, new_op = _with_state(op, op, to, latest_known=True)
    moved = attrs.evolve(
        attempt,
        state=to,
        reason=reason if reason is not None else attempt.reason,
        evidence=evidence if evidence is not None else attempt.evidence,
        ever_unknown=attempt.ever_unknown or to == A.UNKNOWN,
    )
    return changes + more, new_op, moved


def change_op(op: Op, latest: AttemptState | None, **fields: Any) -> tuple[list[Change], Op]:
    """Change an op's own fields (cancelled, consumed, result_epoch,
    attempts) and the state that follows from them and its latest attempt."""
    return _with_state(op, attrs.evolve(op, **fields), latest, latest_known=True)
