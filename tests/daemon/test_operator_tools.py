"""Operator tools for in-doubt work (docs/recovery.md, docs/operations.md):
abort a hung call, change a prog's step limit, see the last crash in
``status``, reconcile unclaimed attempts in bulk, watch a backlog drain.

Real daemon processes, real hung `cli` programs (``sleep``), real SIGKILLs
and real ``wardctl`` processes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from tests._leftovers import reaped
from tests._poll import pid_written, wait_for
from tests.daemon.harness import Actor, Background, Env, code_of, entry_point_plugin, run_wardctl
from wardd.protocol import WarddError

GATED_PLUGIN = '''
import os
import time


class Gated:
    """In-process: waits for its gate file (the test opens it), then returns."""

    in_process = True
    max_arg_bytes = 4096

    def call(self, request):
        gate = request.args.decode()
        open(gate + ".started", "w").close()
        while not os.path.exists(gate):
            time.sleep(0.02)
        return b"done"


class LazyAbort(Gated):
    """Declares itself abortable, but its abort only notes that it was asked:
    the call then ends on its own."""

    abortable = True

    def abort(self, key):
        open(os.path.join(os.environ["WARDD_TEST_ROOT"], "abort-asked"), "w").close()


class LazyAbortLost(LazyAbort):
    """Like LazyAbort, but its call then ends unknown on its own: it lost
    track of its effect (a plain exception, not CallAborted)."""

    def call(self, request):
        super().call(request)
        raise TimeoutError("the remote side stopped answering")
'''


def hang_act(env: Env) -> dict[str, object]:
    """A `cli` act that records its pid, then hangs (no timeout_s)."""
    pidfile = shlex.quote(str(env.root / "hang.pid"))
    return {"adapter": "cli", "argv": ["/bin/sh", "-c", f"echo $$ > {pidfile}; exec sleep 1000"]}


def plugin_env(root) -> dict[str, str]:
    entries = {"gated": "Gated", "lazyabort": "LazyAbort", "lazylost": "LazyAbortLost"}
    return entry_point_plugin(root, "wardd_gated_plugin", GATED_PLUGIN, entries)


class TestAbort:
    def test_abort_ends_a_hung_call_and_releases_a_waiting_revocation(self, make_daemon):
        """A hung cli call holds the guard: a set_grant waits for it. abort kills
        the process group, records unknown with aborted: true, answers after
        that is durable, and the revocation completes; the call's own invoke
        gets the same outcome and the attempt is reconcilable."""
        env = Env()
        env.acts["hang"] = hang_act(env)
        env.write_config()
        d = make_daemon(env)
        a = Actor(d, acts=("hang", "echo"))
        a.submit("h", "hang")
        call = Background(a.invoke, "h", 1, d.connect())
        pid = pid_written(env.root / "hang.pid")
        revocation = {
            "prog": a.prog,
            "acts": ["echo"],
            "enabled": True,
            "expected_policy_version": a.root()["policy_version"],
        }
        revoke = Background(a.call, "set_grant", revocation, d.connect())
        # the revocation waits for the hung call (the ward guard)
        assert not revoke.done.wait(0.3)
        res = a.call("abort", {"op": "h", "attempt": 1})
        assert res == {"op": "h", "attempt": 1, "status": "unknown", "aborted": True}
        att = a.op("h")["attempts"][0]
        assert att["state"] == "unknown"
        assert att["evidence"]["aborted"] is True and att["evidence"]["claimed"] is True
        own = call.result()
        assert own["status"] == "unknown" and "aborted by the operator" in own["error"]
        assert revoke.result()["policy_version"] >= 1
        wait_for(lambda: reaped(pid), what="the aborted process to be killed and reaped")
        assert "abort" in d.log_text()
        # in-doubt, not guessed: the operator resolves it
        out = {"status": "not_executed"}
        assert a.call("reconcile", {"op": "h", "attempt": 1, "outcome": out})["status"] == (
            "not_executed"
        )
        # a second abort: nothing is running any more
        assert code_of(a.call, "abort", {"op": "h", "attempt": 1}).code == "not_running"

    def test_abort_refusals_change_nothing(self, make_daemon):
        """not_running (done, absent, manual), not_abortable (in-process call),
        unknown_operation (another neuron's op), grant_disabled, bad_request."""
        env = Env(acts={"inproc": {"adapter": "gated"}})
        d = make_daemon(env, start=False)
        d.start(plugin_env(env.root))
        a = Actor(d, acts=("inproc", "echo"))
        other = Actor(d, acts=("echo",))
        a.submit("e", "echo", b"x")
        a.invoke("e")
        assert code_of(a.call, "abort", {"op": "e", "attempt": 1}).code == "not_running"
        assert code_of(a.call, "abort", {"op": "e", "attempt": 7}).code == "not_running"
        a.submit("m", "echo")
        a.call("manual_take", {"op": "m", "expected_attempt": 1, "expected_epoch": 1})
        assert code_of(a.call, "abort", {"op": "m", "attempt": 1}).code == "not_running"
        assert code_of(other.call, "abort", {"op": "e", "attempt": 1}).code == ("unknown_operation")
        gate = env.root / "gate"
        a.submit("g", "inproc", str(gate).encode())
        call = Background(a.invoke, "g", 1, d.connect())
        wait_for((env.root / "gate.started").exists, what="the in-process call")
        err = code_of(a.call, "abort", {"op": "g", "attempt": 1})
        assert err.code == "not_abortable"
        assert a.op("g")["attempts"][0]["state"] == "running"
        gate.touch()
        assert call.result()["status"] == "succeeded"
        for bad in ({"op": "e"}, {"op": "e", "attempt": -1}, {"op": "e", "attempt": 1, "x": 1}):
            assert code_of(a.call, "abort", bad).code == "bad_request"
        a.grant(["echo"], enabled=False)
        assert code_of(a.call, "abort", {"op": "e", "attempt": 1}).code == "grant_disabled"

    def test_a_call_that_ends_on_its_own_keeps_its_outcome_and_the_abort_is_not_running(
        self, make_daemon
    ):
        """An abort taken while the call runs, which the call outlives and
        ends by itself (succeeded): the attempt keeps its own outcome, the
        abort answers not_running once that is durable, and nothing is guessed."""
        env = Env(acts={"lazy": {"adapter": "lazyabort"}})
        d = make_daemon(env, start=False)
        d.start(plugin_env(env.root))
        a = Actor(d, acts=("lazy",))
        gate = env.root / "gate"
        a.submit("l", "lazy", str(gate).encode())
        call = Background(a.invoke, "l", 1, d.connect())
        wait_for((env.root / "gate.started").exists, what="the call to start")
        abort = Background(a.call, "abort", {"op": "l", "attempt": 1}, d.connect())
        wait_for((env.root / "abort-asked").exists, what="the adapter's abort")
        assert not abort.done.is_set()  # it waits for the outcome
        gate.touch()
        assert call.result()["status"] == "succeeded"
        with pytest.raises(WarddError) as ei:
            abort.result()
        assert ei.value.code == "not_running" and "succeeded" in ei.value.message
        att = a.op("l")["attempts"][0]
        assert att["state"] == "succeeded" and "evidence" not in att
        assert a.state("l") == "retained"

    def test_a_call_that_ends_unknown_on_its_own_before_the_kill_says_the_abort_did_not_end_it(
        self, make_daemon
    ):
        """An abort taken while the call runs, which the call outlives and
        ends by itself *unknown*: the attempt is unknown with evidence
        aborted: false and its own error; the abort answers {status:
        unknown, aborted: false} once that is durable, and wardctl says the
        call ended on its own. Nothing is guessed: it is reconciled by hand."""
        env = Env(acts={"lost": {"adapter": "lazylost"}})
        d = make_daemon(env, start=False)
        d.start(plugin_env(env.root))
        a = Actor(d, acts=("lost",))
        a.neuron.save(env.root / "neuron.key")
        gate = env.root / "gate"
        a.submit("l", "lost", str(gate).encode())
        call = Background(a.invoke, "l", 1, d.connect())
        wait_for((env.root / "gate.started").exists, what="the call to start")
        abort = Background(run_wardctl, env, "--json", "abort", "l")
        wait_for((env.root / "abort-asked").exists, what="the adapter's abort")
        assert not abort.done.is_set()  # it waits for the outcome
        gate.touch()
        own = call.result()
        assert own["status"] == "unknown" and "aborted" not in own["error"]
        assert "the remote side stopped answering" in own["error"]
        answer = json.loads(abort.result().stdout)
        assert answer == {"op": "l", "attempt": 1, "status": "unknown", "aborted": False}
        att = a.op("l")["attempts"][0]
        assert att["state"] == "unknown"
        assert att["evidence"]["aborted"] is False and att["evidence"]["claimed"] is True
        gate.unlink()
        (env.root / "abort-asked").unlink()
        (env.root / "gate.started").unlink()
        out = {"status": "not_executed"}
        a.call("reconcile", {"op": "l", "attempt": 1, "outcome": out})
        a.submit("m", "lost", str(gate).encode())
        call = Background(a.invoke, "m", 1, d.connect())
        wait_for((env.root / "gate.started").exists, what="the second call to start")
        abort = Background(run_wardctl, env, "abort", "m")
        wait_for((env.root / "abort-asked").exists, what="the adapter's abort")
        gate.touch()
        assert call.result()["status"] == "unknown"
        assert "ended unknown on its own before the abort's kill reached it" in (
            abort.result().stdout
        )

    def test_wardctl_abort_names_the_next_step(self, make_daemon):
        """`wardctl abort OP` aborts the op's latest attempt and says how to resolve it."""
        env = Env()
        env.acts["hang"] = hang_act(env)
        env.write_config()
        d = make_daemon(env)
        a = Actor(d, acts=("hang",))
        a.neuron.save(env.root / "neuron.key")
        a.submit("h", "hang")
        call = Background(a.invoke, "h", 1, d.connect())
        pid_written(env.root / "hang.pid")  # the call hangs
        out = run_wardctl(env, "abort", "h").stdout
        assert "aborted, now unknown" in out and "wardctl reconcile h 1" in out
        assert call.result()["status"] == "unknown"
        refused = run_wardctl(env, "abort", "h", check=False)
        assert refused.returncode == 1 and "not_running" in refused.stderr


class TestStepLimit:
    def test_raising_the_limit_of_an_exhausted_prog_lets_new_work_pass(self, daemon):
        """set_step_limit is fenced by state_version; raising an exhausted prog's
        limit lets reservations and prepares pass; cancelled ops stay cancelled."""
        a = Actor(daemon, acts=("echo",), step_limit=10)
        a.submit("before", "echo", b"x")
        a.call("reserve_steps", {"prog": a.prog, "reservation": "r1", "steps": 10})
        a.call("settle_steps", {"prog": a.prog, "reservation": "r1", "steps": 10})
        assert a.state("before") == "cancelled"
        err = code_of(a.call, "reserve_steps", {"prog": a.prog, "reservation": "r2", "steps": 1})
        assert err.code == "budget_exhausted"
        prog = a.read("get_prog", {"neuron": a.id, "prog": a.prog})
        version = prog["state_version"]
        stale = {"prog": a.prog, "step_limit": 20, "expected_state_version": version - 1}
        assert code_of(a.call, "set_step_limit", stale).code == "state_mismatch"
        low = {"prog": a.prog, "step_limit": 9, "expected_state_version": version}
        assert code_of(a.call, "set_step_limit", low).code == "bad_request"
        assert a.read("get_prog", {"neuron": a.id, "prog": a.prog}) == prog
        res = a.call(
            "set_step_limit", {"prog": a.prog, "step_limit": 20, "expected_state_version": version}
        )
        assert res == {"prog": a.prog, "step_limit": 20, "state_version": version + 1}
        after = a.read("get_prog", {"neuron": a.id, "prog": a.prog})
        assert (after["step_limit"], after["state_version"]) == (20, version + 1)
        a.call("reserve_steps", {"prog": a.prog, "reservation": "r2", "steps": 5})
        a.submit("after", "echo", b"y")
        assert a.invoke("after")["status"] == "succeeded"
        assert a.state("before") == "cancelled"
        # the captured request can never be replayed: its version is gone
        again = {"prog": a.prog, "step_limit": 20, "expected_state_version": version}
        assert code_of(a.call, "set_step_limit", again).code == "state_mismatch"
        # and a set_prog_state signed before it is stale too
        pause = {
            "prog": a.prog,
            "expected_state": "active",
            "state": "paused",
            "expected_state_version": version,
        }
        assert code_of(a.call, "set_prog_state", pause).code == "state_mismatch"

    def test_wardctl_prog_limit(self, daemon):
        """`wardctl prog limit PROG N` reads the version and sets the limit."""
        env = daemon.env
        a = Actor(daemon, acts=("echo",), step_limit=10)
        a.neuron.save(env.root / "neuron.key")
        out = run_wardctl(env, "prog", "limit", a.prog, "42").stdout
        assert "step limit 42" in out
        assert a.read("get_prog", {"neuron": a.id, "prog": a.prog})["step_limit"] == 42


class TestStatusAfterACrash:
    def test_previous_boot_and_recovery_counts(self, make_daemon):
        """status says whether the last boot stopped cleanly, how many attempts
        this start marked unknown and how many a receipt resolved; wardctl
        status prints it in one line."""
        d = make_daemon()
        env = d.env
        assert d.connect().call("status")["previous_boot"] is None
        a = Actor(d, acts=("ledger", "gated"))
        a.submit("l", "ledger", b"x")
        a.prepare("l")  # prepared, never executed: a receipt resolves it
        a.submit("g", "gated")
        Background(a.invoke, "g", 1, d.connect())
        wait_for(env.started_marker("g").exists, what="the gated act to start")
        first = d.boot
        d.kill()
        d.start()
        st = d.connect().call("status")
        assert st["previous_boot"] == {"boot": first, "clean": False}
        assert st["recovery"] == {"marked_unknown": 2, "resolved_by_receipt": 1}
        a.neuron.save(env.root / "neuron.key")
        line = [x for x in run_wardctl(env, "status").stdout.splitlines() if "previous" in x]
        assert line == [
            f"previous boot {first[:12]} did not stop cleanly: 2 attempts marked unknown, "
            "1 resolved by receipt, 1 wait for you: wardctl attempts --state unknown"
        ]
        second = d.boot
        assert d.terminate() == 0
        d.start()
        st = d.connect().call("status")
        assert st["previous_boot"] == {"boot": second, "clean": True}
        assert st["recovery"] == {"marked_unknown": 0, "resolved_by_receipt": 0}


class TestBulkReconcile:
    def test_reconcile_unclaimed_resolves_only_unclaimed_attempts_and_is_safe_twice(
        self, make_daemon
    ):
        """After a crash, unclaimed unknown attempts are reconciled not_executed
        one by one (printed); the claimed one and another neuron's stay unknown;
        --dry-run signs nothing; a second run has nothing to do."""
        d = make_daemon()
        env = d.env
        a = Actor(d, acts=("echo", "gated"))
        other = Actor(d, acts=("echo",))
        for op in ("u1", "u2"):
            a.submit(op, "echo", b"x")
            a.prepare(op)
        other.submit("o1", "echo", b"x")
        other.prepare("o1")
        a.submit("g", "gated")
        Background(a.invoke, "g", 1, d.connect())
        wait_for(env.started_marker("g").exists, what="the gated act to start")
        d.kill()
        d.start()
        a.client = d.connect()
        other.client = d.connect()
        key = env.root / "neuron.key"
        a.neuron.save(key)
        dry = run_wardctl(env, "reconcile", "--unclaimed", "--dry-run").stdout
        assert "op u1 attempt 1: would reconcile" in dry and "op u2 attempt 1" in dry
        assert "o1" not in dry and "op g" not in dry
        assert a.op("u1")["attempts"][0]["state"] == "unknown"
        out = run_wardctl(env, "reconcile", "--unclaimed").stdout.splitlines()
        assert sorted(out) == ["op u1 attempt 1: not_executed", "op u2 attempt 1: not_executed"]
        for op in ("u1", "u2"):
            att = a.op(op)["attempts"][0]
            assert att["state"] == "not_executed" and att["outcome"]["source"] == "reconcile"
        assert a.op("g")["attempts"][0]["state"] == "unknown"
        assert other.op("o1")["attempts"][0]["state"] == "unknown"
        again = run_wardctl(env, "reconcile", "--unclaimed").stdout
        assert "no unclaimed unknown attempts" in again
        usage = run_wardctl(env, "reconcile", "--unclaimed", "g", check=False)
        assert usage.returncode == 2

    def test_attempts_watch_exits_once_the_backlog_is_empty(self, make_daemon):
        """`wardctl attempts --state unknown --watch N` lists until none is left, then exits 0."""
        d = make_daemon()
        env = d.env
        a = Actor(d, acts=("echo",))
        a.submit("u", "echo", b"x")
        a.prepare("u")
        d.kill()
        d.start()
        a.client = d.connect()
        e = {**os.environ, "WARDD_SOCKET": str(env.socket)}
        watch = subprocess.Popen(
            [sys.executable, "-m", "wardd.client.wardctl", "attempts", "--state", "unknown"]
            + ["--watch", "0.1"],
            stdout=subprocess.PIPE,
            text=True,
            env=e,
        )
        try:
            assert watch.stdout is not None
            first = watch.stdout.readline()
            assert first.startswith("-- ")
            assert "u attempt 1" in watch.stdout.readline()
            assert watch.poll() is None  # still watching
            a.call("reconcile", {"op": "u", "attempt": 1, "outcome": {"status": "not_executed"}})
            assert watch.wait(30) == 0
            assert "no unknown attempts left" in watch.stdout.read()
        finally:
            watch.kill()
            watch.wait()
            watch.stdout.close()


class TestGrantWarnings:
    def test_a_grant_names_unknown_acts_and_the_acts_it_drops(self, daemon):
        """wardctl grant warns of an act this daemon does not serve and notes
        which granted acts the new set drops (a grant replaces the set)."""
        env = daemon.env
        run_wardctl(env, "keygen")
        run_wardctl(env, "register")
        run_wardctl(env, "prog", "create", "p")
        out = run_wardctl(env, "grant", "p", "echo", "ledger")
        assert "warning" not in out.stderr and "no longer" not in out.stderr
        out = run_wardctl(env, "grant", "p", "ehco")
        assert "not an act of this daemon: ehco" in out.stderr
        assert "no longer includes: echo, ledger" in out.stderr
