"""The guarded dispatch path over the wire (contract §3.1-§3.3, §5 acceptance scenarios).

Effects are counted in real ledger files written by the acts themselves
(``file.append`` and ``cli``), never by flags inside the daemon.
"""

from __future__ import annotations

import os

import pytest

from tests._poll import wait_for
from tests.daemon.harness import NETWORK, Actor, Background, code_of, key
from wardd.client import Neuron
from wardd.protocol import WarddError


class TestRoundTrip:
    def test_complete_round_trip_alongside_an_independent_prog(self, daemon):
        a = Actor(daemon, acts=("echo", "ledger"))
        a.call("create_prog", {"prog": "prog-b", "step_limit": 10})
        a.grant(["echo"], prog="prog-b")
        a.submit("a1", "echo", b"\x00hi\xff")
        a.submit("b1", "echo", b"bee", prog="prog-b")
        token_b, _ = a.prepare("b1")
        token, meta = a.prepare("a1")
        root = a.root()
        assert meta["epoch"] == root["epoch"] and meta["attempt"] == 1
        assert meta["placement_generation"] == root["placement_generation"]
        assert token not in repr(meta).encode()
        res = a.execute(token)
        assert res == {"op": "a1", "attempt": 1, "status": "succeeded", "result": b"\x00hi\xff"}
        assert a.state("a1") == "retained"
        got = a.call("consume", {"op": "a1"})
        assert got["result"]["value"] == b"\x00hi\xff" and got["result"]["source"] == "adapter"
        assert a.state("a1") == "consumed"
        assert code_of(a.call, "consume", {"op": "a1"}).code == "terminal"
        kinds = [r["kind"] for r in a.history("a1")]
        assert kinds == ["submitted", "prepared", "claimed", "outcome", "consumed"]
        recs = a.history("a1")
        assert recs[0]["follows"] is None
        assert all(b["follows"] == f["seq"] for f, b in zip(recs, recs[1:], strict=False))
        # a file.append act: exactly one line, the documented one
        a.submit("a2", "ledger", b"L")
        assert a.invoke("a2")["status"] == "succeeded"
        assert daemon.env.ledger_lines() == [f"{key(a, 'a2')}\t{b'L'.hex()}"]
        # revoking prog A leaves prog B's prepared token alone
        a.grant([], prog="prog-a")
        assert a.execute(token_b)["result"] == b"bee"
        assert daemon.env.ledger_lines() == [f"{key(a, 'a2')}\t{b'L'.hex()}"]

    def test_submit_is_idempotent_for_identical_content_only(self, daemon):
        a = Actor(daemon, acts=("echo", "quick"))
        assert "already" not in a.submit("op", "echo", b"x")
        assert a.submit("op", "echo", b"x")["already"] is True
        assert code_of(a.submit, "op", "echo", b"y").code == "op_conflict"
        assert code_of(a.submit, "op", "quick", b"x").code == "op_conflict"
        assert code_of(a.submit, "new", "no.such.act", b"").code == "unknown_act"
        assert code_of(a.submit, "big", "echo", b"x" * 65537).code == "args_too_large"
        assert [r["kind"] for r in a.history("op")] == ["submitted"]

    def test_adapter_outcomes_failed_and_unknown(self, daemon):
        a = Actor(daemon, acts=("nofx", "boom"))
        a.submit("n", "nofx")
        r = a.invoke("n")
        assert r["status"] == "failed" and isinstance(r["error"], str)
        assert a.state("n") == "pending"
        assert a.invoke("n", attempt=2)["status"] == "failed"
        a.submit("b", "boom")
        r = a.invoke("b")
        assert r["status"] == "unknown" and a.state("b") == "unknown"
        assert code_of(a.prepare, "b", 2).code == "attempt_unknown"
        st = a.read("status")
        w0 = next(w for w in st["workers"] if w["id"] == "w0")
        assert w0["counts"] == {"succeeded": 0, "failed": 2, "unknown": 1}
        assert st["unknown_attempts"] == 1

    def test_cli_act_gets_args_on_stdin_and_its_context(self, make_daemon):
        from tests.daemon.harness import Env

        env = Env(
            acts={
                "pipe": {
                    "adapter": "cli",
                    "argv": [
                        "/bin/sh",
                        "-c",
                        'cat; printf "|%s|%s|%s|%s" "$WARDD_OP" "$WARDD_ATTEMPT" '
                        '"$WARDD_IDEMPOTENCY_KEY" "$WARDD_BOOT"',
                    ],
                }
            }
        )
        d = make_daemon(env)
        a = Actor(d, acts=("pipe",))
        a.submit("p1", "pipe", b"in")
        r = a.invoke("p1")
        assert r["status"] == "succeeded"
        assert r["result"]["stdout"] == f"in|p1|1|{key(a, 'p1')}|{d.boot}".encode()
        assert r["result"]["truncated"] is False


