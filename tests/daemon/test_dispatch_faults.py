"""Refusals that come at once, faults after the claim, bounded token memory
(docs/reliability.md lists each history).

Everything runs against a real daemon process; a long call is a real `cli`
process held at a gate, and a fault after the claim comes from a real
third-party adapter loaded through the ``wardd.adapters`` entry points.
"""

from __future__ import annotations

import os
import resource

import pytest

from tests._poll import wait_for
from tests.daemon.harness import Actor, Background, Env, code_of, entry_point_plugin

PLUGIN = '''
from wardd.adapters import DefiniteFailure


class Unsendable(dict):
    """A value whose encoding raises something other than TypeError/ValueError."""

    def items(self):
        raise RuntimeError("items() exploded while the value was checked")


class Faulty:
    in_process = True

    max_arg_bytes = 1024

    def call(self, request):
        with open(request.args.decode(), "a") as f:  # the effect, in a real file
            f.write(request.idempotency_key + "\\n")
        return Unsendable(a=1)
'''


def plugin_env(root) -> dict[str, str]:
    return entry_point_plugin(root, "wardd_fault_plugin", PLUGIN, {"faulty": "Faulty"})


def busy_ops(actor: Actor) -> list[str]:
    return [w["busy_op"]["op"] for w in actor.read("status")["workers"] if w["busy_op"]]


class TestRefusalsComeAtOnce:
    def test_invoke_of_a_running_op_is_attempt_busy_while_the_call_still_runs(self, daemon):
        """An invoke whose op has a running attempt is refused at arrival,
        not after that call ends (when it would read already_succeeded)."""
        env = daemon.env
        a = Actor(daemon, acts=("gated",))
        a.submit("g", "gated")
        first = Background(a.invoke, "g", 1, daemon.connect())
        wait_for(env.started_marker("g").exists, what="the gated act to start")
        err = code_of(a.invoke, "g", 2)
        assert err.code == "attempt_busy"
        # answered while the first call is still running: its gate is shut
        assert busy_ops(a) == ["g"] and not first.done.is_set()
        err = code_of(a.invoke, "g", 1)
        assert err.code == "attempt_mismatch"
        env.open_gate("g")
        assert first.result()["status"] == "succeeded"
        assert env.ledger_lines(env.cli_ledger) == [f"{a.id}/g/1"]

    def test_execute_of_a_token_voided_by_exhaustion_answers_while_the_worker_is_busy(self, daemon):
        """A token whose attempt a settle's exhaustion voided is token_void at
        once, not after the long call queued before it on its worker."""
        env = daemon.env
        a = Actor(daemon, acts=("gated", "ledger"), step_limit=10)
        a.call("create_prog", {"prog": "long", "step_limit": 10})
        a.grant(["gated"], prog="long")
        a.submit("g", "gated", prog="long")
        a.submit("op", "ledger")
        token, _ = a.prepare("op")
        first = Background(a.invoke, "g", 1, daemon.connect())
        wait_for(env.started_marker("g").exists, what="the gated act to start")
        a.call("reserve_steps", {"prog": a.prog, "reservation": "r", "steps": 10})
        a.call("settle_steps", {"prog": a.prog, "reservation": "r", "steps": 10})
        err = code_of(a.execute, token)
        assert (err.code, err.data["reason"]) == ("token_void", "budget_exhausted")
        assert busy_ops(a) == ["g"] and not first.done.is_set()
        # the token is gone for good: its record keeps the answer
        err = code_of(a.execute, token)
        assert (err.code, err.data["reason"]) == ("token_void", "budget_exhausted")
        env.open_gate("g")
        assert first.result()["status"] == "succeeded"
        assert env.ledger_lines() == []

    def test_execute_of_a_token_voided_by_a_pause_answers_while_another_neuron_runs(self, daemon):
        """A pause voids the token; its execute does not wait behind another
        neuron's long call on the same worker."""
        env = daemon.env
        busy = Actor(daemon, acts=("gated",))
        a = Actor(daemon, acts=("ledger",))
        busy.submit("g", "gated")
        a.submit("op", "ledger")
        token, _ = a.prepare("op")
        first = Background(busy.invoke, "g", 1, daemon.connect())
        wait_for(env.started_marker("g").exists, what="the gated act to start")
        prog = a.read("get_prog", {"neuron": a.id, "prog": a.prog})
        params = {"prog": a.prog, "expected_state": "active", "state": "paused"}
        if "state_version" in prog:
            params["expected_state_version"] = prog["state_version"]
        a.call("set_prog_state", params)
        err = code_of(a.execute, token)
        assert (err.code, err.data["reason"]) == ("token_void", "prog_inactive")
        assert busy_ops(a) == ["g"] and not first.done.is_set()
        env.open_gate("g")
        assert first.result()["status"] == "succeeded"
        assert env.ledger_lines() == []


