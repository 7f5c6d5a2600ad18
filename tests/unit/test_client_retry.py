"""`invoke`'s Retry on a scripted client: which answers are asked again, with
what, and how long it pauses (the real-daemon cases are in
tests/daemon/test_unattended.py; ``token_void`` is here because an `invoke`
meets it only while the daemon stops)."""

from __future__ import annotations

from typing import Any

import pytest

from wardd.client import HelloResult, MayHaveRun, Neuron, Retry, Session
from wardd.protocol import Overloaded, TokenVoid, WarddError

ROOT = {"epoch": 2, "placement_generation": 5}


class ScriptedClient:
    """Answers each call from a queue per method; an exception in it is raised."""

    def __init__(self, answers: dict[str, list[Any]], ops: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.ops = ops  # successive get_operation answers
        self.sent: list[tuple[str, dict[str, Any]]] = []
        self.hello_result = HelloResult(1, "wardd", "b" * 32, "n", 1 << 20)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        self.sent.append((method, dict(params or {})))
        if method == "get_neuron":
            return ROOT
        if method == "get_operation":
            return self.ops.pop(0) if len(self.ops) > 1 else self.ops[0]
        answer = self.answers[method].pop(0)
        if isinstance(answer, WarddError):
            raise answer
        return answer

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


class TestRetryRecord:
    def test_the_pause_doubles_up_to_its_bound(self) -> None:
        retry = Retry(backoff=0.5, max_backoff=3.0)
        assert [retry.pause(n) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 3.0, 3.0]

    @pytest.mark.parametrize("bad", [{"max_attempts": 0}, {"backoff": -1.0}])
    def test_nonsense_is_refused(self, bad: dict[str, Any]) -> None:
        with pytest.raises(ValueError):
            Retry(**bad)
