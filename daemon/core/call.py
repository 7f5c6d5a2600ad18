"""Decisions of the ``call`` method (contract §3.2.6): ``submit`` and
``invoke`` in one request.

A call first decides as ``submit`` does (:func:`.ops.submit`: its checks,
its content rule, ``op_conflict``). Then:

- a new op, or one that exists with no attempt that reached its claim
  (every attempt ``void``, or none), is invoked as ``invoke`` does
  (:func:`.attempts.invoke_precheck` on arrival,
  :func:`.attempts.invoke_claim` under the guard), with the op's next
  attempt number and the neuron's current placement generation unless the
  request names one; the new op's records and the attempt's claim are one
  decision, so a refused call writes nothing;
- any other op answers what it already is (:func:`repeated`), and nothing
  runs again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from wardd.protocol import (
    AttemptBusy,
    AttemptState,
    AttemptUnknown,
    OpConflict,
    OpState,
    WarddError,
)

from . import ops
from .attempts import invoke_claim, invoke_precheck, shutdown_void
from .changes import Change, Decision, NewOp
from .records import AttemptRef, BootContext, Neuron, Op, OpView, ProgView

__all__ = ["Answered", "CallStart", "claim", "precheck", "repeated", "start"]

A = AttemptState


@attrs.frozen
class Answered:
    """A call that runs nothing: ``result`` is its answer (what the op already is)."""

    result: Mapping[str, Any]


@attrs.frozen
class CallStart:
    """Where a call goes: its ``answer`` (nothing runs), or the op to invoke
    (``view``), ``invoke``'s params for it, and the changes that submit it
    (none for an op that exists)."""

    answer: Mapping[str, Any] | None = None
    view: OpView | None = None
    params: Mapping[str, Any] = attrs.field(factory=dict)
    submitted: tuple[Change, ...] = ()


def repeated(view: OpView) -> dict[str, Any] | None:
    """What a call answers for an op that exists with the same content,
    without running anything; None when the op is to be invoked (no
    attempt of it reached a claim).

    - an ``unknown`` attempt: ``attempt_unknown`` naming the op and the
      attempt (it may have run);
    - a consumed or cancelled op: its state;
    - an attempt ``prepared`` or ``running``: ``attempt_busy`` naming it;
    - otherwise the latest outcome (``succeeded`` with its value, ``failed``
      or ``not_executed`` with its error), ``already: true``; a cancelled
      op's value was discarded by its ``cancel`` and is never answered."""
    op = view.op
    assert op is not None
    for a in view.attempts:
        if a.state == A.UNKNOWN:
            raise AttemptUnknown(
                f"attempt {a.attempt} of operation {op.op!r} is unknown: it may have run; "
                "resolve it (a receipt, or reconcile) before anything else",
                {"op": op.op, "attempt": a.attempt},
            )
    ran = [a for a in view.attempts if a.state != A.VOID]
    latest = ran[-1] if ran else None
    if latest is None and not op.terminal:
        return None
    if latest is not None and not op.terminal and latest.state in (A.PREPARED, A.RUNNING):
        raise AttemptBusy(
            f"attempt {latest.attempt} of operation {op.op!r} is {latest.state}",
            {"op": op.op, "attempt": latest.attempt},
        )
    answer: dict[str, Any] = {"op": op.op, "state": op.state.value, "already": True}
    if latest is not None:
        answer["attempt"] = latest.attempt
        answer["status"] = latest.state.value
        out = view.outcomes.get(latest.attempt)
        if latest.state == A.SUCCEEDED:
            if op.state != OpState.CANCELLED:  # cancel discarded it (contract §4 ``cancel``)
                answer["result"] = None if out is None else out.value
        elif out is not None:
            answer["error"] = out.error
    return answer


def _naming_earlier_attempts(exc: WarddError, existing: OpView) -> WarddError:
    """A refusal that comes before the op's state (grant, act, args bound):
    this request ran nothing, but the op it names may exist with an attempt
    that reached its claim, or may have ended and been pruned (its fate is
    no longer known). Then the refusal says so, with ``data.op`` and
    ``data.may_have_run: true`` (and ``data.attempt``, the latest claimed
    one), so that no client reads it as "nothing ran" (contract §3.2.6)."""
    claimed = [a for a in existing.attempts if a.state != A.VOID] if existing.op else []
    if not claimed and existing.tombstone is None:
        return exc
    data: dict[str, Any] = {**(exc.data or {}), "op": existing.name, "may_have_run": True}
    if claimed:
        data["attempt"] = claimed[-1].attempt
    return type(exc)(exc.message, data)