class TestRevocation:
    def test_revoke_after_prepare_before_claim_voids_the_token(self, daemon):
        a = Actor(daemon, acts=("ledger",))
        a.submit("op", "ledger", b"x")
        token, _ = a.prepare("op")
        res = a.grant([])
        assert res["voided"] == 1
        err = code_of(a.execute, token)
        assert err.code == "token_void" and err.data["reason"] == "revoked"
        att = a.op("op")["attempts"][0]
        assert (att["state"], att["reason"], att["claimed"]) == ("void", "revoked", False)
        assert daemon.env.ledger_lines() == []
        assert code_of(a.execute, token).code in ("token_invalid", "token_void")

    def test_revoke_during_a_running_call_waits_and_the_outcome_is_accepted(self, daemon):
        env = daemon.env
        a = Actor(daemon, acts=("gated",))
        a.submit("g", "gated")
        call = Background(a.invoke, "g", 1, daemon.connect())
        wait_for(env.started_marker("g").exists, what="the gated act to start")
        other = daemon.connect()
        params = {
            "prog": a.prog,
            "acts": [],
            "enabled": True,
            "expected_policy_version": a.root()["policy_version"],
        }
        revoke = Background(a.call, "set_grant", params, other)
        # the revocation cannot return while the call holds the ward guard
        assert not revoke.done.wait(0.5)
        env.open_gate("g")
        revoke.result()
        # by the time the revocation returned, the call had returned (its effect is there)
        assert env.ledger_lines(env.cli_ledger) == [key(a, "g")]
        assert call.result()["status"] == "succeeded"
        assert a.state("g") == "retained"
        out = a.op("g")["attempts"][0]["outcome"]
        assert (out["status"], out["source"]) == ("succeeded", "adapter")

    def test_pause_voids_prepared_tokens_so_resume_cannot_run_them(self, daemon):
        a = Actor(daemon, acts=("ledger",))
        a.submit("op", "ledger")
        token, _ = a.prepare("op")
        a.call("set_prog_state", {"prog": a.prog, "expected_state": "active", "state": "paused"})
        a.call("set_prog_state", {"prog": a.prog, "expected_state": "paused", "state": "active"})
        err = code_of(a.execute, token)
        assert (err.code, err.data["reason"]) == ("token_void", "prog_inactive")
        assert daemon.env.ledger_lines() == []

    def test_epoch_advance_voids_tokens_and_retires_old_signed_prepares(self, daemon):
        a = Actor(daemon, acts=("echo",))
        a.submit("op")
        old = a.prepare_params("op")
        token, _ = a.prepare("op")
        assert a.call("advance_epoch", {"expected_epoch": 1}) == {"epoch": 2, "voided": 1}
        assert code_of(a.execute, token).data["reason"] == "epoch_changed"
        old["expected_attempt"] = 2
        assert code_of(a.call, "prepare", old).code == "epoch_mismatch"
        assert code_of(a.call, "advance_epoch", {"expected_epoch": 1}).code == "epoch_mismatch"


