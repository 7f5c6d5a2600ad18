"""`call`'s decisions, pure (contract §3.2.6): submit's rules, then either
``invoke``'s attempt and claim in one decision, or what the op already is.

The records are those of test_core_prepare_order's `World` (every check
passes by default), built in memory and handed to the pure core.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from tests.unit._world import ACT, BOUND, World, attempt, build
from wardd.daemon.core.attempts import Reroute
from wardd.daemon.core.call import Answered, claim, precheck, repeated
from wardd.daemon.core.changes import AppendEvent, NewAttempt, NewClaim, NewOp
from wardd.daemon.core.ops import args_digest
from wardd.daemon.core.records import AttemptRef, BootContext, OpView, Outcome, ProgView
from wardd.daemon.core.states import op_state
from wardd.protocol import (
    AttemptBusy,
    AttemptState,
    AttemptUnknown,
    OpConflict,
    OpState,
    PlacementUnbound,
    TokenVoid,
    UnknownAct,
    WarddError,
)

A = AttemptState
ARGS = b"x" * BOUND  # the World's op content


def setup(
    w: World | None = None, states: tuple[AttemptState, ...] | None = None, **op: Any
) -> tuple[BootContext, ProgView, OpView]:
    """The World's records as a call reads them: the prog it names, and the
    op (``states``: its attempts' states, in order; ``op``: its flags)."""
    ctx, view, _ = build(w or World())
    pview = ProgView(neuron=view.neuron, name="p", prog=view.prog)
    if states is not None and view.op is not None:
        attempts = tuple(attempt(i, s) for i, s in enumerate(states, 1))
        flags = {"cancelled": False, "consumed": False, **op}
        latest = attempts[-1].state if attempts else None
        o = attrs.evolve(
            view.op,
            attempts=len(attempts),
            state=op_state(flags["cancelled"], flags["consumed"], latest),
            **flags,
        )
        outcomes = {
            a.attempt: Outcome(
                a.id, a.state, b"v" if a.state == A.SUCCEEDED else None, "e", "adapter"
            )
            for a in attempts
            if a.state in (A.SUCCEEDED, A.FAILED, A.NOT_EXECUTED)
        }
        view = attrs.evolve(view, op=o, attempts=attempts, outcomes=outcomes)
    return ctx, pview, view


def params(**extra: Any) -> dict[str, Any]:
    return {"prog": "p", "op": "op-1", "act": ACT, "args": ARGS, **extra}


def decide(ctx: BootContext, pview: ProgView, view: OpView, p: dict[str, Any], **kw: Any) -> Any:
    args = {"next_op_id": 9, "next_attempt_id": 300, "worker": "w0", "claim_info": None}
    args.update(kw)
    return claim(ctx, pview, view, p, stopping=args.pop("stopping", False), **args)


class TestNewOp:
    def test_the_op_its_attempt_and_the_claim_are_one_decision(self):
        """A new op: submit's records, then invoke's attempt and claim, in one decision."""
        ctx, pview, view = setup(World(op="absent"))
        assert precheck(ctx, pview, view, params()) == ("w0", ACT)
        d = decide(ctx, pview, view, params())
        assert isinstance(d.reply, AttemptRef)
        assert (d.reply.op_id, d.reply.attempt, d.reply.attempt_id) == (9, 1, 300)
        kinds = [type(c).__name__ if not isinstance(c, AppendEvent) else c.kind for c in d.changes]
        assert kinds[:2] == ["NewOp", "submitted"]
        assert isinstance(d.changes[0], NewOp) and d.changes[0].args == ARGS
        assert any(isinstance(c, NewAttempt) for c in d.changes)
        assert any(isinstance(c, NewClaim) for c in d.changes)
        assert kinds.index("prepared") < kinds.index("claimed")

    def test_a_refusal_of_invoke_writes_nothing_not_even_the_op(self):
        ctx, pview, view = setup(World(op="absent", placement=False))
        with pytest.raises(PlacementUnbound):
            precheck(ctx, pview, view, params())
        with pytest.raises(PlacementUnbound):
            decide(ctx, pview, view, params())

    def test_submit_refuses_first(self):
        ctx, pview, view = setup(World(op="absent", placement=False))
        with pytest.raises(UnknownAct):
            decide(ctx, pview, view, params(act="nope"))

    def test_a_reroute_and_the_stop_write_nothing(self):
        ctx, pview, view = setup(World(op="absent"))
        rerouted = decide(ctx, pview, view, params(), worker="w1")
        assert rerouted.reply == Reroute("w0") and rerouted.changes == ()
        stopped = decide(ctx, pview, view, params(), stopping=True)
        assert isinstance(stopped.reply, TokenVoid) and stopped.changes == ()

    def test_the_request_may_name_the_generation_and_the_epoch(self):
        """Without them the neuron's current placement generation is taken;
        given, they fence as invoke's do."""
        ctx, pview, view = setup(World(op="absent"))
        assert decide(ctx, pview, view, params(placement_generation=5, expected_epoch=3)).reply
        codes = []
        for extra in ({"placement_generation": 4}, {"expected_epoch": 2}):
            with pytest.raises(WarddError) as ei:
                decide(ctx, pview, view, params(**extra))
            codes.append(ei.value.code)
        assert codes == ["generation_mismatch", "epoch_mismatch"]


class TestExistingOp:
    def test_other_content_is_op_conflict(self):
        ctx, pview, view = setup(states=())
        with pytest.raises(OpConflict):
            decide(ctx, pview, view, params(args=b"other"))

    @pytest.mark.parametrize("states", [(), (A.VOID,), (A.VOID, A.VOID)])
    def test_an_op_no_attempt_of_which_reached_a_claim_is_invoked(self, states):
        ctx, pview, view = setup(states=states)
        assert repeated(view) is None
        d = decide(ctx, pview, view, params())
        assert isinstance(d.reply, AttemptRef) and d.reply.attempt == len(states) + 1
        assert not any(isinstance(c, NewOp) for c in d.changes)

    @pytest.mark.parametrize(
        ("states", "answer"),
        [
            ((A.SUCCEEDED,), {"attempt": 1, "status": "succeeded", "result": b"v"}),
            ((A.VOID, A.FAILED, A.VOID), {"attempt": 2, "status": "failed", "error": "e"}),
            ((A.NOT_EXECUTED,), {"attempt": 1, "status": "not_executed", "error": "e"}),
        ],
    )
    def test_an_outcome_is_answered_and_nothing_runs(self, states, answer):
        ctx, pview, view = setup(states=states)
        d = decide(ctx, pview, view, params())
        assert d.changes == () and isinstance(d.reply, Answered)
        expected = {"op": "op-1", "state": view.op.state.value, "already": True, **answer}
        assert d.reply.result == expected
        assert precheck(ctx, pview, view, params()) == Answered(expected)

    @pytest.mark.parametrize(
        "states", [(A.UNKNOWN,), (A.FAILED, A.UNKNOWN), (A.UNKNOWN, A.NOT_EXECUTED)]
    )
    def test_an_unknown_attempt_is_attempt_unknown_naming_it(self, states):
        ctx, pview, view = setup(states=states)
        with pytest.raises(AttemptUnknown) as ei:
            decide(ctx, pview, view, params())
        assert ei.value.data == {"op": "op-1", "attempt": states.index(A.UNKNOWN) + 1}

    @pytest.mark.parametrize("state", [A.PREPARED, A.RUNNING])
    def test_an_open_attempt_is_attempt_busy_naming_it(self, state):
        ctx, pview, view = setup(states=(A.FAILED, state))
        with pytest.raises(AttemptBusy) as ei:
            decide(ctx, pview, view, params())
        assert ei.value.data == {"op": "op-1", "attempt": 2}

    def test_a_consumed_or_cancelled_op_answers_its_state(self):
        ctx, pview, view = setup(states=(A.SUCCEEDED,), consumed=True)
        assert decide(ctx, pview, view, params()).reply.result == {
            "op": "op-1",
            "state": "consumed",
            "already": True,
            "attempt": 1,
            "status": "succeeded",
            "result": b"v",
        }
        ctx, pview, view = setup(states=(A.VOID,), cancelled=True)
        got = decide(ctx, pview, view, params()).reply.result
        assert got == {"op": "op-1", "state": "cancelled", "already": True}

    def test_a_pruned_op_answers_as_submit(self):
        ctx, pview, view = setup(World(op="pruned"))
        view = attrs.evolve(
            view, tombstone=attrs.evolve(view.tombstone, args_digest=args_digest(ARGS))
        )
        d = decide(ctx, pview, view, params())
        assert d.reply == Answered(
            {"op": "op-1", "state": OpState.CONSUMED.value, "already": True, "pruned": True}
        )


class TestDoubtInRefusals:
    """A refusal ordered before the op's state runs nothing now, but says when
    an earlier attempt of the op reached its claim (or the op was pruned)."""

    @pytest.mark.parametrize(
        ("states", "data"),
        [
            ((A.SUCCEEDED,), {"op": "op-1", "attempt": 1, "may_have_run": True}),
            ((A.UNKNOWN, A.VOID), {"op": "op-1", "attempt": 1, "may_have_run": True}),
            ((A.VOID,), None),  # no attempt of it ever reached its claim
        ],
    )
    def test_unknown_act_names_an_earlier_claimed_attempt(self, states, data):
        ctx, pview, view = setup(states=states)
        for decided in (decide, lambda c, pv, v, p: precheck(c, pv, v, p)):
            with pytest.raises(UnknownAct) as ei:
                decided(ctx, pview, view, params(act="nope"))
            assert ei.value.data == data

    def test_a_pruned_op_may_have_run(self):
        ctx, pview, view = setup(World(op="pruned"))
        with pytest.raises(UnknownAct) as ei:
            decide(ctx, pview, view, params(act="nope"))
        assert ei.value.data == {"op": "op-1", "may_have_run": True}

    def test_a_cancelled_ops_success_is_answered_without_its_value(self):
        ctx, pview, view = setup(states=(A.SUCCEEDED,), cancelled=True)
        got = decide(ctx, pview, view, params()).reply.result
        assert got == {
            "op": "op-1",
            "state": "cancelled",
            "already": True,
            "attempt": 1,
            "status": "succeeded",
        }
