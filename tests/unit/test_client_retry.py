"""`invoke`'s Retry on a scripted client: which answers are asked again, with
what, and how long it pauses (the real-daemon cases are in
tests/daemon/test_unattended.py; ``token_void`` is here because an `invoke`
meets it only while the daemon stops)."""

from __future__ import annotations

from typing import Any

import pytest

from wardd.client import DispatchTimedOut, HelloResult, MayHaveRun, Neuron, Retry, Session
from wardd.protocol import Internal, Overloaded, TokenVoid, error_for

ROOT = {"epoch": 2, "placement_generation": 5}


class ScriptedClient:
    """Answers each call from a queue per method; an exception in it is raised."""

    def __init__(self, answers: dict[str, list[Any]], ops: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.ops = ops  # successive get_operation answers
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.pending: list[tuple[str, dict[str, Any] | None]] = []
        self.hello_result = HelloResult(1, "wardd", "b" * 32, "n", 1 << 20)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.sent.append((method, dict(params or {})))
        if method == "get_neuron":
            return ROOT
        if method == "get_operation":
            return self.ops.pop(0) if len(self.ops) > 1 else self.ops[0]
        answer = self.answers[method].pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.pending.append((method, params))
        return len(self.pending) - 1

    def recv(self, rid: int) -> Any:
        return self.call(*self.pending[rid])

    def invokes(self) -> list[dict[str, Any]]:
        return [p for m, p in self.sent if m == "invoke"]


def session(client: ScriptedClient) -> Session:
    return Session(client, Neuron.generate())  # type: ignore[arg-type]


class TestRetryRules:
    def test_token_void_asks_again_for_the_next_attempt(self) -> None:
        """A voided attempt never ran: the retry reads the attempt count again and asks."""
        void = TokenVoid("voided", {"reason": "shutdown"})
        done = {"op": "o", "attempt": 2, "status": "succeeded", "result": b""}
        client = ScriptedClient(
            {"invoke": [void, done]},
            [{"attempts": []}, {"attempts": [{"attempt": 1, "state": "void"}]}],
        )
        seen: list[Any] = []
        retry = Retry(max_attempts=2, backoff=0, on_retry=lambda n, a: seen.append((n, a)))
        assert session(client).invoke("o", retry=retry).to_wire() == done
        assert [p["expected_attempt"] for p in client.invokes()] == [1, 2]
        assert seen == [(1, void)]

    def test_overloaded_asks_again_with_the_same_fences(self) -> None:
        done = {"op": "o", "attempt": 1, "status": "succeeded"}
        client = ScriptedClient({"invoke": [Overloaded("busy"), done]}, [{"attempts": []}])
        assert session(client).invoke("o", retry=Retry(backoff=0)).to_wire() == done
        first, second = client.invokes()
        keys = ("expected_attempt", "placement_generation", "expected_epoch")
        assert [first[k] for k in keys] == [second[k] for k in keys] == [1, 5, 2]

    def test_the_last_refusal_is_raised_when_the_asks_are_spent(self) -> None:
        client = ScriptedClient({"invoke": [Overloaded("a"), Overloaded("b")]}, [{"attempts": []}])
        with pytest.raises(Overloaded, match="b"):
            session(client).invoke("o", retry=Retry(max_attempts=2, backoff=0))

    def test_without_retry_nothing_is_asked_again_and_unknown_is_returned(self) -> None:
        unknown = {"op": "o", "attempt": 1, "status": "unknown", "error": "killed"}
        client = ScriptedClient({"invoke": [Overloaded("x")]}, [{"attempts": []}])
        with pytest.raises(Overloaded):
            session(client).invoke("o")
        client = ScriptedClient({"invoke": [unknown]}, [{"attempts": []}])
        assert session(client).invoke("o").to_wire() == unknown
        client = ScriptedClient({"invoke": [unknown]}, [{"attempts": []}])
        with pytest.raises(MayHaveRun, match="attempt 1 of op o is unknown"):
            session(client).invoke("o", retry=Retry(backoff=0))
        assert len(client.invokes()) == 1

    def test_other_refusals_are_never_retried(self) -> None:
        from wardd.protocol import ActNotGranted

        client = ScriptedClient({"invoke": [ActNotGranted("no")]}, [{"attempts": []}])
        with pytest.raises(ActNotGranted):
            session(client).invoke("o", retry=Retry(max_attempts=5, backoff=0))
        assert len(client.invokes()) == 1


class TestAnswersAfterTheClaim:
    """An answer that can come after a dispatch's claim is never a refusal: it raises
    MayHaveRun naming the op and attempt, with or without Retry, and nothing is asked
    again."""

    @pytest.mark.parametrize("retry", [None, Retry(backoff=0)], ids=["plain", "retry"])
    def test_internal_to_invoke_may_have_run(self, retry: Retry | None) -> None:
        lost = Internal("the outcome could not be stored", {"reason": "fail_stop"})
        client = ScriptedClient({"invoke": [lost]}, [{"attempts": [{"attempt": 1}]}])
        with pytest.raises(MayHaveRun) as info:
            session(client).invoke("o", retry=retry)
        assert (info.value.op, info.value.attempt, info.value.answer) == ("o", 2, lost)
        assert info.value.__cause__ is lost and "attempt 2 of op o may have run" in str(info.value)
        assert len(client.invokes()) == 1

    def test_execute_names_the_attempt_the_daemon_names(self) -> None:
        data = {"reason": "fail_stop", "op": "o", "attempt": 3}
        client = ScriptedClient({"execute": [Internal("lost", data)]}, [])
        with pytest.raises(MayHaveRun) as info:
            session(client).execute(b"t" * 32)
        assert (info.value.op, info.value.attempt) == ("o", 3)
        assert "wardctl op show o" in str(info.value)

    def test_execute_of_a_prepared_token_names_its_attempt_from_the_prepare(self) -> None:
        """The daemon's answer names nothing: the session names the op and attempt
        the token was prepared for (the token itself never appears)."""
        token = b"t" * 32
        prepared = {"token": token, "attempt": {"attempt": 4}}
        client = ScriptedClient(
            {"prepare": [prepared], "execute": [Internal("the reply failed")]},
            [{"attempts": [{"attempt": n} for n in (1, 2, 3)]}],
        )
        s = session(client)
        assert s.prepare("o").attempt.attempt == 4
        with pytest.raises(MayHaveRun) as info:
            s.execute(token)
        assert (info.value.op, info.value.attempt) == ("o", 4)
        assert "attempt 4 of op o may have run" in str(info.value)
        assert repr(token) not in str(info.value) and "tttt" not in str(info.value)

    def test_call_answered_internal_may_have_run(self) -> None:
        data = {"reason": "fail_stop", "op": "c", "attempt": 2}
        client = ScriptedClient({"call": [Internal("lost", data)]}, [])
        with pytest.raises(MayHaveRun) as info:
            session(client).call("p", "c", "echo", b"x")
        assert (info.value.op, info.value.attempt) == ("c", 2)

    def test_a_code_this_client_does_not_know_may_have_run(self) -> None:
        newer = error_for("from_a_newer_daemon", "what?")
        client = ScriptedClient({"invoke": [newer]}, [{"attempts": []}])
        with pytest.raises(MayHaveRun):
            session(client).invoke("o", retry=Retry(backoff=0))

    def test_other_methods_and_refusals_keep_their_error(self) -> None:
        client = ScriptedClient({"cancel": [Internal("x")]}, [])
        with pytest.raises(Internal):
            session(client).cancel("o")
        unclaimed = Internal("the claim could not be committed", {"reason": "claim_failed"})
        client = ScriptedClient({"invoke": [unclaimed]}, [{"attempts": []}])
        with pytest.raises(Internal):  # decided before the claim: the act was not called
            session(client).invoke("o")
        client = ScriptedClient({"execute": [TokenVoid("v", {"reason": "revoked"})]}, [])
        with pytest.raises(TokenVoid):
            session(client).execute(b"t" * 32)

    def test_a_client_timeout_while_waiting_names_the_attempt(self) -> None:
        """The blocking Client's socket timeout during a dispatch's wait raises
        DispatchTimedOut (a TimeoutError and a MayHaveRun); during a read, the
        TimeoutError as it is."""
        waited = TimeoutError("timed out waiting for the daemon's reply")
        client = ScriptedClient({"invoke": [waited]}, [{"attempts": []}])
        with pytest.raises(DispatchTimedOut) as info:
            session(client).invoke("o")
        assert isinstance(info.value, TimeoutError) and isinstance(info.value, MayHaveRun)
        assert (info.value.op, info.value.attempt) == ("o", 1)
        assert "attempt 1 of op o may have run" in str(info.value)
        client = ScriptedClient({"get_prog": [waited]}, [])
        with pytest.raises(TimeoutError) as plain:
            session(client).get_prog("p")
        assert plain.value is waited


class TestRetryRecord:
    def test_the_pause_doubles_up_to_its_bound(self) -> None:
        retry = Retry(backoff=0.5, max_backoff=3.0)
        assert [retry.pause(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]

    @pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"backoff": -1.0}])
    def test_nonsense_is_refused(self, bad: dict[str, Any]) -> None:
        with pytest.raises(ValueError):
            Retry(**bad)
