"""Decisions about attempts (contract §3.2, §3.4, §3.6, §3.8): prepare's
checks in their order, the claim and its re-verification, outcomes, voids,
the start-up mark and receipts.

Every function here is pure: records in (see :mod:`.records`), a
:class:`~.changes.Decision` out, or a :class:`WarddError` raised when the
request is refused and nothing is to be written.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, Final

import attrs

from wardd.protocol import (
    ActNotAccepted,
    ActNotGranted,
    AlreadySucceeded,
    ArgsTooLarge,
    AttemptBusy,
    AttemptMismatch,
    AttemptState,
    AttemptUnknown,
    BudgetExhausted,
    ClaimConflict,
    EpochMismatch,
    GenerationMismatch,
    GrantDisabled,
    Internal,
    NotRunning,
    OpState,
    PlacementStale,
    PlacementUnbound,
    ProgInactive,
    ProgState,
    Terminal,
    TokenInvalid,
    TokenVoid,
)

from .changes import AppendEvent, Change, Decision, NewAttempt, NewClaim, NewOutcome, SetAttempt
from .lookup import managed_op, profile_refusal, require_op
from .records import (
    Attempt,
    AttemptKind,
    AttemptRef,
    BootContext,
    Grant,
    Neuron,
    Op,
    OpView,
    Outcome,
    Prog,
)
from .states import ATTEMPT_MOVES, change_op, move_attempt, op_state

__all__ = [
    "CONTRADICTS",
    "DETAIL_MAX",
    "ReceiptEffect",
    "Reroute",
    "abort_target",
    "claim",
    "invoke_claim",
    "invoke_precheck",
    "manual_take",
    "mark_unknown",
    "orphan_killed",
    "outcome",
    "outcome_changes",
    "prepare",
    "prepare_checks",
    "pruned_token",
    "receipt",
    "receipt_conflict",
    "resend_refusal",
    "reverify",
    "shutdown_void",
    "unknown_evidence",
    "unknown_mark",
    "void",
    "void_prepared",
]

A = AttemptState
DETAIL_MAX: Final = 500  # characters of a receipt's detail kept in the evidence


@attrs.frozen
class Reroute:
    """``invoke_claim``'s answer when the placement now names another worker
    of this daemon than the one that ran the unit: nothing was written."""

    worker: str


def pruned_token() -> TokenInvalid:
    """The refusal of a token whose attempt's op ended and was pruned
    (contract §3.9): the attempt is gone and never runs."""
    return TokenInvalid("the token's attempt no longer exists (its op was pruned)")


def shutdown_void() -> TokenVoid:
    """The refusal of a dispatch the shutdown keeps from its claim (contract §3.6)."""
    return TokenVoid("the daemon is shutting down", {"reason": "shutdown"})


# -- prepare (contract §3.2.1) ---------------------------------------------------------


def prepare_checks(
    ctx: BootContext, view: OpView, p: Mapping[str, Any], *, manual: bool = False
) -> tuple[Neuron, Op, Prog, Mapping[str, Any] | None]:
    """contract §3.2.1, in its order. Returns the neuron, op, prog and (for a
    guarded attempt) the bound descriptor."""
    n, op, prog = require_op(view)
    _check_op_and_prog(n, op, prog, p)
    if manual:
        descriptor = None
        bound = ctx.act_bounds.get(op.act)
        if bound is None:
            raise ActNotAccepted(f"act {op.act!r} is not configured")
    else:
        descriptor = _check_placement(ctx, n, op, p)
        bound = descriptor["act_bounds"][op.act]
    if len(op.args) > bound:
        raise ArgsTooLarge(
            f"args are {len(op.args)} bytes; the act's bound is {bound}",
            {"max_arg_bytes": bound},
        )
    _check_attempts(view, op, p)
    return n, op, prog, descriptor


def _check_op_and_prog(n: Neuron, op: Op, prog: Prog, p: Mapping[str, Any]) -> None:
    """contract §3.2.1: the op is open, the epoch current, the prog active
    with budget and an enabled grant of the act."""
    if op.terminal:
        raise Terminal(f"operation is {op.state}")
    if "expected_epoch" in p and p["expected_epoch"] != n.epoch:
        raise EpochMismatch("expected_epoch is not the neuron's epoch", {"epoch": n.epoch})
    if prog.state != ProgState.ACTIVE:
        raise ProgInactive(f"prog is {prog.state}")
    if prog.exhausted:
        raise BudgetExhausted("the prog's step budget is exhausted")
    if not prog.grant_enabled:
        raise GrantDisabled("the prog has no enabled grant")
    assert prog.grant is not None
    if op.act not in prog.grant.acts:
        raise ActNotGranted(f"act {op.act!r} is not granted to the prog")


def _check_placement(
    ctx: BootContext, n: Neuron, op: Op, p: Mapping[str, Any]
) -> Mapping[str, Any]:
    """contract §3.2.1: the placement is bound, current, of this boot,
    advertised, and accepts the act. Returns its descriptor."""
    if n.placement is None:
        raise PlacementUnbound("the neuron has no placement")
    if p["placement_generation"] != n.placement_generation:
        raise GenerationMismatch(
            "placement_generation is not the current one",
            {"placement_generation": n.placement_generation},
        )
    descriptor = n.placement
    if descriptor["executor"]["boot"] != ctx.boot:
        raise PlacementStale("the placement names an earlier boot; bind this boot's descriptor")
    if n.placement_digest not in ctx.advertised:
        raise PlacementStale("the placement is not a descriptor this daemon advertises")
    # check 12: a placement this boot admitted always passes (bind checked
    # it); kept so that the order of contract §3.2.1 is whole here
    refusal = profile_refusal(descriptor, ctx.advertised[str(n.placement_digest)])
    if refusal is not None:
        raise refusal
    if op.act not in descriptor["acts"]:
        raise ActNotAccepted(f"act {op.act!r} is not accepted by the placement")
    return descriptor


def _check_attempts(view: OpView, op: Op, p: Mapping[str, Any]) -> None:
    """contract §3.2.1, last: the expected attempt number, and no attempt
    open, unknown or succeeded."""
    if p["expected_attempt"] != op.attempts + 1:
        raise AttemptMismatch(
            "expected_attempt is not 1 + the number of attempts", {"attempts": op.attempts}
        )
    states = {a.state for a in view.attempts}
    if states & {A.PREPARED, A.RUNNING}:
        raise AttemptBusy("an attempt of the operation is prepared or running")
    if A.UNKNOWN in states:
        raise AttemptUnknown("an attempt of the operation is unknown; reconcile it first")
    if A.SUCCEEDED in states:
        raise AlreadySucceeded("the operation already succeeded")


def _new_attempt(
    ctx: BootContext,
    view: OpView,
    n: Neuron,
    op: Op,
    descriptor: Mapping[str, Any] | None,
    kind: str,
) -> tuple[list[Change], Op, Attempt, AttemptRef]:
    """The op's next attempt (prepared if guarded, unknown if manual), bound
    to ``descriptor``: its record, the changes that add it and its reference."""
    guarded = kind == AttemptKind.GUARDED
    attempt = Attempt(
        id=view.next_attempt_id,
        op_id=op.id,
        attempt=op.attempts + 1,
        kind=kind,
        epoch=n.epoch,
        policy_version=n.policy_version,
        placement_generation=n.placement_generation if descriptor else None,
        digest=n.placement_digest if descriptor else None,
        worker=descriptor["executor"]["worker"] if descriptor else None,
        boot=ctx.boot,
        state=A.PREPARED if guarded else A.UNKNOWN,
        reason=None,
        evidence=None if guarded else {"manual": True},
        ever_unknown=not guarded,
    )
    changes: list[Change] = [_new_attempt_change(attempt, descriptor)]
    more, op = change_op(op, attempt.state, attempts=attempt.attempt)
    changes += more
    data: dict[str, Any] = {"kind": kind, "epoch": n.epoch, "policy_version": n.policy_version}
    if descriptor:
        data.update(
            placement_generation=attempt.placement_generation,
            digest=attempt.digest,
            worker=attempt.worker,
            boot=ctx.boot,
        )
    changes.append(AppendEvent("prepared", n.id, op_id=op.id, attempt=attempt.attempt, data=data))
    prog = None if view.prog is None else view.prog.prog
    return changes, op, attempt, _attempt_ref(n, op, attempt, prog)


def _new_attempt_change(attempt: Attempt, descriptor: Mapping[str, Any] | None) -> NewAttempt:
    """The change that adds ``attempt`` (and the descriptor it is bound to)."""
    return NewAttempt(
        id=attempt.id,
        op_id=attempt.op_id,
        attempt=attempt.attempt,
        kind=attempt.kind,
        epoch=attempt.epoch,
        policy_version=attempt.policy_version,
        placement_generation=attempt.placement_generation,
        descriptor=descriptor,
        digest=attempt.digest,
        worker=attempt.worker,
        boot=attempt.boot,
        state=attempt.state,
        evidence=attempt.evidence,
    )


def _attempt_ref(n: Neuron, op: Op, attempt: Attempt, prog: str | None) -> AttemptRef:
    """What a token or a dispatch carries of a new attempt."""
    return AttemptRef(
        attempt_id=attempt.id,
        neuron=n.neuron,
        neuron_id=n.id,
        op=op.op,
        op_id=op.id,
        attempt=attempt.attempt,
        act=op.act,
        args=op.args,
        epoch=attempt.epoch,
        policy_version=attempt.policy_version,
        placement_generation=attempt.placement_generation,
        digest=attempt.digest,
        worker=attempt.worker,
        prog=prog,
    )


def prepare(ctx: BootContext, view: OpView, p: Mapping[str, Any]) -> Decision:
    """contract §3.2.1: a new prepared attempt bound to the current context."""
    n, op, _prog, descriptor = prepare_checks(ctx, view, p)
    changes, _op, _attempt, ref = _new_attempt(ctx, view, n, op, descriptor, AttemptKind.GUARDED)
    return Decision(tuple(changes), ref)


def manual_take(ctx: BootContext, view: OpView, p: Mapping[str, Any]) -> Decision:
    """contract §3.4: a manual attempt, unknown from its start."""
    n, op, _prog, _ = prepare_checks(ctx, view, p, manual=True)
    changes, _op, _attempt, ref = _new_attempt(ctx, view, n, op, None, AttemptKind.MANUAL)
    return Decision(tuple(changes), ref)


def invoke_precheck(ctx: BootContext, view: OpView, p: Mapping[str, Any]) -> tuple[str, str]:
    """contract §3.2.5: ``invoke``'s checks on arrival, on a read. Raises the
    first refusal that applies now; returns the worker the placement names
    and the op's act. The claim checks again, under the guard: this only
    answers a refusal at once."""
    _n, op, _prog, descriptor = prepare_checks(ctx, view, p)
    assert descriptor is not None
    return str(descriptor["executor"]["worker"]), op.act


# -- the claim (contract §3.2.2, §3.2.5) ------------------------------------------------


def reverify(view: OpView, ref: AttemptRef) -> str | None:
    """contract §3.2.2: the claim re-verifies the attempt's context. Returns
    the void reason of the first check that fails, or None."""
    n, op, prog = view.neuron, view.op, view.prog
    assert n is not None and op is not None and prog is not None
    if op.cancelled:
        return "cancelled"
    if prog.grant is None or not prog.grant.allows(ref.act):
        return "revoked"
    if n.epoch != ref.epoch:
        return "epoch_changed"
    if n.placement_generation != ref.placement_generation or n.placement_digest != ref.digest:
        return "placement_changed"
    if prog.exhausted:
        return "budget_exhausted"
    if prog.state != ProgState.ACTIVE:
        return "prog_inactive"
    return None


def resend_refusal(
    cancelled: bool, grant: Grant | None, exhausted: bool, prog_state: str, act: str
) -> str | None:
    """contract §6 (``http``, ``receipt = "replay"``): a receipt that sends the
    call's request again makes the effect now if the first request never
    reached the API, so it is sent only while the op could still run its act:
    the checks of `reverify` that are not about the placement or the epoch
    (a restart always leaves the placement stale). Returns the void reason of
    the first that fails, or None."""
    if cancelled:
        return "cancelled"
    if grant is None or not grant.allows(act):
        return "revoked"
    if exhausted:
        return "budget_exhausted"
    if prog_state != ProgState.ACTIVE:
        return "prog_inactive"
    return None


def _claim_changes(
    op: Op, attempt: Attempt, ref: AttemptRef, worker: str, boot: str, info: Any
) -> list[Change]:
    """The one claim of a prepared attempt, and its move to ``running``."""
    changes: list[Change] = [
        NewClaim(
            attempt_id=attempt.id,
            op_id=op.id,
            attempt=attempt.attempt,
            placement_generation=ref.placement_generation,
            digest=ref.digest,
            worker=worker,
            boot=boot,
            claim_info=info,
        )
    ]
    data = {
        "worker": worker,
        "boot": boot,
        "placement_generation": ref.placement_generation,
        "digest": ref.digest,
    }
    more, _op = move_attempt(op, attempt, A.RUNNING, "claimed", data)
    return changes + more


def claim(
    view: OpView,
    ref: AttemptRef,
    *,
    worker: str,
    boot: str,
    claim_info: Any,
    stopping: bool,
) -> Decision:
    """The claim of a token's attempt (contract §3.2.2): re-verify, then the
    one claim. A void context durably voids the attempt and answers
    ``token_void``; a lost race is ``claim_conflict``. Once the daemon is
    stopping, no claim is made (contract §3.6)."""
    attempt = view.attempt(ref.attempt) if view.op is not None else None
    if attempt is not None and attempt.id != ref.attempt_id:
        attempt = None
    if stopping:
        voids = [] if attempt is None else _void_changes(view, attempt, "shutdown")
        return Decision(tuple(voids), shutdown_void())
    if attempt is None:  # its op ended and was pruned (contract §3.9): never run
        raise pruned_token()
    if attempt.state == A.VOID:
        voided = TokenVoid("the attempt was voided before its claim", {"reason": attempt.reason})
        return Decision((), voided)
    if attempt.state != A.PREPARED:
        raise ClaimConflict("the attempt is already claimed")
    reason = reverify(view, ref)
    if reason is not None:
        return Decision(
            tuple(_void_changes(view, attempt, reason)),
            TokenVoid("the attempt's context changed before its claim", {"reason": reason}),
        )
    assert view.op is not None
    return Decision(tuple(_claim_changes(view.op, attempt, ref, worker, boot, claim_info)), ref)


def invoke_claim(
    ctx: BootContext,
    view: OpView,
    p: Mapping[str, Any],
    *,
    worker: str,
    claim_info: Any,
    stopping: bool,
) -> Decision:
    """contract §3.2.5: invoke runs ``prepare``'s checks again, on the
    worker's thread under the guard, and records the attempt and its claim
    in one decision (the context was verified a moment ago in the same
    unit: the claim needs no second re-verification).

    The reply is the claimed :class:`AttemptRef`; a :class:`Reroute` when
    the placement now names another worker (nothing written); or
    ``token_void`` (``shutdown``) once the daemon is stopping."""
    if stopping:
        return Decision((), shutdown_void())
    n, op, _prog, descriptor = prepare_checks(ctx, view, p)
    assert descriptor is not None
    target: str = descriptor["executor"]["worker"]
    if target != worker:
        return Decision((), Reroute(target))
    changes, op, attempt, ref = _new_attempt(ctx, view, n, op, descriptor, AttemptKind.GUARDED)
    changes += _claim_changes(op, attempt, ref, worker, ctx.boot, claim_info)
    return Decision(tuple(changes), ref)


def abort_target(view: OpView, attempt: int) -> tuple[int, str]:
    """contract §3.8 ``abort``'s checks: ownership (``unknown_operation``),
    then the prog's grant (``grant_disabled``), then a running guarded
    attempt (``not_running`` otherwise). Returns the attempt's row id and
    the op's act; whether its adapter can be stopped from outside
    (``not_abortable``) is the caller's to check."""
    _n, op, _prog = managed_op(view)
    a = view.attempt(attempt)
    if a is None or a.state != A.RUNNING or a.kind != AttemptKind.GUARDED:
        what = (
            f"op {op.op!r} has no attempt {attempt}"
            if a is None
            else f"attempt {attempt} of op {op.op!r} is {a.state}"
            + (" (a manual attempt)" if a.kind == AttemptKind.MANUAL else "")
        )
        raise NotRunning(f"nothing to abort: {what}")
    return a.id, op.act