def _invoke_params(n: Neuron, op: Op, p: Mapping[str, Any]) -> dict[str, Any]:
    """``invoke``'s params for the op's next attempt: the request's
    ``placement_generation`` and ``expected_epoch`` when it names them."""
    params: dict[str, Any] = {
        "op": op.op,
        "expected_attempt": op.attempts + 1,
        "placement_generation": p.get("placement_generation", n.placement_generation),
    }
    if "expected_epoch" in p:
        params["expected_epoch"] = p["expected_epoch"]
    return params


def start(
    ctx: BootContext,
    pview: ProgView,
    existing: OpView,
    p: Mapping[str, Any],
    *,
    next_op_id: int,
    next_attempt_id: int,
) -> CallStart:
    """The call's submit (contract §4 ``submit``), then where it goes.

    ``existing`` is the op the request names with its attempts (or its
    tombstone); a new op is given ``next_op_id`` and its attempt
    ``next_attempt_id``."""
    try:
        submitted = ops.submit(
            pview, existing, p["op"], p["act"], p["args"], ctx.act_bounds, next_op_id
        )
    except OpConflict:
        raise
    except WarddError as exc:
        raise _naming_earlier_attempts(exc, existing) from None
    if not submitted.changes:  # the op exists (or existed) with this content
        if existing.op is None:  # pruned (contract §3.9): submit's answer
            return CallStart(answer=submitted.reply)
        answer = repeated(existing)
        if answer is not None:
            return CallStart(answer=answer)
        assert existing.neuron is not None
        return CallStart(view=existing, params=_invoke_params(existing.neuron, existing.op, p))
    new = submitted.changes[0]
    assert isinstance(new, NewOp) and pview.neuron is not None and pview.prog is not None
    op = Op(
        id=new.id,
        neuron_id=new.neuron_id,
        op=new.op,
        prog_id=new.prog_id,
        act=new.act,
        args=new.args,
        state=OpState.PENDING,
        attempts=0,
        cancelled=False,
        consumed=False,
        result_epoch=None,
    )
    view = OpView(
        neuron=pview.neuron,
        name=op.op,
        op=op,
        prog=pview.prog,
        next_attempt_id=next_attempt_id,
    )
    return CallStart(
        view=view,
        params=_invoke_params(pview.neuron, op, p),
        submitted=submitted.changes,
    )


def precheck(
    ctx: BootContext, pview: ProgView, existing: OpView, p: Mapping[str, Any]
) -> Answered | tuple[str, str]:
    """The call's checks on arrival, on a read (they write nothing): its
    answer when it runs nothing, else the worker the placement names and
    the act (``invoke_precheck``). The claim decides again, under the guard."""
    s = start(ctx, pview, existing, p, next_op_id=0, next_attempt_id=0)
    if s.answer is not None:
        return Answered(s.answer)
    assert s.view is not None
    return invoke_precheck(ctx, s.view, s.params)


def claim(
    ctx: BootContext,
    pview: ProgView,
    existing: OpView,
    p: Mapping[str, Any],
    *,
    next_op_id: int,
    next_attempt_id: int,
    worker: str,
    claim_info: Any,
    stopping: bool,
) -> Decision:
    """The call's one unit before its act (contract §3.2.6): the op (if new),
    its attempt and the claim, under the guard. The reply: the claimed
    :class:`AttemptRef`; :class:`Answered` (nothing written, nothing runs);
    a :class:`~.attempts.Reroute` (nothing written); or ``token_void``
    (``shutdown``) once the daemon is stopping."""
    if stopping:
        return Decision((), shutdown_void())
    s = start(
        ctx,
        pview,
        existing,
        p,
        next_op_id=next_op_id,
        next_attempt_id=next_attempt_id,
    )
    if s.answer is not None:
        return Decision((), Answered(s.answer))
    assert s.view is not None
    d = invoke_claim(ctx, s.view, s.params, worker=worker, claim_info=claim_info, stopping=False)
    if not isinstance(d.reply, AttemptRef):  # a reroute: nothing is written
        return d
    return Decision(s.submitted + d.changes, d.reply)
