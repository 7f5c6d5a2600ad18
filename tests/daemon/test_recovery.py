"""Unknown attempts and what resolves them, with real SIGKILLs (contract §3.3-§3.6)."""

from __future__ import annotations

import shlex
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests._leftovers import alive
from tests._poll import pid_written, wait_for
from tests.daemon.harness import NETWORK, Actor, Background, Env, code_of, key
from wardd.client import Neuron
from wardd.daemon.store.schema import SCHEMA_VERSION
from wardd.protocol import WarddError


def restart(daemon, actor, *, rebind=True):
    daemon.kill()
    daemon.start()
    actor.client = daemon.connect()
    if rebind:
        actor.bind(0)


def slow_env(**kw) -> Env:
    env = Env(**kw)
    started = shlex.quote(str(env.started))
    ledger = shlex.quote(str(env.cli_ledger))
    env.acts["slow"] = {
        "adapter": "cli",
        "argv": [
            "/bin/sh",
            "-c",
            f'echo "$WARDD_IDEMPOTENCY_KEY" >> {ledger}; '
            f'touch {started}/"$WARDD_OP.$WARDD_ATTEMPT"; sleep 30',
        ],
    }
    env.write_config()
    return env


class TestCrash:
    def test_crash_after_claim_leaves_an_unknown_attempt_reconciled_once(self, make_daemon):
        d = make_daemon(slow_env())
        a = Actor(d, acts=("slow",))
        a.submit("op", "slow")
        old_boot = d.boot
        call = Background(a.invoke, "op", 1, d.connect())
        wait_for(d.env.started_marker("op").exists, what="the slow act to start")
        restart(d, a)
        call.done.wait(10)
        att = a.op("op")["attempts"][0]
        assert att["state"] == "unknown" and att["claimed"] is True
        # the program outlived the SIGKILLed daemon and was killed at the restart
        orphaned = {"claimed": True, "boot": old_boot, "orphan_killed": True}
        assert att["evidence"] == orphaned
        assert a.state("op") == "unknown"
        assert code_of(a.prepare, "op", 2).code == "attempt_unknown"
        listed = a.read("list_attempts", {"state": "unknown"})["attempts"]
        assert [(x["op"], x["claimed"]) for x in listed] == [("op", True)]
        r = a.call(
            "reconcile",
            {"op": "op", "attempt": 1, "outcome": {"status": "succeeded", "value": b"done"}},
        )
        assert r["status"] == "succeeded" and "already" not in r
        again = a.call(
            "reconcile",
            {"op": "op", "attempt": 1, "outcome": {"status": "succeeded", "value": b"done"}},
        )
        assert again["already"] is True
        err = code_of(
            a.call, "reconcile", {"op": "op", "attempt": 1, "outcome": {"status": "failed"}}
        )
        assert err.code == "conflict"
        info = a.op("op")
        assert info["state"] == "retained" and info["result"]["source"] == "reconcile"
        assert info["attempts"][0]["evidence"] == orphaned
        assert d.env.ledger_lines(d.env.cli_ledger) == [key(a, "op")]
        kinds = [r["kind"] for r in a.history("op")]
        assert kinds == ["submitted", "prepared", "claimed", "marked_unknown", "reconciled"]

    def test_crash_after_prepare_is_unknown_unclaimed_and_never_executed(self, make_daemon):
        d = make_daemon()
        a = Actor(d, acts=("quick",))
        a.submit("op", "quick")
        token, _ = a.prepare("op")
        old_boot = d.boot
        restart(d, a)
        att = a.op("op")["attempts"][0]
        assert att["evidence"] == {"claimed": False, "boot": old_boot}
        assert code_of(a.execute, token).code == "token_invalid"  # no token is recreated
        assert d.env.ledger_lines(d.env.cli_ledger) == []
        assert (
            code_of(
                a.call, "reconcile", {"op": "op", "attempt": 2, "outcome": {"status": "failed"}}
            ).code
            == "unknown_operation"
        )
        a.call("reconcile", {"op": "op", "attempt": 1, "outcome": {"status": "not_executed"}})
        assert a.state("op") == "pending"
        assert a.invoke("op", attempt=2)["status"] == "succeeded"
        assert d.env.ledger_lines(d.env.cli_ledger) == [key(a, "op", 2)]
        assert (
            code_of(
                a.call, "reconcile", {"op": "op", "attempt": 2, "outcome": {"status": "failed"}}
            ).code
            == "not_reconcilable"
        )

    def test_restart_marks_each_attempt_once(self, make_daemon):
        d = make_daemon()
        a = Actor(d, acts=("echo",))
        a.submit("op")
        a.prepare("op")
        restart(d, a)
        restart(d, a)
        kinds = [r["kind"] for r in a.history("op")]
        assert kinds.count("marked_unknown") == 1


