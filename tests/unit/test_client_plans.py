"""wardd.client's ``Session``: the plans of signed operations (what each
method reads first, what it signs and sends), against a client that
answers from a table, and ``TrioSession`` over a trio memory stream."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests.unit._client_peer import NETWORK, ok, ready_core, trio_pair
from wardd.client import NO_VALUE, Neuron, RemoteProtocolError, Session, TrioSession
from wardd.protocol import verify

#: A write's smallest well-formed result (contract §4), for a FakeClient answer of ``{}``.
SMALLEST_RESULT: dict[str, dict[str, Any]] = {
    "invoke": {"op": "o", "attempt": 1, "status": "succeeded"},
    "execute": {"op": "o", "attempt": 1, "status": "succeeded"},
    "prepare": {"token": b"t", "attempt": {"attempt": 1}},
    "manual_take": {"attempt": {"attempt": 1, "state": "unknown"}},
    "set_prog_state": {"prog": "p", "state": "active"},
    "cancel": {"op": "o", "state": "cancelled"},
    "rebind": {"op": "o", "epoch": 3},
}


class FakeClient:
    """Answers calls from a dict of method → result (or a callable of params);
    ``{}`` answers a write with its smallest well-formed result."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = {
            method: SMALLEST_RESULT.get(method, answer) if answer == {} else answer
            for method, answer in answers.items()
        }
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.pending: list[tuple[str, dict[str, Any] | None]] = []
        self.hello_result = ready_core().hello_result

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        params = dict(params or {})
        self.calls.append((method, params))
        answer = self.answers[method]
        return answer(params) if callable(answer) else answer

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.pending.append((method, params))
        return len(self.pending) - 1

    def recv(self, rid: int) -> Any:
        return self.call(*self.pending[rid])

    def signed_calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(m, p) for m, p in self.calls if "sig" in p]


ROOT = {
    "neuron": "n",
    "epoch": 3,
    "policy_version": 7,
    "placement_generation": 5,
    "placement": None,
    "grants": {"p": {"acts": ["echo", "tool.run"], "enabled": True}},
}
DESCRIPTOR = {"v": 1, "executor": {"worker": "w1"}}
PROG = {"prog": "p", "state": "paused", "state_version": 4, "reservation_seq": 12}


def assert_signed_by(neuron: Neuron, method: str, params: dict[str, Any]) -> None:
    assert params["neuron"] == neuron.id
    assert verify(neuron.id, params["sig"], NETWORK, method, params)