class TestFaultsAfterTheClaim:
    def test_a_value_whose_check_raises_records_unknown_not_running(self, make_daemon):
        """An exception after the claim (here, in checking the adapter's value)
        records the outcome unknown with the error's text; the attempt is
        never left running, and reconcile resolves it."""
        env = Env(acts={"faulty": {"adapter": "faulty"}})
        daemon = make_daemon(env, start=False)
        daemon.start(plugin_env(env.root))
        a = Actor(daemon, acts=("faulty",))
        effects = env.root / "effects.log"
        a.submit("f", "faulty", str(effects).encode())
        res = a.invoke("f")
        assert res["status"] == "unknown"
        assert "RuntimeError" in res["error"] and "exploded" in res["error"]
        att = a.op("f")["attempts"][0]
        assert att["state"] == "unknown" and att["evidence"]["claimed"] is True
        assert a.state("f") == "unknown"
        assert effects.read_text().splitlines() == [f"{a.id}/f/1"]
        assert "worker_fault" in daemon.log_text()
        # the same through execute, on a second op
        a.submit("g", "faulty", str(effects).encode())
        token, _ = a.prepare("g")
        assert a.execute(token)["status"] == "unknown"
        assert a.op("g")["attempts"][0]["state"] == "unknown"
        out = {"status": "succeeded", "value": None}
        a.call("reconcile", {"op": "f", "attempt": 1, "outcome": out})
        assert a.state("f") == "retained"
        assert a.read("status")["workers"][0]["busy_op"] is None

    @pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs prlimit(2)")
    def test_a_void_that_cannot_be_written_fail_stops(self, daemon):
        """A token dropped with its connection whose void cannot be stored
        stops the daemon (exit 70); the next start marks the attempt unknown
        (claimed: false), so the op is never blocked by a dead prepared attempt."""
        a = Actor(daemon, acts=("echo",))  # no receipt: the mark stays for the operator
        a.submit("op", "echo", b"x")
        c = daemon.connect()
        a.prepare("op", client=c)
        wal = os.stat(f"{daemon.env.database}-wal").st_size
        resource.prlimit(daemon.proc.pid, resource.RLIMIT_FSIZE, (wal, resource.RLIM_INFINITY))
        c.close()
        assert daemon.proc.wait(30) == 70
        log = daemon.log_text()
        assert "void_failed" in log and "fail_stop" in log
        daemon.start()
        a.client = daemon.connect()
        att = a.op("op")["attempts"][0]
        assert att["state"] == "unknown" and att["evidence"]["claimed"] is False
        out = {"status": "not_executed"}
        a.call("reconcile", {"op": "op", "attempt": 1, "outcome": out})
        a.bind(0)
        assert a.invoke("op", attempt=2)["status"] == "succeeded"


class TestTokenMemory:
    def test_dead_tokens_answer_from_their_record_on_a_long_connection(self, make_daemon):
        """Used and expired tokens of one connection are answered from their
        attempts' records (token_invalid / token_void) while the daemon holds
        only live tokens."""
        d = make_daemon(Env(token_ttl_s=0.5))
        a = Actor(d, acts=("echo",))
        used, expired = [], []
        for i in range(20):
            a.submit(f"u{i}", "echo", b"x")
            token, _ = a.prepare(f"u{i}")
            assert a.execute(token)["status"] == "succeeded"
            used.append(token)
        for i in range(5):
            a.submit(f"e{i}", "echo", b"x")
            expired.append(a.prepare(f"e{i}")[0])
        wait_for(
            lambda: all(a.op(f"e{i}")["attempts"][0]["state"] == "void" for i in range(5)),
            what="the tokens to expire",
        )
        wait_for(lambda: a.read("status")["tokens"] == 0, what="no live token")
        for token in used:
            assert code_of(a.execute, token).code == "token_invalid"
        for token in expired:
            err = code_of(a.execute, token)
            assert (err.code, err.data["reason"]) == ("token_void", "token_expired")
        # a dead handle on another connection is still just invalid
        other = d.connect()
        assert code_of(a.execute, expired[0], other).code == "token_invalid"