class TestReceipts:
    def test_file_append_unknown_is_resolved_by_its_receipt_at_restart(self, make_daemon):
        d = make_daemon()
        a = Actor(d, acts=("ledger",))
        a.submit("done", "ledger", b"d")
        a.submit("never", "ledger", b"n")
        a.prepare("done")
        a.prepare("never")
        # the adapter's write of "done" reached the file just before the crash
        with open(d.env.ledger, "a") as f:
            f.write(f"{key(a, 'done')}\t{b'd'.hex()}\n")
        restart(d, a, rebind=False)
        done, never = a.op("done"), a.op("never")
        assert done["state"] == "retained"
        assert done["attempts"][0]["outcome"] == {
            "status": "succeeded",
            "value": None,
            "source": "receipt",
        }
        assert never["state"] == "pending"
        assert never["attempts"][0]["outcome"]["status"] == "not_executed"
        assert never["attempts"][0]["outcome"]["source"] == "receipt"
        assert "receipt" in [r["kind"] for r in a.history("done")]

    def test_cli_receipt_applies_only_executed(self, make_daemon):
        env = Env()
        answers = env.root / "answers"
        answers.write_text("")
        receipt = [
            "/bin/sh",
            "-c",
            f'grep -q "^$1 executed" {shlex.quote(str(answers))} '
            "&& echo executed || echo not_executed",
            "receipt",
        ]
        env.acts["rq"] = {"adapter": "cli", "argv": ["/bin/true"], "receipt_argv": receipt}
        env.write_config()
        d = make_daemon(env)
        a = Actor(d, acts=("rq",))
        a.submit("yes", "rq")
        a.submit("no", "rq")
        a.prepare("yes")
        a.prepare("no")
        answers.write_text(f"{key(a, 'yes')} executed\n")
        restart(d, a, rebind=False)
        checked = a.call("check_receipts", {})
        assert checked["checked"] >= 0
        wait_for(lambda: a.read("status")["receipts_pending"] == 0, what="receipts")
        assert a.state("yes") == "retained"
        no = a.op("no")
        assert no["state"] == "unknown"
        assert no["attempts"][0]["evidence"]["receipt_hint"] == "not_executed"
        # polling check_receipts records a hint once, not once per poll
        records = len(a.history("no"))
        for _ in range(3):
            a.call("check_receipts", {})
        assert len(a.history("no")) == records