class TestSession:
    def test_bind_uses_the_workers_current_descriptor_and_generation(self) -> None:
        """bind reads list_workers and get_neuron, then signs bind_placement with both."""
        neuron = Neuron.generate()
        fake = FakeClient(
            {
                "list_workers": {
                    "workers": [
                        {"worker": "w0", "descriptor": {"v": 1}},
                        {"worker": "w1", "descriptor": DESCRIPTOR},
                    ]
                },
                "get_neuron": ROOT,
                "bind_placement": {"placement_generation": 6},
            }
        )
        session = Session(fake, neuron)  # type: ignore[arg-type]
        assert session.bind("w1").to_wire() == {"placement_generation": 6}
        ((method, params),) = fake.signed_calls()
        assert method == "bind_placement"
        assert params["descriptor"] == DESCRIPTOR and params["expected_generation"] == 5
        assert_signed_by(neuron, method, params)
        assert ("get_neuron", {"neuron": neuron.id}) in fake.calls

    def test_bind_to_an_unhosted_worker_says_which_exist(self) -> None:
        """A worker the daemon does not host is refused before anything is signed."""
        fake = FakeClient({"list_workers": {"workers": [{"worker": "w0", "descriptor": {}}]}})
        with pytest.raises(Exception, match="w9.*w0"):
            Session(fake, Neuron.generate()).bind("w9")  # type: ignore[arg-type]
        assert fake.signed_calls() == []

    @pytest.mark.parametrize("method", ["invoke", "prepare"])
    def test_attempts_always_send_expected_epoch(self, method: str) -> None:
        """contract §4: the bundled clients always send expected_epoch (read from get_neuron)."""
        neuron = Neuron.generate()
        fake = FakeClient(
            {
                "get_neuron": ROOT,
                "get_operation": {"op": "o", "attempts": [{"attempt": 1}, {"attempt": 2}]},
                method: {},
            }
        )
        getattr(Session(fake, neuron), method)("o")  # type: ignore[arg-type]
        ((sent, params),) = fake.signed_calls()
        assert sent == method
        assert {
            k: params[k]
            for k in ("op", "expected_attempt", "placement_generation", "expected_epoch")
        } == {"op": "o", "expected_attempt": 3, "placement_generation": 5, "expected_epoch": 3}
        assert_signed_by(neuron, method, params)

    def test_a_pinned_epoch_is_sent_without_reading_it(self) -> None:
        """Session(epoch=N) fences with N, even if the daemon's epoch has moved on."""
        fake = FakeClient({"get_neuron": ROOT, "manual_take": {}, "rebind": {}})
        session = Session(fake, Neuron.generate(), epoch=2)  # type: ignore[arg-type]
        session.manual_take("o", expected_attempt=1)
        session.rebind("o")
        sent = fake.signed_calls()
        assert [p["expected_epoch"] for _, p in sent] == [2, 2]
        assert "placement_generation" not in sent[0][1]
        assert not any(m == "get_neuron" for m, _ in fake.calls)

    def test_grant_reads_the_policy_version_and_can_keep_the_acts(self) -> None:
        """grant sends expected_policy_version from get_neuron; acts=None keeps the current set."""
        fake = FakeClient({"get_neuron": ROOT, "set_grant": {"policy_version": 8, "voided": 0}})
        session = Session(fake, Neuron.generate())  # type: ignore[arg-type]
        session.grant("p", ["b", "a", "a"])
        session.grant("p", None, enabled=False)
        (_, first), (_, second) = fake.signed_calls()
        assert first["acts"] == ["a", "b"] and first["enabled"] is True
        assert first["expected_policy_version"] == 7
        assert second["acts"] == ["echo", "tool.run"] and second["enabled"] is False

    def test_set_prog_state_always_sends_expected_state_version(self) -> None:
        """contract §3.4: the bundled clients always send it, read from get_prog unless given."""
        neuron = Neuron.generate()
        fake = FakeClient({"get_prog": PROG, "set_prog_state": {}})
        session = Session(fake, neuron)  # type: ignore[arg-type]
        session.set_prog_state("p", "active")
        session.set_prog_state("p", "active", expected_state="active")
        reads = len(fake.calls)
        session.set_prog_state("p", "retired", expected_state="active", expected_state_version=9)
        assert len(fake.calls) == reads + 1  # both given: nothing read first
        sent = fake.signed_calls()
        assert [p["expected_state_version"] for _, p in sent] == [4, 4, 9]
        assert [p["expected_state"] for _, p in sent] == ["paused", "active", "active"]
        assert ("get_prog", {"neuron": neuron.id, "prog": "p"}) in fake.calls
        for method, params in sent:
            assert_signed_by(neuron, method, params)

    def test_recover_reservations_always_sends_before(self) -> None:
        """contract §3.4: `before` is always sent; by default the prog's reservation_seq."""
        neuron = Neuron.generate()
        fake = FakeClient({"get_prog": PROG, "recover_reservations": {"released": 1}})
        session = Session(fake, neuron)  # type: ignore[arg-type]
        assert session.recover_reservations("p").released == 1
        session.recover_reservations("p", before=2)
        sent = fake.signed_calls()
        assert [p["before"] for _, p in sent] == [12, 2]
        assert [m for m, _ in fake.calls].count("get_prog") == 1
        assert_signed_by(neuron, *sent[0])

    def test_reconcile_distinguishes_no_value_from_null(self) -> None:
        """NO_VALUE omits outcome.value; None sends a null value."""
        fake = FakeClient({"reconcile": {"op": "o", "attempt": 1, "status": "failed"}})
        session = Session(fake, Neuron.generate())  # type: ignore[arg-type]
        session.reconcile("o", 1, "failed")
        session.reconcile("o", 1, "succeeded", None)
        session.reconcile("o", 1, "succeeded", NO_VALUE)
        outcomes = [p["outcome"] for _, p in fake.signed_calls()]
        assert outcomes == [
            {"status": "failed"},
            {"status": "succeeded", "value": None},
            {"status": "succeeded"},
        ]

    def test_paged_reads_follow_next(self) -> None:
        """list_operations returns every page, passing each page's next as after."""
        items = [{"op": name, "state": "unknown"} for name in "abc"]
        pages = {None: {"operations": items[:2], "next": "b"}, "b": {"operations": items[2:]}}
        fake = FakeClient({"list_operations": lambda p: pages[p.get("after")]})
        session = Session(fake, Neuron.generate())  # type: ignore[arg-type]
        assert [o.op for o in session.list_operations(state="unknown")] == ["a", "b", "c"]
        assert [p.get("after") for _, p in fake.calls] == [None, "b"]
        assert all(p["state"] == "unknown" and "sig" not in p for _, p in fake.calls)

    def test_a_paged_read_that_breaks_the_paging_rules_is_a_protocol_error(self) -> None:
        """A repeated `next` cursor or a page that is not a map is a
        RemoteProtocolError naming the method, never an endless loop or a crash."""
        session = Session(  # type: ignore[arg-type]
            FakeClient({"list_operations": lambda p: {"operations": [1], "next": "a"}}),
            Neuron.generate(),
        )
        with pytest.raises(RemoteProtocolError, match="list_operations: .*cursor came twice"):
            session.list_operations()
        session = Session(  # type: ignore[arg-type]
            FakeClient({"list_attempts": lambda p: ["not", "a", "map"]}), Neuron.generate()
        )
        with pytest.raises(RemoteProtocolError, match="list_attempts: a page is not a map"):
            session.list_attempts("unknown")

    def test_an_explicit_network_is_sent_and_signed(self) -> None:
        """Session(network=...) signs for that network and names it in params."""
        neuron = Neuron.generate()
        fake = FakeClient({"cancel": {}})
        Session(fake, neuron, network="lab").cancel("o")  # type: ignore[arg-type]
        ((_, params),) = fake.signed_calls()
        assert params["network"] == "lab"
        assert verify(neuron.id, params["sig"], "lab", "cancel", params)

    async def test_trio_session_runs_the_same_plans(self, nursery: trio.Nursery) -> None:
        """TrioSession signs the same requests over a TrioClient."""
        client, peer = await trio_pair(nursery)
        neuron = Neuron.generate()
        session = TrioSession(client, neuron)
        seen: list[dict[str, Any]] = []

        async def daemon() -> None:
            for answer in (ROOT, {"epoch": 4}):
                req = await peer.request()
                seen.append(req)
                await peer.send(ok(req["id"], answer))

        nursery.start_soon(daemon)
        assert (await session.advance_epoch()).epoch == 4
        assert [r["method"] for r in seen] == ["get_neuron", "advance_epoch"]
        params = seen[1]["params"]
        assert params["expected_epoch"] == 3
        assert_signed_by(neuron, "advance_epoch", params)
        await client.aclose()

    async def test_trio_session_sends_the_prog_fences(self, nursery: trio.Nursery) -> None:
        """TrioSession also always sends expected_state_version and before (from get_prog)."""
        client, peer = await trio_pair(nursery)
        neuron = Neuron.generate()
        session = TrioSession(client, neuron)
        seen: list[dict[str, Any]] = []

        async def daemon() -> None:
            changed = {"prog": "p", "state": "active", "state_version": 5}
            for answer in (PROG, changed, PROG, {"released": 0}):
                req = await peer.request()
                seen.append(req)
                await peer.send(ok(req["id"], answer))

        nursery.start_soon(daemon)
        await session.set_prog_state("p", "active")
        await session.recover_reservations("p")
        assert [r["method"] for r in seen] == [
            "get_prog",
            "set_prog_state",
            "get_prog",
            "recover_reservations",
        ]
        state, recover = seen[1]["params"], seen[3]["params"]
        assert (state["expected_state"], state["expected_state_version"]) == ("paused", 4)
        assert recover["before"] == 12
        assert_signed_by(neuron, "set_prog_state", state)
        assert_signed_by(neuron, "recover_reservations", recover)
        await client.aclose()
