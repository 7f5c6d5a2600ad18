"""wardctl's exit statuses, `--limit` and pruned ops, as a script sees them:
real wardctl processes against a real daemon.

Statuses 3 (an answer lost after sending, by a SIGKILLed daemon) and 130
(SIGINT) are checked in test_wardctl_truth.py with real signals.
"""

from __future__ import annotations

from tests._poll import wait_for
from tests.daemon._wardctl import set_up, wardctl
from tests.daemon.harness import Env

RETAIN_1S = {"retention_s": 1, "prune_interval_s": 1}


class TestExitStatuses:
    def test_each_outcome_of_invoke_has_its_status(self, make_daemon):
        """0 succeeded, 4 failed (no effect: the op may run again), 3 unknown."""
        d = make_daemon()
        set_up(d.env, "quick nofx boom")
        for op, act in (("ok", "quick"), ("no", "nofx"), ("un", "boom")):
            wardctl(d.env, "submit", "p", op, act)
        assert wardctl(d.env, "invoke", "ok").returncode == 0
        failed = wardctl(d.env, "invoke", "no", check=False)
        assert failed.returncode == 4 and "op no attempt 1: failed" in failed.stdout
        unknown = wardctl(d.env, "invoke", "un", check=False)
        assert unknown.returncode == 3 and "op un attempt 1: unknown" in unknown.stdout
        # 4 is definite: the op takes a new attempt; 3 is not: the next invoke is refused
        assert wardctl(d.env, "invoke", "no", check=False).returncode == 4
        refused = wardctl(d.env, "invoke", "un", check=False)
        assert refused.returncode == 1 and "error: attempt_unknown" in refused.stderr

    def test_each_answer_of_call_has_the_status_invoke_gives_it(self, make_daemon):
        """0 succeeded (and its repeat, already), 4 failed, 3 unknown and then
        attempt_unknown (it may have run), 1 op_conflict: the same call again
        never runs the act again."""
        d = make_daemon()
        set_up(d.env, "quick nofx boom")
        ok = wardctl(d.env, "call", "p", "ok", "quick", "--args", "a")
        assert ok.stdout.startswith("op ok attempt 1: succeeded")
        again = wardctl(d.env, "call", "p", "ok", "quick", "--args", "a")
        assert "succeeded (already; the op is retained: nothing ran again)" in again.stdout
        assert len(d.env.ledger_lines(d.env.cli_ledger)) == 1
        assert wardctl(d.env, "call", "p", "no", "nofx", check=False).returncode == 4
        assert wardctl(d.env, "call", "p", "no", "nofx", check=False).returncode == 4
        unknown = wardctl(d.env, "call", "p", "un", "boom", check=False)
        assert unknown.returncode == 3 and "op un attempt 1: unknown" in unknown.stdout
        blocked = wardctl(d.env, "call", "p", "un", "boom", check=False)
        assert blocked.returncode == 3 and "error: attempt_unknown" in blocked.stderr
        assert "attempt: 1" in blocked.stderr
        conflict = wardctl(d.env, "call", "p", "ok", "quick", "--args", "b", check=False)
        assert conflict.returncode == 1 and "error: op_conflict" in conflict.stderr
        wardctl(d.env, "consume", "ok")
        consumed = wardctl(d.env, "call", "p", "ok", "quick", "--args", "a", "--json")
        assert '"state": "consumed"' in consumed.stdout

    def test_a_refusal_is_1_and_a_usage_error_2_and_neither_changes_anything(self, make_daemon):
        d = make_daemon()
        set_up(d.env, "quick")
        refused = wardctl(d.env, "cancel", "no-such-op", check=False)
        assert refused.returncode == 1 and "error: unknown_operation" in refused.stderr
        usage = wardctl(d.env, "submit", "p", check=False)
        assert usage.returncode == 2 and "usage: wardctl submit" in usage.stderr
        for argv in (("submit", "p", "a b", "quick"), ("invoke", "x" * 129), ("op", "show", "")):
            bad_id = wardctl(d.env, *argv, check=False)  # the client's own check: never sent
            assert bad_id.returncode == 2 and "is not an id: ids are 1-128" in bad_id.stderr
        assert "no operations" in wardctl(d.env, "ops").stdout

    def test_an_unregistered_key_is_named_with_the_command_that_registers_it(self, make_daemon):
        """unknown_neuron (1) names the key file used and hints `wardctl register`."""
        d = make_daemon()
        other = d.env.root / "other.key"
        wardctl(d.env, "keygen", "--key", str(other))
        out = wardctl(d.env, "op", "show", "o", "--key", str(other), check=False)
        assert out.returncode == 1 and "error: unknown_neuron" in out.stderr
        assert f"key file: {other}" in out.stderr and "wardctl register" in out.stderr
        wardctl(d.env, "register", "--key", str(other))
        out = wardctl(d.env, "op", "show", "o", "--key", str(other), check=False)
        assert out.returncode == 1 and "error: unknown_operation" in out.stderr
        assert "wardctl register" not in out.stderr

    def test_an_unreachable_daemon_is_69(self, make_daemon):
        """A daemon that stopped: every command that needs it exits 69."""
        d = make_daemon()
        set_up(d.env, "quick")
        d.terminate()
        for argv in (("status",), ("submit", "p", "o", "quick"), ("invoke", "o")):
            out = wardctl(d.env, *argv, check=False)
            assert out.returncode == 69 and "cannot reach wardd" in out.stderr, argv


class TestListingsForScripts:
    def test_limit_shows_the_first_n_of_a_long_listing(self, make_daemon):
        d = make_daemon()
        set_up(d.env, "quick")
        for i in range(5):
            wardctl(d.env, "submit", "p", f"op-{i}", "quick")
        lines = wardctl(d.env, "ops", "--limit", "2").stdout.splitlines()
        assert [line.split()[0] for line in lines[:2]] == ["op-0", "op-1"]
        assert lines[2] == "(the first 2 operations shown, more exist: raise --limit)"
        assert len(wardctl(d.env, "ops", "--limit", "5").stdout.splitlines()) == 5
        wardctl(d.env, "invoke", "op-0")
        history = wardctl(d.env, "history", "op-0", "--limit", "1").stdout.splitlines()
        assert history[-1] == "(the first 1 records shown, more exist: raise --limit)"

    def test_history_and_submit_say_when_an_op_was_pruned(self, make_daemon):
        """After retention pruned an op, history and a repeated submit say so in words."""
        d = make_daemon(Env(**RETAIN_1S))
        set_up(d.env, "quick")
        wardctl(d.env, "submit", "p", "gone", "quick")
        wardctl(d.env, "invoke", "gone")
        wardctl(d.env, "consume", "gone")
        with d.connect() as c:
            wait_for(lambda: c.call("status", {})["db"]["pruned_ops"] >= 1, 30, "the prune")
        history = wardctl(d.env, "history", "gone").stdout
        assert "op gone was pruned" in history and "no records" not in history
        again = wardctl(d.env, "submit", "p", "gone", "quick").stdout
        assert again.startswith("op gone: consumed (already); it ended and was pruned")
        done = wardctl(d.env, "call", "p", "gone", "quick", check=False)
        assert done.returncode == 3  # a tombstone keeps no fate: it may have run
        called = done.stdout
        assert called.startswith("op gone: consumed (already") and "was pruned" in called
        assert "may have run" in called and "new op id" not in called
