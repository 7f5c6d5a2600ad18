"""The notify hook (``notify_argv``): real programs run by a real daemon,
one recording what it got, one that hangs, one that exits non-zero."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

from tests._leftovers import reaped
from tests._poll import pid_written, wait_for
from tests.daemon.crashes import crash_with_a_blocked_call_and_a_landed_write
from tests.daemon.harness import Actor, Env

# the recorder: each event's stdin, whole, as one file (written, then renamed)
RECORDER = """\
import os, sys
data = sys.stdin.buffer.read()
out = sys.argv[1]
n = len([f for f in os.listdir(out) if f.endswith(".json")])
tmp = os.path.join(out, f".{n}.tmp")
with open(tmp, "wb") as f:
    f.write(data)
os.rename(tmp, os.path.join(out, f"{n:04d}.json"))
"""
SECRET = "s3cr3t-hook-value"
KEYS = {"event", "op", "attempt", "act", "neuron", "boot", "evidence"}


def recorder_env(**top: Any) -> tuple[Env, Path]:
    env = Env(**top)
    out = env.root / "hook-events"
    out.mkdir()
    script = env.root / "record.py"
    script.write_text(RECORDER)
    env.top["notify_argv"] = [sys.executable, str(script), str(out)]
    secret = env.root / "secret"
    secret.write_text(SECRET)
    # an act whose error text would hold its secret, were it not redacted
    env.acts["leaky"] = {
        "adapter": "cli",
        "argv": ["/bin/sh", "-c", 'echo "token=$TOKEN" >&2; exit 7'],
        "env": {"TOKEN": {"file": str(secret)}},
    }
    env.write_config()
    return env, out


def recorded(out: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]


def logged(d: Any, event: str) -> list[dict[str, Any]]:
    return list(d.logged(event))


class TestRecordingHook:
    def test_the_hook_gets_each_event_as_one_json_object(self, make_daemon):
        """An unknown outcome, an unclean previous boot, the start's marks and
        a receipt's resolution each reach the hook once, in that order, with
        the op, attempt, act, neuron, boot and evidence; no secret in any."""
        env, out = recorder_env()
        d = make_daemon(env)
        a = Actor(d, acts=("leaky", "gated", "ledger"))
        a.submit("k1", "leaky")
        assert a.invoke("k1")["status"] == "unknown"
        wait_for(lambda: len(recorded(out)) == 1, what="the first hook run")
        (first,) = recorded(out)
        assert set(first) == KEYS
        assert (first["event"], first["op"], first["attempt"], first["act"]) == (
            "attempt_unknown", "k1", 1, "leaky",
        )  # fmt: skip
        assert (first["neuron"], first["boot"]) == (a.id, d.boot)
        evidence = first["evidence"]
        assert evidence["claimed"] is True and "exit status 7" in evidence["error"]

        old_boot = d.boot
        crash_with_a_blocked_call_and_a_landed_write(d, a)
        wait_for(lambda: len(recorded(out)) == 5, what="the start's hook runs")
        events = recorded(out)[1:]
        assert [e["event"] for e in events] == [
            "previous_boot_unclean", "attempt_unknown", "attempt_unknown", "resolved_by_receipt",
        ]  # fmt: skip
        assert all(e["boot"] == d.boot for e in events)
        unclean = events[0]
        assert unclean["evidence"] == {"previous_boot": old_boot}
        assert unclean["op"] is None and unclean["neuron"] is None
        marks = {e["op"]: e for e in events[1:3]}
        assert marks["g1"]["act"] == "gated" and marks["g1"]["neuron"] == a.id
        assert marks["g1"]["evidence"] == {
            "claimed": True, "boot": old_boot, "orphan_killed": True,
        }  # fmt: skip
        assert marks["l1"]["evidence"] == {"claimed": False, "boot": old_boot}
        resolved = events[3]
        assert (resolved["op"], resolved["act"]) == ("l1", "ledger")
        assert resolved["evidence"]["answer"] == "executed"
        for p in out.glob("*.json"):
            assert SECRET not in p.read_text()
        assert logged(d, "notify_failed") == []

    def test_a_clean_restart_is_no_event(self, make_daemon):
        """A start after a clean stop runs the hook for nothing."""
        env, out = recorder_env()
        d = make_daemon(env)
        assert d.terminate() == 0
        d.start()
        a = Actor(d, acts=("leaky",))
        a.submit("k1", "leaky")
        a.invoke("k1")
        wait_for(lambda: len(recorded(out)) >= 1, what="the unknown attempt's hook run")
        assert [e["event"] for e in recorded(out)] == ["attempt_unknown"]


def _gated_hook_env(script: str, **top: Any) -> tuple[Env, Path]:
    """A hook that marks each run (``runs/<n>``, its pid inside) and then runs ``script``."""
    env = Env(**top)
    runs = env.root / "runs"
    runs.mkdir()
    q = shlex.quote(str(runs))
    mark = f"n=$(ls {q} | wc -l); echo $$ > {q}/$n; cat > /dev/null; {script}"
    env.top["notify_argv"] = ["/bin/sh", "-c", mark]
    env.write_config()
    return env, runs


class TestFailingHooks:
    def test_a_hook_that_hangs_delays_nothing_and_is_killed_at_its_timeout(self, make_daemon):
        """While the hook hangs, attempts are answered and served as usual;
        at notify_timeout_s its process group is killed, the failure logged,
        and the next event's hook runs."""
        env, runs = _gated_hook_env("exec sleep 600", notify_timeout_s=1)
        d = make_daemon(env)
        a = Actor(d, acts=("boom", "echo"))
        a.submit("b1", "boom")
        assert a.invoke("b1")["status"] == "unknown"
        # the file exists from the shell's redirection on, its pid line a moment later
        pid = pid_written(runs / "0")
        # the hook is hanging: an act, another unknown outcome, and reads go on
        a.submit("e1")
        assert a.invoke("e1")["status"] == "succeeded"
        a.submit("b2", "boom")
        assert a.invoke("b2")["status"] == "unknown"
        assert a.op("b2")["attempts"][0]["state"] == "unknown"
        wait_for(lambda: len(logged(d, "notify_failed")) >= 1, what="the hook's timeout")
        (failed, *_) = logged(d, "notify_failed")
        assert (failed["hook_event"], failed["op"]) == ("attempt_unknown", "b1")
        assert "timed out" in failed["error"] and failed["level"] == "warning"
        wait_for(lambda: reaped(pid), what="the hung hook to be killed and reaped")
        wait_for(lambda: (runs / "1").exists(), what="the next event's hook run")

    def test_a_hook_that_exits_non_zero_is_logged_and_changes_nothing(self, make_daemon):
        """A failing hook's exit status and stderr are logged; the attempt stays
        as recorded and the daemon serves on."""
        env, runs = _gated_hook_env("echo 'no pager today' >&2; exit 3")
        d = make_daemon(env)
        a = Actor(d, acts=("boom",))
        a.submit("b1", "boom")
        assert a.invoke("b1")["status"] == "unknown"
        wait_for(lambda: len(logged(d, "notify_failed")) == 1, what="the hook's failure")
        (failed,) = logged(d, "notify_failed")
        assert failed["error"] == "exit status 3" and failed["stderr"] == "no pager today"
        assert a.op("b1")["attempts"][0]["state"] == "unknown"
        a.call("reconcile", {"op": "b1", "attempt": 1, "outcome": {"status": "not_executed"}})
        assert a.state("b1") == "pending"