class TestReplacement:
    def test_rebind_voids_the_old_token(self, daemon):
        a = Actor(daemon, acts=("ledger",))
        a.submit("op", "ledger")
        token, _ = a.prepare("op")
        a.bind(0)
        err = code_of(a.execute, token)
        assert (err.code, err.data["reason"]) == ("token_void", "placement_changed")
        assert daemon.env.ledger_lines() == []

    def test_after_restart_prepare_is_stale_until_the_new_boot_is_bound(self, daemon):
        a = Actor(daemon, acts=("echo",))
        a.submit("op")
        old_descriptor = a.descriptor(0)
        assert daemon.terminate() == 0
        daemon.start()
        a.client = daemon.connect()
        assert code_of(a.prepare, "op").code == "placement_stale"
        gen = a.root()["placement_generation"]
        err = code_of(
            a.call, "bind_placement", {"expected_generation": gen, "descriptor": old_descriptor}
        )
        assert err.code == "placement_stale"
        assert a.root()["placement_generation"] == gen
        a.bind(0)
        assert a.invoke("op")["status"] == "succeeded"

    def test_bind_refusals_in_order(self, daemon):
        a = Actor(daemon)
        d = a.descriptor(0)
        gen = a.root()["placement_generation"]

        def bind(desc, expected=gen):
            return code_of(
                a.call, "bind_placement", {"expected_generation": expected, "descriptor": desc}
            ).code

        assert bind({**d, "v": 2}) == "bad_request"
        assert bind({k: v for k, v in d.items() if k != "acts"}) == "bad_request"
        assert (
            bind({**d, "machine": {"arch": "sparc", "abi": "linux-gnu"}}) == "unsupported_profile"
        )
        assert bind({**d, "proof": "tee"}) == "unsupported_profile"
        assert bind({**d, "network": "other"}) == "unsupported_profile"
        assert (
            bind({**d, "executor": {**d["executor"], "backend": "remote"}}) == "unsupported_profile"
        )
        assert (
            bind({**d, "limits": {"cpu": 1, "time": None, "memory": None}})
            == "unsupported_guarantee"
        )
        assert bind({**d, "executor": {**d["executor"], "worker": "w9"}}) == "placement_stale"
        assert bind({**d, "executor": {**d["executor"], "boot": "0" * 32}}) == "placement_stale"
        assert bind(d, expected=gen + 5) == "generation_mismatch"
        assert a.root()["placement_generation"] == gen


class TestRaces:
    def test_two_workers_racing_for_one_op_make_one_effect(self, daemon):
        a = Actor(daemon, acts=("ledger",), worker=0)
        a.submit("op", "ledger", b"r")
        c1, c2 = daemon.connect(), daemon.connect()
        token_a, _ = a.prepare("op", client=c1)  # on w0
        a.bind(1)  # rebind to w1: voids attempt 1
        token_b, meta = a.prepare("op", attempt=2, client=c2)
        assert meta["attempt"] == 2
        ra, rb = Background(a.execute, token_a, c1), Background(a.execute, token_b, c2)
        assert rb.result()["status"] == "succeeded"
        with pytest.raises(WarddError) as ei:
            ra.result()
        assert ei.value.data["reason"] == "placement_changed"
        assert daemon.env.ledger_lines() == [f"{key(a, 'op', 2)}\t{b'r'.hex()}"]

    def test_two_connections_invoking_one_attempt_make_one_effect(self, daemon):
        a = Actor(daemon, acts=("ledger",))
        for i in range(5):
            op = f"race-{i}"
            a.submit(op, "ledger")
            p = a.neuron.sign("invoke", a.prepare_params(op), NETWORK)
            calls = [Background(daemon.connect().call, "invoke", p) for _ in range(3)]
            outcomes = []
            for c in calls:
                try:
                    outcomes.append(c.result()["status"])
                except WarddError as e:
                    outcomes.append(e.code)
            assert sorted(outcomes).count("succeeded") == 1, outcomes
            assert set(outcomes) <= {"succeeded", "attempt_mismatch"}, outcomes
        lines = daemon.env.ledger_lines()
        assert sorted(lines) == sorted(f"{key(a, f'race-{i}')}\t" for i in range(5))


class TestSubjectNetworkProfile:
    def test_wrong_signatures_and_networks_change_nothing(self, daemon):
        a = Actor(daemon, acts=("echo",))
        a.submit("op")
        p = a.prepare_params("op")
        stranger = Neuron.generate()
        forged = stranger.sign("prepare", p, NETWORK)
        forged["neuron"] = a.id  # claims to be a, signed by someone else
        assert code_of(a.client.call, "prepare", forged).code == "unauthenticated"
        other_net = a.neuron.sign("prepare", p, "other-net")
        assert code_of(a.client.call, "prepare", other_net).code == "unauthenticated"
        explicit = a.neuron.sign("prepare", {**p, "network": "other-net"}, "other-net")
        assert code_of(a.client.call, "prepare", explicit).code == "wrong_network"
        tampered = a.neuron.sign("prepare", p, NETWORK)
        tampered["expected_attempt"] = 1 if p["expected_attempt"] != 1 else 2
        assert code_of(a.client.call, "prepare", tampered).code == "unauthenticated"
        unreg = stranger.sign("create_prog", {"prog": "x", "step_limit": 1}, NETWORK)
        assert code_of(a.client.call, "create_prog", unreg).code == "unknown_neuron"
        assert a.op("op")["attempts"] == []
        assert [r["kind"] for r in a.history("op")] == ["submitted"]

    def test_act_not_accepted_and_args_too_large_after_a_config_change(self, make_daemon):
        from tests.daemon.harness import Env

        env = Env()
        env.acts["tiny"] = {"adapter": "cli", "argv": ["/bin/cat"], "max_arg_bytes": 1000}
        env.write_config()
        daemon = make_daemon(env)
        a = Actor(daemon, acts=("quick", "tiny"))
        a.submit("q", "quick")
        a.submit("t", "tiny", b"x" * 500)
        assert daemon.terminate() == 0
        del env.acts["quick"]
        env.acts["tiny"]["max_arg_bytes"] = 10
        env.write_config()
        daemon.start()
        a.client = daemon.connect()
        a.bind(0)
        assert code_of(a.prepare, "q").code == "act_not_accepted"
        err = code_of(a.prepare, "t")
        assert err.code == "args_too_large" and err.data["max_arg_bytes"] == 10
        assert a.op("q")["attempts"] == [] and a.op("t")["attempts"] == []