# -- outcomes (contract §3.2.3, §3.4) ----------------------------------------------------

_SOURCE_KIND: Final = {"adapter": "outcome", "receipt": "receipt", "reconcile": "reconciled"}


def outcome_changes(
    view: OpView,
    attempt: Attempt,
    status: AttemptState,
    value: Any,
    error: str | None,
    source: str,
    *,
    aborted: bool | None = None,
) -> list[Change]:
    """One outcome of ``attempt`` (or, for ``unknown``, its mark), recorded
    whatever changed meanwhile (contract §3.2.3: pinned to its attempt).
    ``aborted`` (an unknown outcome of a call an abort was taken for, §3.8):
    True when the abort ended the call, False when the call ended on its
    own first; None when no abort was taken."""
    op = view.op
    assert op is not None
    if status == A.UNKNOWN:
        evidence: dict[str, Any] = {"claimed": True, "error": error}
        data: dict[str, Any] = {"status": "unknown", "error": error}
        if aborted is not None:
            evidence["aborted"] = data["aborted"] = aborted
        changes, _op = move_attempt(op, attempt, A.UNKNOWN, "outcome", data, evidence=evidence)
        return changes
    out: list[Change] = [
        NewOutcome(attempt.id, op.id, attempt.attempt, status, value, error, source)
    ]
    data = {"status": status.value, "source": source}
    if error is not None:
        data["error"] = error
    moved, op = move_attempt(op, attempt, status, _SOURCE_KIND[source], data)
    out += moved
    if status == A.SUCCEEDED and not op.cancelled:
        more, op = change_op(op, status, result_epoch=attempt.epoch)
        out += more
    return out


