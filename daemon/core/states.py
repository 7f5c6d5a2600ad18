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

__all__ = ["ATTEMPT_MOVES", "change_op", "move_attempt", "op_state"]

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


def _replace(record: Any, changes: Mapping[str, Any]) -> Any:
    """A copy of a frozen record with ``changes`` (``attrs.evolve`` without
    its per-call introspection: these copies are on every dispatch's path)."""
    cls = type(record)
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(a.name for a in attrs.fields(cls))
    new = object.__new__(cls)
    for name in names:
        object.__setattr__(new, name, changes[name] if name in changes else getattr(record, name))
    return new


_FIELDS: dict[type, tuple[str, ...]] = {}


def change_op(op: Op, latest: AttemptState | None, **fields: Any) -> tuple[list[Change], Op]:
    """Change an op's own fields (cancelled, consumed, result_epoch,
    attempts) and the state that follows from them and its latest attempt's
    state ``latest`` (contract §3.3). Returns the change (if any) and the op
    as it then is."""
    changed = {k: v for k, v in fields.items() if getattr(op, k) != v}
    state = op_state(
        changed.get("cancelled", op.cancelled), changed.get("consumed", op.consumed), latest
    )
    if state != op.state:
        changed["state"] = state
    if not changed:
        return [], op
    return [SetOp(op.id, changed, was=op.state)], _replace(op, changed)


def move_attempt(
    op: Op,
    attempt: Attempt,
    to: AttemptState,
    kind: str,
    data: Mapping[str, Any] | None,
    *,
    reason: str | None = None,
    evidence: Mapping[str, Any] | None = None,
) -> tuple[list[Change], Op]:
    """The one way an attempt changes state: the new state (with its void
    reason or evidence), the event record of the move, and the op state that
    follows (contract §2: states evolve only by appending records). Returns
    the changes and the op as it then is (the attempt is then in ``to``).

    Refuses (``internal``, nothing written) a move that is not in the table,
    or that would not be the op's latest attempt's."""
    if kind not in ATTEMPT_MOVES.get((attempt.state, to), ()):
        raise Internal(f"an attempt cannot move {attempt.state} -> {to} by {kind!r}")
    if attempt.op_id != op.id or attempt.attempt != op.attempts:
        raise Internal("only an op's latest attempt moves")
    changes: list[Change] = [
        SetAttempt(
            op.id,
            attempt.attempt,
            state=to,
            reason=reason,
            evidence=evidence,
            act=op.act,
            was=attempt.state,
        ),
        AppendEvent(kind, op.neuron_id, op_id=op.id, attempt=attempt.attempt, data=data),
    ]
    more, new_op = change_op(op, to)
    return changes + more, new_op