class TestResolution:
    def test_manual_take_is_unknown_and_never_enters_the_executor(self, daemon):
        a = Actor(daemon, acts=("ledger",))
        a.submit("op", "ledger")
        res = a.call("manual_take", {"op": "op", "expected_attempt": 1, "expected_epoch": 1})
        assert res == {
            "attempt": {
                "op": "op",
                "attempt": 1,
                "kind": "manual",
                "epoch": 1,
                "policy_version": a.root()["policy_version"],
            }
        }
        assert "token" not in res
        assert a.state("op") == "unknown"
        assert code_of(a.prepare, "op", 2).code == "attempt_unknown"
        assert a.call("check_receipts", {})["resolved"] == 0
        a.call(
            "reconcile", {"op": "op", "attempt": 1, "outcome": {"status": "succeeded", "value": 5}}
        )
        assert a.call("consume", {"op": "op"})["result"]["value"] == 5
        assert daemon.env.ledger_lines() == []

    def test_cancel_in_each_state(self, make_daemon):
        d = make_daemon(slow_env())
        a = Actor(d, acts=("echo", "boom", "gated"))
        for op in ("pending", "prepared", "retained", "unknown", "consumed"):
            a.submit(op, "boom" if op == "unknown" else "echo")
        token, _ = a.prepare("prepared")
        a.invoke("retained")
        a.invoke("unknown")
        a.invoke("consumed")
        a.call("consume", {"op": "consumed"})
        for op in ("pending", "prepared", "retained", "unknown"):
            assert a.call("cancel", {"op": op}) == {"op": op, "state": "cancelled", "was": op}
            assert a.call("cancel", {"op": op})["already"] is True
            assert a.state(op) == "cancelled"
        assert code_of(a.call, "cancel", {"op": "consumed"}).code == "terminal"
        assert code_of(a.execute, token).data["reason"] == "cancelled"
        assert code_of(a.call, "consume", {"op": "retained"}).code == "terminal"
        assert a.op("unknown")["attempts"][0]["state"] == "unknown"
        a.call("reconcile", {"op": "unknown", "attempt": 1, "outcome": {"status": "failed"}})
        assert a.state("unknown") == "cancelled"
        listed = a.read("list_operations", {"neuron": a.id, "state": "cancelled"})
        assert len(listed["operations"]) == 4
        # running: the outcome is recorded but never returned by consume
        a.submit("running", "gated")
        call = Background(a.invoke, "running", 1, d.connect())
        wait_for(d.env.started_marker("running").exists, what="gated start")
        assert a.call("cancel", {"op": "running"})["state"] == "cancelled"
        d.env.open_gate("running")
        assert call.result()["status"] == "succeeded"
        info = a.op("running")
        assert info["state"] == "cancelled" and info["attempts"][0]["state"] == "succeeded"
        assert code_of(a.call, "consume", {"op": "running"}).code == "terminal"

    def test_rebind_after_an_epoch_change(self, daemon):
        a = Actor(daemon, acts=("echo",))
        a.submit("op", "echo", b"v")
        a.invoke("op")
        a.call("advance_epoch", {"expected_epoch": 1})
        assert code_of(a.call, "consume", {"op": "op"}).code == "rebind_required"
        assert code_of(a.call, "rebind", {"op": "op", "expected_epoch": 1}).code == "epoch_mismatch"
        assert a.call("rebind", {"op": "op", "expected_epoch": 2}) == {"op": "op", "epoch": 2}
        assert a.call("rebind", {"op": "op"})["already"] is True
        got = a.call("consume", {"op": "op"})
        assert got["result"]["epoch"] == 2 and got["result"]["attempt"] == 1
        att = a.op("op")["attempts"][0]
        assert att["epoch"] == 1  # the attempt's own binding keeps the original
        assert "rebound" in [r["kind"] for r in a.history("op")]
        a.submit("none")
        assert code_of(a.call, "rebind", {"op": "none"}).code == "not_retained"

    def test_budget_exhaustion_consumes_retained_and_cancels_pending(self, daemon):
        a = Actor(daemon, acts=("echo",), step_limit=10)
        a.submit("kept", "echo", b"k")
        a.invoke("kept")
        a.submit("waiting")
        a.submit("prep")
        token, _ = a.prepare("prep")
        r = a.call("reserve_steps", {"prog": a.prog, "reservation": "r1", "steps": 8})
        assert r == {"reservation": "r1", "steps": 8, "number": 1}
        assert (
            a.call("reserve_steps", {"prog": a.prog, "reservation": "r1", "steps": 8})["already"]
            is True
        )
        assert (
            code_of(a.call, "reserve_steps", {"prog": a.prog, "reservation": "r2", "steps": 3}).code
            == "budget_exhausted"
        )
        s = a.call("settle_steps", {"prog": a.prog, "reservation": "r1", "steps": 8})
        assert s["steps_used"] == 8
        a.call("reserve_steps", {"prog": a.prog, "reservation": "r3", "steps": 2})
        a.call("settle_steps", {"prog": a.prog, "reservation": "r3", "steps": 2})
        for op in ("kept", "waiting", "prep"):
            assert a.state(op) == "cancelled", op
        assert code_of(a.call, "consume", {"op": "kept"}).code == "terminal"
        assert code_of(a.execute, token).data["reason"] == "budget_exhausted"
        assert code_of(a.submit, "after").code == "budget_exhausted"  # "submit may too"
        assert (
            code_of(a.call, "reserve_steps", {"prog": a.prog, "reservation": "r4", "steps": 0}).code
            == "budget_exhausted"
        )

    def test_recover_reservations_releases_open_ones(self, daemon):
        a = Actor(daemon, acts=("echo",), step_limit=10)
        a.call("reserve_steps", {"prog": a.prog, "reservation": "a", "steps": 4})
        a.call("reserve_steps", {"prog": a.prog, "reservation": "b", "steps": 5})
        assert a.read("get_prog", {"neuron": a.id, "prog": a.prog})["steps_reserved"] == 9
        assert a.call("recover_reservations", {"prog": a.prog}) == {"released": 2}
        assert a.read("get_prog", {"neuron": a.id, "prog": a.prog})["steps_reserved"] == 0
        assert a.call("reserve_steps", {"prog": a.prog, "reservation": "c", "steps": 10})

    def test_management_writes_need_an_enabled_grant_not_the_act(self, daemon):
        a = Actor(daemon, acts=("boom",))
        a.submit("op", "boom")
        a.invoke("op")
        a.grant([])  # the act is revoked, the grant stays enabled
        a.call("reconcile", {"op": "op", "attempt": 1, "outcome": {"status": "failed"}})
        a.grant([], enabled=False)
        assert code_of(a.call, "cancel", {"op": "op"}).code == "grant_disabled"
        assert (
            code_of(a.call, "submit", {"prog": a.prog, "op": "x", "act": "echo", "args": b""}).code
            == "grant_disabled"
        )

    def test_archive_refused_while_operations_are_open(self, daemon):
        a = Actor(daemon, acts=("echo",))
        a.submit("op")

        def state(expected, new):
            return a.call(
                "set_prog_state", {"prog": a.prog, "expected_state": expected, "state": new}
            )

        assert code_of(state, "paused", "active").code == "state_mismatch"
        assert code_of(state, "active", "archived").code == "bad_transition"
        state("active", "retired")
        assert code_of(state, "retired", "archived").code == "open_operations"
        a.call("cancel", {"op": "op"})
        assert state("retired", "archived") == {
            "prog": a.prog,
            "state": "archived",
            "state_version": 3,
        }

    def test_state_version_counts_each_state_change_and_nothing_else(self, daemon):
        """contract §3.1: 1 at creation, +1 per state change; refusals and the
        grant, budget and op writes leave it as it is."""
        a = Actor(daemon, acts=("echo",), step_limit=5)
        assert a.get_prog()["state_version"] == 1
        assert a.call("set_prog_state", a.prog_state_params("active", "paused")) == {
            "prog": a.prog,
            "state": "paused",
            "state_version": 2,
        }
        a.call("set_prog_state", a.prog_state_params("paused", "active"))
        assert a.get_prog()["state_version"] == 3
        assert code_of(a.call, "set_prog_state", a.prog_state_params("active", "archived"))
        a.grant(["echo"])
        a.submit("op")
        a.invoke("op")
        a.call("reserve_steps", {"prog": a.prog, "reservation": "r", "steps": 5})
        a.call("settle_steps", {"prog": a.prog, "reservation": "r", "steps": 5})  # exhausts
        prog = a.get_prog()
        assert prog["exhausted"] is True and prog["state_version"] == 3

    def test_a_stale_expected_state_version_is_state_mismatch_and_changes_nothing(self, daemon):
        """contract §3.4: checked right after the state CAS, before the transition."""
        a = Actor(daemon, acts=("echo",))
        a.submit("op")
        token, _ = a.prepare("op")
        stale = a.prog_state_params("active", "paused")
        a.call("set_prog_state", a.prog_state_params("active", "paused"))
        a.call("set_prog_state", a.prog_state_params("paused", "active"))
        a.submit("op2")
        token2, _ = a.prepare("op2")
        for state in ("paused", "archived"):  # the version is checked before the transition
            err = code_of(a.call, "set_prog_state", {**stale, "state": state})
            assert err.code == "state_mismatch"
            assert err.data == {"state": "active", "state_version": 3}
        wrong_state = {**a.prog_state_params("active", "paused"), "expected_state": "paused"}
        assert code_of(a.call, "set_prog_state", wrong_state).data["state"] == "active"
        assert a.get_prog()["state_version"] == 3
        assert a.execute(token2)["status"] == "succeeded"  # not voided by a refused pause
        assert code_of(a.execute, token).code == "token_void"  # the applied pause voided it

    def test_reservations_are_numbered_and_before_releases_only_lower_numbers(self, daemon):
        """contract §3.4: each reservation gets the prog's next number; recover with
        `before` releases only the open ones numbered below it."""
        a = Actor(daemon, acts=("echo",), step_limit=100)

        def reserve(name, steps):
            return a.call("reserve_steps", {"prog": a.prog, "reservation": name, "steps": steps})

        assert a.get_prog()["reservation_seq"] == 1
        assert [reserve(n, 10)["number"] for n in ("a", "b", "c")] == [1, 2, 3]
        a.call("settle_steps", {"prog": a.prog, "reservation": "b", "steps": 4})
        prog = a.get_prog()
        assert (prog["reservation_seq"], prog["steps_reserved"], prog["steps_used"]) == (4, 20, 4)
        recover = {"prog": a.prog, "before": 3}
        assert a.call("recover_reservations", recover) == {"released": 1}  # a, not c
        assert a.get_prog()["steps_reserved"] == 10
        assert a.call("recover_reservations", {"prog": a.prog, "before": 0}) == {"released": 0}
        assert a.call("settle_steps", {"prog": a.prog, "reservation": "c", "steps": 1})
        assert a.get_prog()["reservation_seq"] == 4  # recover and settle take no number
        assert reserve("d", 1)["number"] == 4
        assert a.call("recover_reservations", {"prog": a.prog}) == {"released": 1}  # all open

    def test_a_released_reservation_never_reopens(self, daemon):
        """contract §3.4: reserve_steps with a released reservation's id answers
        `already` with its state; it holds no steps and cannot be settled."""
        a = Actor(daemon, acts=("echo",), step_limit=10)
        x = {"prog": a.prog, "reservation": "x", "steps": 6}
        a.call("reserve_steps", x)
        a.call("recover_reservations", {"prog": a.prog, "before": 2})
        again = a.call("reserve_steps", x)
        assert again == {
            "reservation": "x",
            "steps": 6,
            "number": 1,
            "already": True,
            "state": "released",
        }
        prog = a.get_prog()
        assert (prog["steps_reserved"], prog["reservation_seq"]) == (0, 2)
        assert code_of(a.call, "reserve_steps", {**x, "steps": 5}).code == "conflict"
        assert code_of(a.call, "settle_steps", {**x, "steps": 1}).code == "conflict"
        assert a.get_prog()["steps_used"] == 0