def outcome(
    view: OpView,
    attempt_id: int,
    status: AttemptState,
    value: Any,
    error: str | None,
    *,
    aborted: bool | None = None,
) -> Decision:
    """An adapter's outcome of a running attempt (``aborted``: see
    `outcome_changes`; evidence ``aborted: true`` when an operator's
    ``abort`` ended the call, ``false`` when it ended unknown by itself first)."""
    attempt = next((a for a in view.attempts if a.id == attempt_id), None)
    assert attempt is not None, "an outcome's attempt exists until its op is pruned"
    changes = outcome_changes(view, attempt, status, value, error, "adapter", aborted=aborted)
    return Decision(tuple(changes), status.value)


# -- voids (contract §3.2.2, §3.6) -------------------------------------------------------


def _void_changes(view: OpView, attempt: Attempt, reason: str) -> list[Change]:
    if attempt.state != A.PREPARED or view.op is None:
        return []
    changes, _op = move_attempt(
        view.op, attempt, A.VOID, "voided", {"reason": reason}, reason=reason
    )
    return changes


def void(view: OpView, attempt_id: int, reason: str) -> Decision:
    """Void the attempt (by row id) if it is still prepared; the reply is
    whether it was."""
    attempt = next((a for a in view.attempts if a.id == attempt_id), None)
    changes = [] if attempt is None else _void_changes(view, attempt, reason)
    return Decision(tuple(changes), bool(changes))


