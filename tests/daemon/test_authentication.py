"""Signed requests under load (contract §4): each gets its own signature check and
registration check, whether it is checked alone or among many at once."""

from __future__ import annotations

from tests.daemon.harness import NETWORK, Actor, code_of
from wardd.client import Neuron
from wardd.protocol import ErrorReply, Response


def _prog_params(name: str) -> dict[str, object]:
    return {"prog": name, "step_limit": 5}


class TestSignaturesInABurst:
    def test_each_pipelined_signed_request_gets_its_own_answer(self, daemon):
        """In a burst of pipelined signed requests, the valid ones are served and the
        forged, tampered and unregistered ones refused, each with its own error."""
        a = Actor(daemon)
        stranger = Neuron.generate()
        client = daemon.connect()
        expected: dict[int, str] = {}
        for i in range(120):
            name = f"burst-{i}"
            kind = i % 4
            if kind == 0:  # valid
                params = a.neuron.sign("create_prog", _prog_params(name), NETWORK)
                want = "ok"
            elif kind == 1:  # signed by someone else, claiming to be a
                params = stranger.sign("create_prog", _prog_params(name), NETWORK)
                params["neuron"] = a.id
                want = "unauthenticated"
            elif kind == 2:  # tampered after signing
                params = a.neuron.sign("create_prog", _prog_params(name), NETWORK)
                params["step_limit"] = 6
                want = "unauthenticated"
            else:  # valid signature, neuron not registered
                params = stranger.sign("create_prog", _prog_params(name), NETWORK)
                want = "unknown_neuron"
            expected[client.send("create_prog", params)] = want
        got = {}
        for rid in expected:
            reply = client.recv_reply(rid)
            if isinstance(reply, Response):
                got[rid] = "ok"
            else:
                assert isinstance(reply, ErrorReply)
                got[rid] = reply.error.code
        assert got == expected
        for i in range(120):
            q = {"neuron": a.id, "prog": f"burst-{i}"}
            if i % 4 == 0:
                assert a.read("get_prog", q)["prog"] == f"burst-{i}"
            else:
                assert code_of(a.read, "get_prog", q).code == "unknown_prog"


class TestRegistration:
    def test_a_signed_request_right_after_register_neuron_passes(self, daemon):
        """A neuron may use signed methods from the moment its registration is answered."""
        client = daemon.connect()
        for _ in range(5):
            n = Neuron.generate()
            client.call("register_neuron", n.sign("register_neuron", {}, NETWORK))
            client.call("create_prog", n.sign("create_prog", _prog_params("p"), NETWORK))

    def test_a_neuron_refused_as_unknown_passes_once_registered(self, daemon):
        """unknown_neuron is not remembered: the same neuron passes after it registers,
        and another unregistered neuron is still refused."""
        client = daemon.connect()
        n, other = Neuron.generate(), Neuron.generate()
        signed = n.sign("create_prog", _prog_params("p"), NETWORK)
        assert code_of(client.call, "create_prog", signed).code == "unknown_neuron"
        client.call("register_neuron", n.sign("register_neuron", {}, NETWORK))
        client.call("create_prog", signed)
        late = other.sign("create_prog", _prog_params("p"), NETWORK)
        assert code_of(client.call, "create_prog", late).code == "unknown_neuron"
