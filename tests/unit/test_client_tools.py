"""GuardedTool's pure parts: the arguments' canonical form, the key
function, and how a `call`'s answer becomes a value or a typed error."""

from __future__ import annotations

import math

import pytest

from wardd.client import ActFailed, Called, MayHaveRun, arguments_key, canonical_arguments
from wardd.client._doubt import refusal_in_doubt
from wardd.client._tools import value_of
from wardd.protocol import Terminal, error_for, is_id


class TestCanonicalArguments:
    def test_sorted_keys_no_whitespace_utf8(self):
        """The same arguments in any order are the same bytes (the same op content)."""
        a = canonical_arguments({"b": [1, 2], "a": "é"})
        assert a == canonical_arguments({"a": "é", "b": [1, 2]}) == '{"a":"é","b":[1,2]}'.encode()

    @pytest.mark.parametrize("bad", [{"x": math.nan}, {"x": b"bytes"}, {"x": {1, 2}}])
    def test_what_json_cannot_carry_is_refused_before_sending(self, bad):
        with pytest.raises((TypeError, ValueError)):
            canonical_arguments(bad)


class TestArgumentsKey:
    def test_a_scope_and_a_digest_of_the_arguments_make_an_op_id(self):
        key = arguments_key("thread-1")
        k = key({"amount": 5})
        assert k.startswith("thread-1:") and is_id(k)
        assert k == key({"amount": 5}) != key({"amount": 6})
        assert k != arguments_key("thread-2")({"amount": 5})

    @pytest.mark.parametrize("scope", ["", "has space", "a/b", "x" * 81])
    def test_a_scope_that_cannot_start_an_op_id_is_refused(self, scope):
        with pytest.raises(ValueError):
            arguments_key(scope)


def called(**wire):
    return Called.from_wire({"op": "k", **wire})


class TestValueOf:
    def test_succeeded_is_its_value_whatever_the_op_state(self):
        assert value_of(called(attempt=1, status="succeeded", result={"v": 1})) == {"v": 1}
        consumed = called(attempt=1, status="succeeded", result=2, state="consumed", already=True)
        assert value_of(consumed) == 2

    @pytest.mark.parametrize("status", ["failed", "not_executed"])
    def test_a_definite_failure_is_act_failed(self, status):
        with pytest.raises(ActFailed) as ei:
            value_of(called(attempt=2, status=status, error="no"))
        assert (ei.value.op, ei.value.attempt, ei.value.status, ei.value.error) == (
            "k",
            2,
            status,
            "no",
        )

    @pytest.mark.parametrize("status", ["unknown", "running"])
    def test_what_may_have_run_is_may_have_run(self, status):
        with pytest.raises(MayHaveRun) as ei:
            value_of(called(attempt=3, status=status))
        assert (ei.value.op, ei.value.attempt) == ("k", 3)

    def test_an_op_cancelled_before_any_claim_holds_no_value(self):
        with pytest.raises(Terminal) as ei:
            value_of(called(state="cancelled", already=True))
        assert ei.value.data == {"state": "cancelled", "pruned": False}

    def test_a_pruned_op_may_have_run(self):
        """Its tombstone keeps no fate: never "nothing ran"."""
        with pytest.raises(MayHaveRun, match="pruned"):
            value_of(called(state="consumed", already=True, pruned=True))

    def test_a_cancelled_ops_success_ran_and_its_value_is_gone(self):
        with pytest.raises(MayHaveRun, match="discarded") as ei:
            value_of(called(attempt=1, status="succeeded", state="cancelled", already=True))
        assert (ei.value.op, ei.value.attempt) == ("k", 1)


class TestDoubtTable:
    """One table (wardd.client._doubt) for GuardedTool, wardd mcp and wardctl call."""

    @pytest.mark.parametrize(
        ("error", "doubt"),
        [
            (error_for("attempt_unknown", "m", {"op": "k", "attempt": 1}), True),
            (error_for("attempt_busy", "m", {"op": "k", "attempt": 1}), True),
            (error_for("internal", "m", {"reason": "fail_stop"}), True),  # after the claim
            (error_for("grant_disabled", "m", {"op": "k", "may_have_run": True}), True),
            (error_for("grant_disabled", "m"), False),
            (error_for("op_conflict", "m"), False),
            (error_for("internal", "m", {"reason": "claim_failed"}), False),  # before it
        ],
    )
    def test_which_answers_leave_the_act_in_doubt(self, error, doubt):
        assert refusal_in_doubt(error) is doubt
