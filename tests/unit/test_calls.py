"""The call-state table (`wardd.daemon.dispatch.calls`): moves as data, tested without threads."""

from __future__ import annotations

import pytest

from tests.unit._refs import attempt_ref
from wardd.daemon.core.records import AttemptRef
from wardd.daemon.dispatch.calls import (
    CALL_MOVES,
    CallEnd,
    CallEvent,
    CallPhase,
    Calls,
    ClaimEntry,
    IllegalCallMove,
    move_call,
)
from wardd.protocol import AttemptState

P, E, A = CallPhase, CallEvent, AttemptState


def ref(attempt_id: int = 7) -> AttemptRef:
    return attempt_ref(attempt_id, op_id=3, digest="d" * 64)


class TestCallMoves:
    def test_the_moves_are_exactly_these(self):
        """The table is the whole state machine: a call's life in ten moves."""
        assert dict(CALL_MOVES) == {
            (P.CLAIMED, E.BEGIN): P.CALLING,
            (P.CLAIMED, E.ABORT): P.CANCELLED,
            (P.CLAIMED, E.END): P.DONE,
            (P.CALLING, E.ABORT): P.KILLING,
            (P.CALLING, E.END): P.DONE,
            (P.CANCELLED, E.BEGIN): P.CANCELLED,
            (P.CANCELLED, E.ABORT): P.CANCELLED,
            (P.CANCELLED, E.END): P.ABORTED,
            (P.KILLING, E.ABORT): P.KILLING,
            (P.KILLING, E.END): P.ABORTED,
        }

    @pytest.mark.parametrize("phase", list(CallPhase))
    @pytest.mark.parametrize("event", list(CallEvent))
    def test_a_move_outside_the_table_raises(self, phase, event):
        """move_call answers the table's phase, and refuses any other move."""
        if (phase, event) in CALL_MOVES:
            assert move_call(phase, event) is CALL_MOVES[(phase, event)]
        else:
            with pytest.raises(IllegalCallMove):
                move_call(phase, event)

    @pytest.mark.parametrize("phase", [P.DONE, P.ABORTED])
    def test_a_call_whose_adapter_returned_takes_no_abort(self, phase):
        """contract §3.8: an abort after the adapter returned is not_running."""
        with pytest.raises(IllegalCallMove):
            move_call(phase, E.ABORT)

    def test_every_phase_is_reachable_from_claimed_and_ends(self):
        """No dead phase: each is reached from claimed, and each but the two
        ends can still end."""
        seen, todo = {P.CLAIMED}, [P.CLAIMED]
        while todo:
            here = todo.pop()
            for (src, _event), dst in CALL_MOVES.items():
                if src is here and dst not in seen:
                    seen.add(dst)
                    todo.append(dst)
        assert seen == set(CallPhase)
        ends = {P.DONE, P.ABORTED}
        assert {src for src, _ in CALL_MOVES} == set(CallPhase) - ends


class TestCalls:
    def test_a_call_without_abort_runs_and_ends_done(self):
        """begin says call it; end says no abort was taken; settle forgets it."""
        calls, owner = Calls(), object()
        calls.claimed(ref(), owner)
        assert calls.owned_by(owner) == ref()
        assert calls.begin(7) is True
        assert calls.end(7) is False
        calls.settle(7, None, CallEnd(A.SUCCEEDED, {"ok": 1}))
        assert len(calls) == 0 and calls.owned_by(owner) is None

    def test_an_abort_before_the_call_keeps_it_from_starting(self):
        """An abort taken while claimed: the adapter is never called, and the
        waiters learn the end once it is settled."""
        calls, told = Calls(), []
        calls.claimed(ref(), object())
        assert calls.abort(7, lambda end, err: told.append((end, err))) is None  # nothing to kill
        assert calls.begin(7) is False
        assert calls.end(7) is True
        end = CallEnd(A.UNKNOWN, error="the call was not started", killed=True).after_abort()
        calls.settle(7, None, end)
        assert told == [(end, None)]

    def test_an_abort_during_the_call_asks_for_a_kill_each_time(self):
        """While calling, each abort returns the call (its process group is killed)."""
        calls = Calls()
        calls.claimed(ref(), object())
        calls.begin(7)
        first = calls.abort(7, lambda end, err: None)
        second = calls.abort(7, lambda end, err: None)
        assert first is not None and second is first and first.phase is P.KILLING
        assert calls.end(7) is True

    def test_no_abort_once_the_adapter_returned_or_for_an_unknown_attempt(self):
        """abort raises LookupError: the pool answers not_running."""
        calls = Calls()
        with pytest.raises(LookupError):
            calls.abort(7, lambda end, err: None)
        calls.claimed(ref(), object())
        calls.begin(7)
        calls.end(7)
        with pytest.raises(LookupError):
            calls.abort(7, lambda end, err: None)

    def test_an_unregistered_call_is_called_and_reports_no_abort(self):
        """begin/end of an attempt with no call (never registered) change nothing."""
        calls = Calls()
        assert calls.begin(9) is True
        assert calls.end(9) is False


class TestCallEnd:
    """A call's end as one value: what an abort taken for the call makes of it."""

    def test_an_unknown_end_the_kill_caused_says_aborted_true(self):
        """contract §3.8: the abort ended the call; its error says so."""
        end = CallEnd(A.UNKNOWN, error="killed", killed=True).after_abort()
        assert (end.status, end.aborted) == (A.UNKNOWN, True)
        assert end.error == "aborted by the operator (killed)"

    def test_an_unknown_end_of_its_own_says_aborted_false(self):
        """The call ended unknown before the kill reached it: aborted false, its own error."""
        end = CallEnd(A.UNKNOWN, error="exit 3").after_abort()
        assert (end.status, end.error, end.aborted) == (A.UNKNOWN, "exit 3", False)

    def test_a_call_that_succeeded_or_failed_keeps_its_outcome(self):
        """The adapter had returned: the abort changes nothing of the outcome."""
        for end in (CallEnd(A.SUCCEEDED, {"v": 1}), CallEnd(A.FAILED, error="no effect")):
            assert end.after_abort() == end and end.aborted is None

    def test_no_error_text_still_names_the_abort(self):
        end = CallEnd(A.UNKNOWN, killed=True).after_abort()
        assert end.error == "aborted by the operator (no detail)"


class TestClaimEntry:
    def test_entering_registers_the_call_under_its_owner(self):
        """The claim unit's value enters the call, owned by the dispatch's reply."""
        calls, owner = Calls(), object()
        ClaimEntry(calls, owner).enter(ref())
        assert calls.owned_by(owner) == ref() and len(calls) == 1
