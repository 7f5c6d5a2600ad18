"""Decisions about operations (contract §3.3, §3.4, §3.9, §4): submit,
cancel, consume, rebind and reconcile."""

from __future__ import annotations

import hashlib
from typing import Any

from wardd.protocol import (
    ArgsTooLarge,
    AttemptState,
    BudgetExhausted,
    Conflict,
    EpochMismatch,
    NotReconcilable,
    NotRetained,
    OpConflict,
    OpState,
    RebindRequired,
    Terminal,
    UnknownAct,
    UnknownOperation,
    encode_item,
)

from .attempts import outcome_changes
from .changes import AppendEvent, Change, Decision, NewOp
from .lookup import managed_op, require_enabled_grant, require_prog
from .records import Attempt, Op, OpView, Outcome, ProgView
from .states import change_op, move_attempt

__all__ = ["args_digest", "cancel", "cancel_changes", "consume", "rebind", "reconcile", "submit"]

A = AttemptState


def args_digest(args: bytes) -> bytes:
    """What a tombstone keeps of an op's args (contract §3.9)."""
    return hashlib.sha256(args).digest()


def submit(
    view: ProgView,
    existing: OpView,
    op: str,
    act: str,
    args: bytes,
    act_bounds: dict[str, int] | Any,
    next_op_id: int,
) -> Decision:
    """contract §4 submit: idempotent for identical content, ``op_conflict``
    otherwise; an act that is not registered is ``unknown_act``; args over
    the act's bound are ``args_too_large``; a pruned op answers through its
    tombstone and never runs again (contract §3.9)."""
    n, p = require_prog(view)
    require_enabled_grant(p)
    bound = act_bounds.get(act)
    if bound is None:
        raise UnknownAct(f"act {act!r} is not registered")
    if len(args) > bound:
        raise ArgsTooLarge(
            f"args are {len(args)} bytes; the act's bound is {bound}", {"max_arg_bytes": bound}
        )
    if existing.op is not None:
        o = existing.op
        if (o.prog_id, o.act, o.args) != (p.id, act, args):
            raise OpConflict("an operation with this id and other content exists")
        return Decision((), {"op": op, "state": o.state.value, "already": True})
    if existing.tombstone is not None:
        t = existing.tombstone
        if (t.prog_id, t.act, t.args_digest) != (p.id, act, args_digest(args)):
            raise OpConflict("an operation with this id and other content existed")
        return Decision((), {"op": op, "state": t.state.value, "already": True, "pruned": True})
    if p.exhausted:
        raise BudgetExhausted("the prog's step budget is exhausted")
    changes: tuple[Change, ...] = (
        NewOp(next_op_id, n.id, op, p.id, act, args),
        AppendEvent(
            "submitted",
            n.id,
            op_id=next_op_id,
            data={"prog": view.name, "act": act, "args_bytes": len(args)},
        ),
    )
    return Decision(changes, {"op": op, "state": OpState.PENDING.value})


def cancel_changes(op: Op, latest: Attempt | None, reason: str) -> list[Change]:
    """Cancel ``op`` (its prepared attempt voided first): ``reason`` is
    ``cancelled`` or ``budget_exhausted``."""
    changes: list[Change] = []
    was = op.state
    latest_state = None if latest is None else latest.state
    if latest is not None and latest.state == A.PREPARED:
        more, op = move_attempt(op, latest, A.VOID, "voided", {"reason": reason}, reason=reason)
        changes += more
        latest_state = A.VOID
    more, op = change_op(op, latest_state, cancelled=True, result_epoch=None)
    # the cancellation's record comes before the state it projects
    changes.append(
        AppendEvent("cancelled", op.neuron_id, op_id=op.id, data={"reason": reason, "was": was})
    )
    changes += more
    return changes


def cancel(view: OpView) -> Decision:
    _n, o, _p = managed_op(view)
    if o.cancelled:
        return Decision((), {"op": o.op, "state": "cancelled", "already": True})
    if o.consumed:
        raise Terminal("the operation is consumed")
    changes = cancel_changes(o, view.latest, "cancelled")
    return Decision(tuple(changes), {"op": o.op, "state": "cancelled", "was": o.state.value})


def _retained(view: OpView, o: Op) -> tuple[Attempt, Outcome]:
    if o.terminal:
        raise Terminal(f"the operation is {o.state}")
    if o.state != OpState.RETAINED:
        raise NotRetained(f"the operation holds no result (it is {o.state})")
    for a in view.attempts:
        out = view.outcomes.get(a.attempt)
        if out is not None and out.status == A.SUCCEEDED:
            return a, out
    raise AssertionError("a retained op has a succeeded attempt")


def consume(view: OpView) -> Decision:
    n, o, _p = managed_op(view)
    a, out = _retained(view, o)
    if o.result_epoch != n.epoch:
        raise RebindRequired(
            "the result belongs to an older epoch; rebind it first", {"epoch": o.result_epoch}
        )
    more, o2 = change_op(o, a.state, consumed=True)
    changes: list[Change] = [
        *more,
        AppendEvent("consumed", n.id, op_id=o.id, data={"attempt": a.attempt}),
    ]
    return Decision(
        tuple(changes),
        {
            "op": o.op,
            "attempt": a.attempt,
            "result": {
                "status": out.status.value,
                "value": out.value,
                "source": out.source,
                "attempt": a.attempt,
                "epoch": o.result_epoch,
            },
        },
    )


def rebind(view: OpView, expected_epoch: int | None) -> Decision:
    n, o, _p = managed_op(view)
    a, _out = _retained(view, o)
    if expected_epoch is not None and expected_epoch != n.epoch:
        raise EpochMismatch("expected_epoch is not the current epoch", {"epoch": n.epoch})
    if o.result_epoch == n.epoch:
        return Decision((), {"op": o.op, "epoch": n.epoch, "already": True})
    more, _o = change_op(o, a.state, result_epoch=n.epoch)
    changes: list[Change] = [
        *more,
        AppendEvent(
            "rebound",
            n.id,
            op_id=o.id,
            data={"attempt": a.attempt, "from_epoch": o.result_epoch, "epoch": n.epoch},
        ),
    ]
    return Decision(tuple(changes), {"op": o.op, "epoch": n.epoch})


def reconcile(view: OpView, attempt: int, status: AttemptState, value: Any) -> Decision:
    """contract §3.4: record the outcome of an unknown attempt; the same
    outcome again is ``already``; another one is ``conflict``; an attempt
    that was never unknown is ``not_reconcilable``."""
    _n, o, _p = managed_op(view)
    a = view.attempt(attempt)
    if a is None:
        raise UnknownOperation(f"operation {o.op!r} has no attempt {attempt}")
    result = {"op": o.op, "attempt": attempt, "status": status.value}
    if a.state == A.UNKNOWN:
        return Decision(tuple(outcome_changes(view, a, status, value, None, "reconcile")), result)
    out = view.outcomes.get(attempt)
    if out is None or not a.ever_unknown:
        raise NotReconcilable(
            f"attempt {attempt} is {a.state}; only unknown attempts can be reconciled"
        )
    # compare canonical encodings: True == 1 in Python but not on the wire,
    # and map key order is no difference
    same = encode_item(out.value, canonical=True) == encode_item(value, canonical=True)
    if out.status == status and same:
        return Decision((), {**result, "already": True})
    raise Conflict(
        "the attempt was already resolved with another outcome",
        {"status": out.status.value, "source": out.source},
    )