class TestShutdown:
    def test_sigterm_kills_cli_process_groups_after_the_grace(self, make_daemon):
        env = Env(shutdown_grace_s=0.5)
        pidfile = env.root / "child.pid"
        env.acts["lingering"] = {
            "adapter": "cli",
            "argv": ["/bin/sh", "-c", f"sleep 60 & echo $! > {shlex.quote(str(pidfile))}; wait"],
        }
        env.write_config()
        d = make_daemon(env)
        a = Actor(d, acts=("lingering",))
        a.submit("op", "lingering")
        Background(a.invoke, "op", 1, d.connect())
        child = pid_written(pidfile)
        assert d.terminate() == 0
        wait_for(lambda: not alive(child), what="the act's background child to be killed")
        d.start()
        a.client = d.connect()
        att = a.op("op")["attempts"][0]
        assert att["state"] == "unknown" and att["evidence"]["claimed"] is True

    def test_sigterm_voids_unconsumed_tokens(self, make_daemon):
        d = make_daemon()
        a = Actor(d, acts=("echo",))
        a.submit("op")
        a.prepare("op")
        assert d.terminate() == 0
        d.start()
        a.client = d.connect()
        att = a.op("op")["attempts"][0]
        assert (att["state"], att["reason"]) == ("void", "shutdown")


