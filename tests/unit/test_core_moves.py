"""The attempt move table and receipts for attempts resolved meanwhile (contract §2, §3.4).

``move_attempt`` makes exactly the moves ``ATTEMPT_MOVES`` lists and
refuses every other one; a receipt's answer that contradicts an attempt's
recorded outcome is kept as a conflict, never applied. Pure core: no store.
"""

from __future__ import annotations

import itertools
from typing import Any

import attrs
import pytest

from tests.unit._op_table import ACT, AT, EVENT_KINDS, contract_op_state
from wardd.daemon.core import changes as ch
from wardd.daemon.core.attempts import ReceiptEffect, receipt
from wardd.daemon.core.records import Attempt, AttemptKind, Op, OpView, Outcome
from wardd.daemon.core.states import ATTEMPT_MOVES, move_attempt
from wardd.protocol import AttemptState, Internal, OpState

A = AttemptState


# -- move_attempt refuses every move that is not in the table ---------------------------------


def _op_with(state: AttemptState) -> tuple[Op, Attempt]:
    op = Op(
        id=1,
        neuron_id=1,
        op="op",
        prog_id=1,
        act=ACT,
        args=b"",
        state=contract_op_state(
            Op(1, 1, "op", 1, ACT, b"", OpState.PENDING, 1, False, False, None), state
        ),
        attempts=1,
        cancelled=False,
        consumed=False,
        result_epoch=None,
    )
    a = Attempt(
        id=1,
        op_id=1,
        attempt=1,
        kind=AttemptKind.GUARDED,
        epoch=1,
        policy_version=1,
        placement_generation=1,
        digest="d",
        worker="w0",
        boot="b",
        state=state,
        reason=None,
        evidence=None,
        ever_unknown=state == A.UNKNOWN,
    )
    return op, a


TRIPLES = list(itertools.product(list(A), list(A), EVENT_KINDS))


@pytest.mark.parametrize(
    ("frm", "to", "kind"), TRIPLES, ids=[f"{f}-{t}-{k}" for f, t, k in TRIPLES]
)
def test_move_attempt_makes_exactly_the_moves_of_the_table(frm, to, kind):
    """move_attempt makes a (from, to, kind) move iff the table lists it; others are internal."""
    op, a = _op_with(frm)
    allowed = kind in ATTEMPT_MOVES.get((frm, to), frozenset())
    if not allowed:
        with pytest.raises(Internal):
            move_attempt(op, a, to, kind, None)
        return
    changes, new_op = move_attempt(op, a, to, kind, None)
    assert new_op.state == contract_op_state(new_op, to)
    assert ch.SetAttempt(1, 1, state=to) in changes
    assert ch.AppendEvent(kind, 1, op_id=1, attempt=1, data=None) in changes


def test_only_the_latest_attempt_moves():
    """move_attempt refuses (internal) to move an attempt that is not its op's latest."""
    op, a = _op_with(A.PREPARED)
    op = attrs.evolve(op, attempts=2)
    with pytest.raises(Internal):
        move_attempt(op, a, A.VOID, "voided", None)


def test_an_unknown_attempt_leaves_unknown_only_by_receipt_or_reconcile():
    """The table lets an unknown attempt move only by a receipt or a reconciled record."""
    kinds = {k for (frm, _to), ks in ATTEMPT_MOVES.items() if frm == A.UNKNOWN for k in ks}
    assert kinds == {"receipt", "reconciled"}


def test_the_table_names_only_the_contracts_event_kinds():
    """Every move of the table is made by an event kind of contract §2 (so the triples cover it)."""
    assert {k for kinds in ATTEMPT_MOVES.values() for k in kinds} <= set(EVENT_KINDS)


# -- a receipt for an attempt resolved meanwhile (contract §3.4) -------------------------------


def _resolved(status: AttemptState, source: str = "reconcile", evidence: Any = None) -> OpView:
    """An op whose one attempt was unknown and is now resolved with ``status``."""
    op, a = _op_with(status)
    a = attrs.evolve(a, ever_unknown=True, evidence=evidence)
    out = Outcome(a.id, status, b"v" if status == A.SUCCEEDED else None, None, source)
    return OpView(neuron=None, name="op", op=op, prog=None, attempts=(a,), outcomes={1: out})


ANSWERS = ("executed", "not_executed", "unknown")
RESOLVED = (A.SUCCEEDED, A.FAILED, A.NOT_EXECUTED)
CONFLICTS = {("executed", A.FAILED), ("executed", A.NOT_EXECUTED), ("not_executed", A.SUCCEEDED)}


@pytest.mark.parametrize(
    ("answer", "status"),
    [(x, s) for x in ANSWERS for s in RESOLVED],
    ids=[f"{x}-after-{s}" for x in ANSWERS for s in RESOLVED],
)
@pytest.mark.parametrize("applies", [True, False])
def test_a_receipt_that_contradicts_the_recorded_outcome_is_kept_as_receipt_conflict(
    answer, status, applies
):
    """Exactly an answer that contradicts the outcome (executed after failed or
    not_executed, not_executed after succeeded) is kept as receipt_conflict, with
    a receipt record naming that outcome; the outcome itself never changes."""
    view = _resolved(status, evidence={"claimed": True})
    got = receipt(view, 1, answer, b"rv", None, "seen", applies=applies, at=AT)
    assert not got.reply.resolved
    if (answer, status) not in CONFLICTS:
        assert got.changes == () and got.reply.conflict is None
        return
    assert got.reply.conflict == view.outcomes[1]
    kept = {"answer": answer, "detail": "seen", "at": AT}
    if answer == "executed":
        kept["value"] = b"rv"
    data = {
        "answer": answer,
        "applied": False,
        "conflict": {"status": status.value, "source": "reconcile"},
        "detail": "seen",
    }
    assert got.changes == (
        ch.SetAttempt(1, 1, evidence={"claimed": True, "receipt_conflict": kept}),
        ch.AppendEvent("receipt", 1, op_id=1, attempt=1, data=data),
    )


def test_the_same_receipt_conflict_again_records_nothing_and_another_replaces_it():
    """A second check that finds the same contradiction adds no record (a poller
    never grows the history); a different answer or detail is kept instead."""
    first = {"answer": "executed", "at": "2026-01-01T00:00:00.000Z"}
    view = _resolved(A.NOT_EXECUTED, evidence={"claimed": True, "receipt_conflict": first})
    again = receipt(view, 1, "executed", None, None, None, applies=True, at=AT)
    assert again.changes == () and again.reply.conflict == view.outcomes[1]
    other = receipt(view, 1, "executed", None, None, "found again", applies=True, at=AT)
    (set_attempt, _record) = other.changes
    assert set_attempt.evidence["receipt_conflict"] == {
        "answer": "executed",
        "detail": "found again",
        "at": AT,
    }


def test_a_receipt_for_an_attempt_still_open_or_pruned_records_nothing():
    """Only an unknown attempt takes a receipt's answer and only a resolved one a
    conflict: a prepared, running or void attempt (no outcome), or one pruned, none."""
    for state in (A.PREPARED, A.RUNNING, A.VOID):
        op, a = _op_with(state)
        view = OpView(neuron=None, name="op", op=op, prog=None, attempts=(a,))
        got = receipt(view, 1, "executed", None, None, None, applies=True, at=AT)
        assert got.changes == () and got.reply == ReceiptEffect()
    gone = OpView(neuron=None, name="op", op=None, prog=None)
    assert receipt(gone, 1, "executed", None, None, None, applies=True, at=AT).changes == ()