def void_prepared(pairs: tuple[tuple[Op, Attempt], ...], reason: str) -> tuple[list[Change], int]:
    """Void every prepared attempt in ``pairs`` (each its op's latest)."""
    changes: list[Change] = []
    for op, attempt in pairs:
        more, _op = move_attempt(op, attempt, A.VOID, "voided", {"reason": reason}, reason=reason)
        changes += more
    return changes, len(pairs)


# -- start-up and receipts (contract §3.6, §3.4) -----------------------------------------


def mark_unknown(
    op: Op, attempt: Attempt, *, claimed: bool, orphan_killed: bool
) -> tuple[Decision, dict[str, Any]]:
    """An earlier boot's open attempt (its op's latest) becomes unknown
    (contract §3.6); returns the decision and the attempt's evidence."""
    evidence = unknown_evidence(claimed, attempt.boot, orphan_killed)
    changes, _op = move_attempt(
        op, attempt, A.UNKNOWN, "marked_unknown", evidence, evidence=evidence
    )
    return Decision(tuple(changes)), evidence


def unknown_evidence(claimed: bool, boot: str, orphan_killed: bool) -> dict[str, Any]:
    """The evidence (and record data) of an attempt marked unknown at start:
    whether it was claimed, the boot that left it open, and whether its
    program outlived that boot and was killed now."""
    evidence: dict[str, Any] = {"claimed": claimed, "boot": boot}
    if orphan_killed:
        evidence["orphan_killed"] = True
    return evidence