def _fixture(make_daemon, version):
    """A daemon on a copy of tests/data/schema-vN.db; returns (daemon, neuron id, old boot)."""
    data = Path(__file__).parent.parent / "data"
    env = Env()
    env.database.parent.mkdir(parents=True)
    shutil.copy(data / f"schema-v{version}.db", env.database)
    neuron = (data / f"schema-v{version}.neuron").read_text().strip()
    db = sqlite3.connect(env.database)
    (old_boot,) = db.execute("SELECT boot_id FROM boots").fetchone()
    db.close()
    return make_daemon(env), neuron, old_boot


class TestMigration:
    @pytest.mark.parametrize("version", [1, 2, 3])
    def test_database_of_an_earlier_schema_is_migrated_and_its_attempts_become_unknown(
        self, make_daemon, version
    ):
        """tests/data/schema-vN.db was written by schema version N; its daemon
        died with one attempt prepared and one claimed and running."""
        d, neuron, old_boot = _fixture(make_daemon, version)
        env = d.env
        with d.connect() as c:
            st = c.call("status")
            assert st["db"]["schema_version"] == SCHEMA_VERSION and st["unknown_attempts"] == 1
            # exact counts survive the migration
            assert st["operations"] == {"pending": 1, "unknown": 1, "retained": 1}

            def op(name):
                return c.call("get_operation", {"neuron": neuron, "op": name})

            prepared, running, done = op("prepared"), op("running"), op("done")
        assert prepared["attempts"][0]["evidence"] == {"claimed": False, "boot": old_boot}
        # a file.append attempt that never reached the adapter: its receipt says so
        assert prepared["state"] == "pending"
        assert prepared["attempts"][0]["outcome"]["source"] == "receipt"
        assert running["state"] == "unknown"
        assert running["attempts"][0]["evidence"] == {"claimed": True, "boot": old_boot}
        assert done["state"] == "retained" and done["result"]["value"] == b"v1"
        db = sqlite3.connect(env.database)
        assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        db.close()

    @pytest.mark.parametrize("version", [1, 2, 3])
    def test_a_migrated_prog_starts_at_state_version_1_and_numbers_its_reservations(
        self, make_daemon, version
    ):
        """Schema 4: an existing prog gets state_version 1 (whatever states it went
        through) and reservation_seq 1 + its reservations; the fence works at once."""
        d, neuron, _ = _fixture(make_daemon, version)
        with d.connect() as c:
            prog = c.call("get_prog", {"neuron": neuron, "prog": "prog-a"})
        # schema-v3.db made 4 reservations in prog-a (the older fixtures none)
        assert (prog["state"], prog["state_version"]) == ("active", 1)
        assert prog["reservation_seq"] == (5 if version == 3 else 1)

    def test_v3_reservations_are_numbered_per_prog_in_the_order_they_were_made(self, make_daemon):
        """schema-v3.db: prog-a made a1 (released), a2 (open), a3 (settled), then
        prog-b b1 (open), then prog-a a4 (open); the numbers follow that order per
        prog, and `before` fences them at once."""
        d, neuron_id, _ = _fixture(make_daemon, 3)
        neuron = Neuron.load(Path(__file__).parent.parent / "data" / "schema-v3.key")
        assert neuron.id == neuron_id
        c = d.connect()

        def call(method, **params):
            return c.call(method, neuron.sign(method, params, NETWORK))

        def number(prog, reservation, steps):
            r = call("reserve_steps", prog=prog, reservation=reservation, steps=steps)
            assert r["already"] is True
            return r["number"], r["state"]

        assert number("prog-a", "a1", 2) == (1, "released")
        assert number("prog-a", "a2", 3) == (2, "open")
        assert number("prog-a", "a3", 4) == (3, "settled")
        assert number("prog-a", "a4", 1) == (4, "open")
        assert number("prog-b", "b1", 5) == (1, "open")
        assert c.call("get_prog", {"neuron": neuron_id, "prog": "prog-b"})["reservation_seq"] == 2
        assert call("recover_reservations", prog="prog-a", before=4) == {"released": 1}  # a2
        prog = c.call("get_prog", {"neuron": neuron_id, "prog": "prog-a"})
        assert (prog["steps_reserved"], prog["reservation_seq"]) == (1, 5)
        assert call("reserve_steps", prog="prog-a", reservation="a5", steps=1)["number"] == 5
        pause = {"prog": "prog-a", "expected_state": "active", "state": "paused"}
        assert call("set_prog_state", **pause, expected_state_version=1)["state_version"] == 2