class TestTokens:
    def test_used_forged_and_foreign_tokens_are_invalid(self, daemon):
        a = Actor(daemon, acts=("ledger",))
        a.submit("op", "ledger")
        token, _ = a.prepare("op")
        assert code_of(a.execute, os.urandom(32)).code == "token_invalid"
        foreign = daemon.connect()
        assert code_of(a.execute, token, foreign).code == "token_invalid"
        # the foreign attempt did not consume it
        assert a.execute(token)["status"] == "succeeded"
        assert code_of(a.execute, token).code == "token_invalid"
        assert len(daemon.env.ledger_lines()) == 1

    def test_dropped_connection_voids_its_tokens(self, daemon):
        a = Actor(daemon, acts=("ledger",))
        a.submit("op", "ledger")
        c = daemon.connect()
        a.prepare("op", client=c)
        c.close()
        wait_for(lambda: a.op("op")["attempts"][0]["state"] == "void", what="token_dropped")
        assert a.op("op")["attempts"][0]["reason"] == "token_dropped"
        assert a.invoke("op", attempt=2)["status"] == "succeeded"

    def test_expired_token_voids_its_attempt(self, make_daemon):
        from tests.daemon.harness import Env

        d = make_daemon(Env(token_ttl_s=0.3))
        a = Actor(d, acts=("ledger",))
        a.submit("op", "ledger")
        token, _ = a.prepare("op")
        wait_for(lambda: a.op("op")["attempts"][0]["state"] == "void", what="token_expired")
        err = code_of(a.execute, token)
        assert (err.code, err.data["reason"]) == ("token_void", "token_expired")
        assert d.env.ledger_lines() == []


class TestPrepareOrder:
    def test_prepare_checks_in_contract_order(self, daemon):
        a = Actor(daemon, acts=("echo",))
        assert code_of(a.prepare, "nope").code == "unknown_operation"
        a.submit("op")
        p = a.prepare_params("op")
        assert code_of(a.call, "prepare", {**p, "expected_epoch": 9}).code == "epoch_mismatch"
        assert (
            code_of(a.call, "prepare", {**p, "placement_generation": 99}).code
            == "generation_mismatch"
        )
        assert code_of(a.call, "prepare", {**p, "expected_attempt": 2}).code == "attempt_mismatch"
        token, _ = a.prepare("op")
        assert code_of(a.call, "prepare", {**p, "expected_attempt": 2}).code == "attempt_busy"
        a.execute(token)
        assert code_of(a.call, "prepare", {**p, "expected_attempt": 2}).code == "already_succeeded"
        a.call("release_placement", {"expected_generation": a.root()["placement_generation"]})
        a.submit("op2")
        assert code_of(a.prepare, "op2").code == "placement_unbound"
        a.grant(["echo"], enabled=False)
        assert code_of(a.prepare, "op2").code == "grant_disabled"
        a.grant(["ledger"])
        assert code_of(a.prepare, "op2").code == "act_not_granted"
        a.call("set_prog_state", {"prog": a.prog, "expected_state": "active", "state": "paused"})
        assert code_of(a.prepare, "op2").code == "prog_inactive"


def test_status_shows_a_busy_worker_while_reads_answer(daemon):
    env = daemon.env
    a = Actor(daemon, acts=("gated",))
    a.submit("g", "gated")
    call = Background(a.invoke, "g", 1, daemon.connect())
    wait_for(env.started_marker("g").exists, what="the gated act to start")
    st = a.read("status")
    busy = next(w for w in st["workers"] if w["id"] == "w0")["busy_op"]
    assert busy == {"neuron": a.id, "op": "g", "attempt": 1}
    assert a.state("g") == "running"
    env.open_gate("g")
    assert call.result()["status"] == "succeeded"