def orphan_killed(view: OpView, attempt_id: int) -> Decision:
    """An attempt already unknown (an earlier start marked it) whose program
    this start found still running and is about to kill: its evidence gains
    ``orphan_killed: true``, with an ``orphan_killed`` record whose data is
    that evidence. Evidence only: the attempt stays unknown. Nothing for an
    attempt in another state, gone, or whose evidence says it already."""
    attempt = next((a for a in view.attempts if a.id == attempt_id), None)
    if attempt is None or attempt.state != A.UNKNOWN or view.op is None:
        return Decision(())
    evidence = dict(attempt.evidence or {})
    if evidence.get("orphan_killed") is True:
        return Decision(())
    evidence["orphan_killed"] = True
    op = view.op
    return Decision(
        (
            SetAttempt(op.id, attempt.attempt, evidence=evidence),
            AppendEvent(
                "orphan_killed", op.neuron_id, op_id=op.id, attempt=attempt.attempt, data=evidence
            ),
        )
    )


@functools.cache
def unknown_mark(
    state: AttemptState, latest: bool, op_is: OpState, cancelled: bool, consumed: bool
) -> OpState | None:
    """:func:`mark_unknown`'s decision told in figures, for a start that
    marks thousands of attempts set-wise (``store/marks.py``): an attempt
    in ``state`` (``latest``: its op's latest) of an op in ``op_is`` becomes
    ``unknown`` with one ``marked_unknown`` record, and its op moves to the
    state returned (None: it keeps ``op_is``). Refuses what
    :func:`~.states.move_attempt` refuses. tests/unit/test_marks.py checks
    it against :func:`mark_unknown` for every input."""
    if "marked_unknown" not in ATTEMPT_MOVES.get((state, A.UNKNOWN), ()):
        raise Internal(f"an attempt cannot move {state} -> {A.UNKNOWN} by 'marked_unknown'")
    if not latest:
        raise Internal("only an op's latest attempt moves")
    to = op_state(cancelled, consumed, A.UNKNOWN)
    return None if to == op_is else to