class TestShutdownOrder:
    def test_sigterm_answers_the_running_call_and_voids_the_queued_one(self, make_daemon):
        """contract §3.6: a dispatch accepted but not yet claimed is voided
        (shutdown); a call in progress finishes within the grace, its outcome
        is recorded and its caller answered."""
        import signal as _signal

        d = make_daemon(Env(workers=1))
        a = Actor(d, acts=("gated", "ledger"))
        a.submit("run", "gated")
        a.submit("queued", "ledger")
        qc = d.connect()
        token, _ = a.prepare("queued", client=qc)
        running = Background(a.invoke, "run", 1, d.connect())
        wait_for(d.env.started_marker("run").exists, what="the gated act to start")
        queued = Background(a.execute, token, qc)  # behind "run" on the only worker
        d.proc.send_signal(_signal.SIGTERM)
        d.env.open_gate("run")
        assert running.result()["status"] == "succeeded"
        with pytest.raises(WarddError) as ei:
            queued.result()
        assert (ei.value.code, ei.value.data.get("reason")) == ("token_void", "shutdown")
        assert d.proc.wait(30) == 0
        d.start()
        a.client = d.connect()
        att = a.op("queued")["attempts"][0]
        assert (att["state"], att["reason"]) == ("void", "shutdown")
        assert d.env.ledger_lines() == []
        assert a.state("run") == "retained"

    def test_a_reconcile_value_too_deep_to_send_back_is_refused(self, daemon):
        a = Actor(daemon, acts=("boom",))
        a.submit("op", "boom")
        a.invoke("op")
        deep: object = 1
        for _ in range(60):
            deep = [deep]
        err = code_of(
            a.call,
            "reconcile",
            {"op": "op", "attempt": 1, "outcome": {"status": "succeeded", "value": deep}},
        )
        assert err.code == "bad_request"
        assert a.op("op")["attempts"][0]["state"] == "unknown"

    def test_sigterm_answers_every_call_that_ends_within_the_grace(self, make_daemon):
        import signal as _signal

        d = make_daemon(Env(workers=4))
        actors = [Actor(d, acts=("gated",), worker=i) for i in range(4)]
        calls = []
        for i, a in enumerate(actors):
            a.submit(f"g{i}", "gated")
            calls.append(Background(a.invoke, f"g{i}", 1, d.connect()))
        for i in range(4):
            wait_for(d.env.started_marker(f"g{i}").exists, what="every gated act to start")
        d.proc.send_signal(_signal.SIGTERM)
        for i in range(4):
            d.env.open_gate(f"g{i}")
        assert [c.result()["status"] for c in calls] == ["succeeded"] * 4
        assert d.proc.wait(30) == 0

    def test_reconcile_with_the_same_map_in_another_key_order_is_already(self, daemon):
        a = Actor(daemon, acts=("boom",))
        a.submit("op", "boom")
        a.invoke("op")
        first = {
            "op": "op",
            "attempt": 1,
            "outcome": {"status": "succeeded", "value": {"a": 1, "b": 2}},
        }
        a.call("reconcile", first)
        again = {
            "op": "op",
            "attempt": 1,
            "outcome": {"status": "succeeded", "value": {"b": 2, "a": 1}},
        }
        assert a.call("reconcile", again)["already"] is True
        other = {
            "op": "op",
            "attempt": 1,
            "outcome": {"status": "succeeded", "value": {"a": True, "b": 2}},
        }
        assert code_of(a.call, "reconcile", other).code == "conflict"

    def test_sigterm_finishes_while_a_client_sends_without_reading(self, daemon):
        """A client that keeps sending and never reads cannot hold the daemon
        past its shutdown (requests after the grace are not taken)."""
        import signal as _signal
        import socket
        import struct
        import threading

        import cbor2

        def frame(obj):
            body = cbor2.dumps(obj)
            return struct.pack(">I", len(body)) + body

        stop = threading.Event()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(daemon.env.socket))
        s.sendall(frame({"id": 0, "method": "hello", "params": {"protocol": 1, "client": "t"}}))

        def flood():
            i = 1
            try:
                while not stop.is_set():
                    s.sendall(frame({"id": i, "method": "status", "params": {}}))
                    i += 1
                    stop.wait(0.01)  # paced, never reading
            except OSError:
                pass

        t = threading.Thread(target=flood, daemon=True)
        t.start()
        try:
            daemon.proc.send_signal(_signal.SIGTERM)
            assert daemon.proc.wait(30) == 0
        finally:
            stop.set()
            t.join(10)
            s.close()