#: a receipt's answer -> the recorded outcome statuses it contradicts: ``failed``
#: asserts that no effect happened (contract §3.2.3), as ``not_executed`` does
CONTRADICTS: Final[Mapping[str, frozenset[AttemptState]]] = {
    "executed": frozenset({A.FAILED, A.NOT_EXECUTED}),
    "not_executed": frozenset({A.SUCCEEDED}),
}


@attrs.frozen
class ReceiptEffect:
    """What :func:`receipt` did with an answer: ``resolved`` the attempt, or
    kept it as a hint (neither set), or found it ``conflict``-ing with the
    outcome recorded meanwhile (that outcome; kept as ``receipt_conflict``)."""

    resolved: bool = False
    conflict: Outcome | None = None


def receipt(
    view: OpView,
    attempt_id: int,
    answer: str,
    value: Any,
    value_error: str | None,
    detail: str | None,
    *,
    applies: bool,
    at: str,
) -> Decision:
    """A receipt's answer (contract §3.4): ``executed`` records a success,
    ``not_executed`` (when ``applies``) a not-executed outcome; any other
    answer, or one that may not be applied, is kept as a hint in the
    evidence. An answer that comes for an attempt resolved meanwhile (a
    reconcile committed before it) and contradicts its outcome is never
    dropped: it is kept as ``receipt_conflict`` (:func:`receipt_conflict`).
    ``at`` is the time the answer is recorded (RFC 3339). The reply is a
    :class:`ReceiptEffect`."""
    attempt = next((a for a in view.attempts if a.id == attempt_id), None)
    if attempt is None:  # its op ended and was pruned meanwhile: nothing to keep it on
        return Decision((), ReceiptEffect())
    if attempt.state != A.UNKNOWN:
        return receipt_conflict(view, attempt, answer, value, detail, at)
    if applies and answer == "executed":
        return Decision(
            tuple(outcome_changes(view, attempt, A.SUCCEEDED, value, value_error, "receipt")),
            ReceiptEffect(resolved=True),
        )
    if applies and answer == "not_executed":
        return Decision(
            tuple(outcome_changes(view, attempt, A.NOT_EXECUTED, None, None, "receipt")),
            ReceiptEffect(resolved=True),
        )
    evidence = dict(attempt.evidence or {})
    before = (evidence.get("receipt_hint"), evidence.get("receipt_detail"))
    evidence["receipt_hint"] = answer
    data: dict[str, Any] = {"answer": answer, "applied": False}
    if detail:
        evidence["receipt_detail"] = data["detail"] = detail[:DETAIL_MAX]
    else:
        evidence.pop("receipt_detail", None)  # an earlier check's detail is stale
    if before == (evidence["receipt_hint"], evidence.get("receipt_detail")):
        # the same hint again (check_receipts polled): nothing new to record,
        # so a poller never grows an unknown attempt's history
        return Decision((), ReceiptEffect())
    return Decision(_keep_receipt(view, attempt, evidence, data), ReceiptEffect())


def receipt_conflict(
    view: OpView, attempt: Attempt, answer: str, value: Any, detail: str | None, at: str
) -> Decision:
    """A receipt's answer for an attempt already resolved (contract §3.4,
    [2.3]). One that contradicts the recorded outcome (:data:`CONTRADICTS`)
    is kept in the evidence as ``receipt_conflict: {answer, value?, detail?,
    at}`` with a ``receipt`` record (``applied: false``, ``conflict: {status,
    source}``); the outcome stays as it is, since a definite outcome is
    recorded once. One that agrees, or says ``unknown``, adds nothing, and so
    does the same conflict again."""
    out = view.outcomes.get(attempt.attempt)
    if out is None or out.status not in CONTRADICTS.get(answer, ()):
        return Decision((), ReceiptEffect())
    conflict: dict[str, Any] = {"answer": answer}
    if answer == "executed" and value is not None:
        conflict["value"] = value
    if detail:
        conflict["detail"] = detail[:DETAIL_MAX]
    evidence = dict(attempt.evidence or {})
    known = evidence.get("receipt_conflict")
    if isinstance(known, Mapping) and {k: v for k, v in known.items() if k != "at"} == conflict:
        return Decision((), ReceiptEffect(conflict=out))
    evidence["receipt_conflict"] = {**conflict, "at": at}
    data: dict[str, Any] = {
        "answer": answer,
        "applied": False,
        "conflict": {"status": out.status.value, "source": out.source},
    }
    if "detail" in conflict:
        data["detail"] = conflict["detail"]
    return Decision(_keep_receipt(view, attempt, evidence, data), ReceiptEffect(conflict=out))


def _keep_receipt(
    view: OpView, attempt: Attempt, evidence: Mapping[str, Any], data: Mapping[str, Any]
) -> tuple[Change, ...]:
    """An answer kept in the attempt's evidence, and its ``receipt`` record;
    the attempt's state stays as it is."""
    op = view.op
    assert op is not None
    return (
        SetAttempt(op.id, attempt.attempt, evidence=evidence),
        AppendEvent("receipt", op.neuron_id, op_id=op.id, attempt=attempt.attempt, data=data),
    )
