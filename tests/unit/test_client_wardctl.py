"""wardctl without a daemon: help, usage errors, keygen, and output against a scripted peer."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit._wardctl_stub import ALL_COMMANDS, daemon_stub, run
from wardd.client import Neuron
from wardd.client.wardctl import Exit
from wardd.protocol import verify

__all__ = ["daemon_stub"]  # the fixture, used by name


class TestHelp:
    def test_every_documented_command_exists(self) -> None:
        """The commands the operator guide names are all there."""
        expected = {
            ("keygen",),
            ("status",),
            ("workers",),
            ("register",),
            ("bind",),
            ("release",),
            ("epoch", "advance"),
            ("grant",),
            ("prog", "create"),
            ("prog", "state"),
            ("prog", "recover"),
            ("prog", "show"),
            ("submit",),
            ("invoke",),
            ("op", "show"),
            ("ops",),
            ("attempts",),
            ("history",),
            ("reconcile",),
            ("cancel",),
            ("consume",),
            ("rebind",),
            ("receipts",),
            ("manual-take",),
        }
        assert expected <= set(ALL_COMMANDS)

    def test_top_level_help_exits_0(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`wardctl --help` lists the commands and every exit status with its meaning."""
        code, out, _ = run(capsys, "--help")
        assert code == 0
        assert "usage: wardctl" in out and "manual-take" in out
        listed = out.split("exit status:\n", 1)[1].splitlines()
        codes = [int(line.split()[0]) for line in listed if line.strip()]
        assert codes == [0, 1, 2, 3, 4, 69, 130] == [int(e) for e in Exit]

    @pytest.mark.parametrize("argv", ALL_COMMANDS, ids=" ".join)
    def test_every_command_has_help(
        self, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
    ) -> None:
        """`wardctl CMD --help` exits 0 with that command's usage."""
        code, out, _ = run(capsys, *argv, "--help")
        assert code == 0
        assert out.startswith(f"usage: wardctl {' '.join(argv)}")
        assert "--socket" in out and "--json" in out

    def test_module_entry_point_runs(self) -> None:
        """`python -m wardd.client.wardctl --help` works (the console script's twin)."""
        done = subprocess.run(
            [sys.executable, "-m", "wardd.client.wardctl", "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "usage: wardctl" in done.stdout


class TestUsage:
    @pytest.mark.parametrize(
        "argv",
        [
            (),
            ("bogus",),
            ("epoch",),
            ("attempts",),
            ("attempts", "--state", "void"),
            ("reconcile", "op", "1"),
            ("reconcile", "op", "x", "--failed"),
            ("reconcile", "op", "1", "--failed", "--succeeded"),
            ("submit", "p", "o", "echo", "--args", "a", "--args-hex", "00"),
            ("prog", "state", "p", "frozen"),
            ("prog", "state", "p", "paused", "--expected-version", "-1"),
            ("prog", "recover", "p", "--before", "-1"),
            ("prog", "recover", "p", "--before", "x"),
            ("--timeout", "-1", "status"),
            ("--timeout", "0", "status"),
            ("--timeout", "nan", "status"),
            ("--timeout", "inf", "status"),
            ("--timeout", "soon", "status"),
            ("reconcile", "--unclaimed", "op"),
            ("reconcile", "--dry-run", "op", "1", "--failed"),
            ("attempts", "--state", "unknown", "--watch", "0"),
            ("abort",),
            ("prog", "limit", "p"),
            ("prog", "limit", "p", "-1"),
        ],
        ids=repr,
    )
    def test_usage_errors_exit_2(self, capsys: pytest.CaptureFixture[str], argv: tuple) -> None:
        """A malformed command line exits 2 without contacting anything."""
        code, _, err = run(capsys, "--socket", "/nonexistent/s", *argv)
        assert code == 2
        assert "usage:" in err

    def test_grant_without_acts_needs_disable(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`grant PROG` alone would revoke everything by accident: it is a usage error."""
        code, _, err = run(capsys, "--key", str(tmp_path / "k"), "grant", "p")
        assert code == 2 and "--disable" in err

    def test_unreachable_daemon_exits_69(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """No daemon at --socket: one `error:` line naming the socket, exit 69."""
        code, _, err = run(capsys, "--socket", str(tmp_path / "none.sock"), "status")
        assert code == Exit.UNREACHABLE == 69
        assert err.startswith("error: cannot reach wardd at ") and "none.sock" in err

    def test_global_options_work_after_the_command(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """--socket/--json may follow the command (`status --json`)."""
        code, out, err = run(capsys, "status", "--json", "--socket", str(tmp_path / "none"))
        assert code == Exit.UNREACHABLE and "none" in err
        assert json.loads(out)["error"]["message"].startswith("cannot reach wardd")


class TestKeygen:
    def test_keygen_writes_a_0600_key_and_prints_its_id(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """keygen saves PEM 0600 and prints the key's path, then the neuron id on the last line."""
        path = tmp_path / "cfg" / "neuron.key"
        code, out, _ = run(capsys, "--key", str(path), "keygen")
        assert code == 0
        first, last = out.strip().splitlines()
        assert str(path) in first and last == Neuron.load(path).id
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def test_keygen_refuses_to_replace_a_key_without_force(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A second keygen exits 2 (usage) and keeps the key; --force replaces it."""
        path = tmp_path / "neuron.key"
        run(capsys, "--key", str(path), "keygen")
        first = Neuron.load(path).id
        code, _, err = run(capsys, "--key", str(path), "keygen")
        assert code == Exit.USAGE and "--force" in err
        assert Neuron.load(path).id == first
        code, out, _ = run(capsys, "--key", str(path), "keygen", "--force")
        last = out.strip().splitlines()[-1]
        assert code == 0 and last != first
        assert Neuron.load(path).id == last

    def test_keygen_uses_the_xdg_default(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Without --key: $WARDD_KEY, else $XDG_CONFIG_HOME/wardd/neuron.key."""
        monkeypatch.delenv("WARDD_KEY", raising=False)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
        code, out, _ = run(capsys, "keygen")
        assert code == 0
        assert Neuron.load(tmp_path / "wardd" / "neuron.key").id == out.strip().splitlines()[-1]
        monkeypatch.setenv("WARDD_KEY", str(tmp_path / "env.key"))
        run(capsys, "keygen")
        assert (tmp_path / "env.key").exists()

    def test_a_bad_key_file_is_one_error_line(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """A signed command with an unreadable key exits 2 naming the file, not its content."""
        (tmp_path / "k").write_text("not a key at all, secret-ish words")
        code, _, err = run(capsys, "--key", str(tmp_path / "k"), "--socket", "/x", "register")
        assert code == Exit.USAGE
        assert "key file" in err and "secret-ish" not in err


# ------------------------------------------------------------------------------------
# against a scripted peer

STATUS = {
    "version": "0.1.0",
    "protocol": 1,
    "boot": "b" * 32,
    "started_at": "2024-01-01T00:00:00Z",
    "uptime": 3723.5,
    "network": "local",
    "db": {"path": "/var/wardd.db", "schema_version": 1, "size": 2048},
    "workers": [
        {
            "id": "w0",
            "digest": "d" * 64,
            "busy_op": None,
            "counts": {"succeeded": 4, "failed": 1, "unknown": 0},
        },
        {
            "id": "w1",
            "digest": "e" * 64,
            "busy_op": {"neuron": "a" * 64, "op": "op-7", "attempt": 2},
            "counts": {"succeeded": 0, "failed": 0, "unknown": 1},
        },
    ],
    "operations": {"pending": 2, "retained": 1, "unknown": 1},
    "unknown_attempts": 1,
    "receipts_pending": 0,
    "writer": {"backlog": 0, "batches": 10, "mean_batch": 1.5, "max_batch": 4},
    "connections": 2,
}


class TestAgainstAStub:
    def test_status_is_a_readable_summary(self, capsys, daemon_stub) -> None:
        """status shows version, boot, uptime, db, workers with busy op and counts, and more."""
        path, _ = daemon_stub({"status": STATUS})
        code, out, _ = run(capsys, "--socket", path, "status")
        assert code == 0
        for text in (
            "wardd 0.1.0",
            "b" * 32,
            "up 1h 2m 3s",
            "/var/wardd.db",
            "2.0 KiB",
            "w0",
            "idle",
            "succeeded 4",
            "busy: aaaaaaaaaaaa/op-7 attempt 2",
            "pending 2",
            "unknown attempts: 1",
            "receipts pending: 0",
            "mean batch 1.50",
            "connections: 2",
        ):
            assert text in out, text

    def test_status_json_is_the_raw_result(self, capsys, daemon_stub) -> None:
        """--json prints the status result as JSON."""
        path, _ = daemon_stub({"status": STATUS})
        code, out, _ = run(capsys, "--socket", path, "--json", "status")
        assert code == 0 and json.loads(out) == STATUS

    def test_a_refusal_prints_its_code_and_exits_1(self, capsys, daemon_stub, tmp_path) -> None:
        """A wardd error is `error: <code>: <message>` on stderr, with its data, exit 1."""
        from wardd.protocol import TokenVoid

        key = tmp_path / "k"
        Neuron.generate().save(key)
        path, _ = daemon_stub({"cancel": TokenVoid("voided", {"reason": "revoked"})})
        code, out, err = run(capsys, "--socket", path, "--key", str(key), "cancel", "o")
        assert code == Exit.REFUSED == 1 and out == ""
        assert err.splitlines() == ["error: token_void: voided", "  reason: revoked"]

    def test_submit_signs_args_from_each_source(
        self, capsys, daemon_stub, tmp_path, monkeypatch
    ) -> None:
        """--args text, --args-hex and --args-file (and - for stdin) all become the args bytes."""
        key = tmp_path / "k"
        neuron = Neuron.generate()
        neuron.save(key)
        path, seen = daemon_stub({"submit": lambda p: {"op": p["op"], "state": "pending"}})
        (tmp_path / "a").write_bytes(b"\x00file")
        import io

        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"from stdin")))
        for extra in (
            ["--args", "héllo"],
            ["--args-hex", "00ff"],
            ["--args-file", str(tmp_path / "a")],
            ["--args-file", "-"],
            [],
        ):
            code, out, _ = run(
                capsys, "--socket", path, "--key", str(key), "submit", "p", "o", "echo", *extra
            )
            assert code == 0 and out.strip() == "op o: pending"
        sent = [r["params"] for r in seen if r["method"] == "submit"]
        assert [p["args"] for p in sent] == [
            "héllo".encode(),
            b"\x00\xff",
            b"\x00file",
            b"from stdin",
            b"",
        ]
        for p in sent:
            assert verify(neuron.id, p["sig"], "local", "submit", p)

    def test_invoke_reads_the_attempt_and_epoch_and_shows_bytes(
        self, capsys, daemon_stub, tmp_path
    ) -> None:
        """invoke sends 1 + attempts so far and the current epoch; byte results print readably."""
        key = tmp_path / "k"
        Neuron.generate().save(key)
        root = {"epoch": 2, "policy_version": 1, "placement_generation": 3}
        path, seen = daemon_stub(
            {
                "get_neuron": root,
                "get_operation": {"op": "o", "attempts": [{"attempt": 1}]},
                "invoke": {"op": "o", "attempt": 2, "status": "succeeded", "result": b"hi there"},
            }
        )
        code, out, _ = run(capsys, "--socket", path, "--key", str(key), "invoke", "o")
        assert code == 0
        assert out.splitlines() == ["op o attempt 2: succeeded", "result: hi there"]
        (params,) = [r["params"] for r in seen if r["method"] == "invoke"]
        assert (
            params["expected_attempt"],
            params["expected_epoch"],
            params["placement_generation"],
        ) == (2, 2, 3)

    def test_prog_state_and_recover_always_send_their_fences(
        self, capsys, daemon_stub, tmp_path
    ) -> None:
        """prog state sends expected_state_version and prog recover sends before, read
        from get_prog unless given on the command line."""
        key = tmp_path / "k"
        neuron = Neuron.generate()
        neuron.save(key)
        prog = {"prog": "p", "state": "paused", "state_version": 4, "reservation_seq": 7}
        path, seen = daemon_stub(
            {
                "get_prog": prog,
                "set_prog_state": lambda p: {"prog": "p", "state": p["state"], "state_version": 5},
                "recover_reservations": {"released": 2},
            }
        )
        base = ("--socket", path, "--key", str(key), "prog")
        code, out, _ = run(capsys, *base, "state", "p", "active")
        assert code == 0 and out.strip() == "prog p: active (state_version 5)"
        code, out, _ = run(capsys, *base, "recover", "p")
        assert code == 0 and out.strip() == "prog p: 2 reservation(s) released"
        assert run(capsys, *base, "state", "p", "retired", "--expected-version", "9")[0] == 0
        assert run(capsys, *base, "recover", "p", "--before", "3")[0] == 0
        states = [r["params"] for r in seen if r["method"] == "set_prog_state"]
        recovers = [r["params"] for r in seen if r["method"] == "recover_reservations"]
        assert [(p["expected_state"], p["expected_state_version"]) for p in states] == [
            ("paused", 4),
            ("paused", 9),
        ]
        assert [p["before"] for p in recovers] == [7, 3]
        for p in states:
            assert verify(neuron.id, p["sig"], "local", "set_prog_state", p)
        for p in recovers:
            assert verify(neuron.id, p["sig"], "local", "recover_reservations", p)

    def test_invoke_with_an_unknown_outcome_exits_3(self, capsys, daemon_stub, tmp_path) -> None:
        """An unknown attempt exits 3 (it may have run), and says how to resolve it."""
        key = tmp_path / "k"
        Neuron.generate().save(key)
        path, _ = daemon_stub(
            {
                "get_neuron": {"epoch": 1, "placement_generation": 1},
                "invoke": {"op": "o", "attempt": 1, "status": "unknown", "error": "killed"},
            }
        )
        code, out, _ = run(
            capsys, "--socket", path, "--key", str(key), "invoke", "o", "--attempt", "1"
        )
        assert code == Exit.MAY_HAVE_RUN == 3
        assert "op o attempt 1: unknown" in out
        # true with a receipt or without one: never "resolve it with a receipt" alone
        assert "An act with a receipt is asked again by `wardctl receipts`" in out
        assert "`wardctl reconcile o 1 --succeeded`" in out

    def test_json_output_hexes_bytes(self, capsys, daemon_stub, tmp_path) -> None:
        """--json renders byte strings as {"hex": ...}."""
        path, _ = daemon_stub({"get_operation": {"op": "o", "args": b"\x00\x01", "attempts": []}})
        code, out, _ = run(
            capsys, "--socket", path, "--json", "op", "show", "o", "--neuron", "ab" * 32
        )
        assert code == 0
        assert json.loads(out) == {"op": "o", "args": {"hex": "0001"}, "attempts": []}

    def test_undecodable_bytes_print_as_hex(self, capsys, daemon_stub) -> None:
        """Human output shows non-text bytes as hex:..."""
        path, _ = daemon_stub({"get_operation": {"op": "o", "args": b"\xff\x00", "attempts": []}})
        code, out, _ = run(capsys, "--socket", path, "op", "show", "o", "--neuron", "ab" * 32)
        assert code == 0 and "args: hex:ff00" in out

    def test_op_show_of_a_pruned_op_says_it_was_pruned_and_when(self, capsys, daemon_stub) -> None:
        """`op show` of a pruned op names its final state, when it ended and when it was pruned."""
        tomb = {
            "op": "o",
            "prog": "p",
            "act": "echo",
            "state": "consumed",
            "pruned": True,
            "ended_at": "2026-01-01T00:00:00.000Z",
            "pruned_at": "2026-02-01T00:00:00.000Z",
        }
        path, _ = daemon_stub({"get_operation": tomb})
        code, out, _ = run(capsys, "--socket", path, "op", "show", "o", "--neuron", "ab" * 32)
        first = out.splitlines()[0]
        assert code == 0 and first.startswith("op o: consumed, pruned at 2026-02-01T00:00:00.000Z")
        assert "ended at 2026-01-01T00:00:00.000Z" in first

    def test_op_show_names_a_receipt_conflict_first_and_skips_malformed_evidence(
        self, capsys, daemon_stub
    ) -> None:
        """`op show` begins with one line per attempt whose receipt contradicted its
        recorded outcome (evidence.receipt_conflict); evidence of another shape is no error."""
        conflict = {"answer": "executed", "at": "2026-01-01T00:00:00.000Z"}
        op = {
            "op": "o",
            "prog": "p",
            "act": "tool.run",
            "state": "pending",
            "attempts": [
                {"attempt": 1, "state": "failed", "evidence": ["not", "a", "map"]},
                {"attempt": 2, "state": "failed", "evidence": {"receipt_conflict": "executed"}},
                {
                    "attempt": 3,
                    "state": "not_executed",
                    "outcome": {"status": "not_executed", "source": "reconcile"},
                    "evidence": {"claimed": True, "receipt_conflict": conflict},
                },
            ],
        }
        path, _ = daemon_stub({"get_operation": op})
        code, out, _ = run(capsys, "--socket", path, "op", "show", "o", "--neuron", "ab" * 32)
        lines = out.splitlines()
        assert code == 0
        assert lines[0] == (
            "attempt 3: its receipt answered executed after not_executed was recorded"
            " (source reconcile); look the effect up where the act has it"
        )
        assert not lines[1].startswith("attempt ")

    def test_ops_unknown_prints_each_unknown_attempts_evidence(self, capsys, daemon_stub) -> None:
        """`ops --state unknown` shows the evidence of every unknown attempt."""
        op = {
            "op": "o",
            "prog": "p",
            "act": "tool.run",
            "state": "unknown",
            "attempts": [
                {"attempt": 1, "kind": "guarded", "state": "failed"},
                {
                    "attempt": 2,
                    "kind": "guarded",
                    "state": "unknown",
                    "claimed": True,
                    "boot": "c" * 32,
                    "evidence": {"claimed": True, "boot": "c" * 32, "receipt_hint": "not_executed"},
                },
            ],
        }
        path, seen = daemon_stub(
            {
                "list_operations": {
                    "operations": [
                        {
                            "op": "o",
                            "prog": "p",
                            "act": "tool.run",
                            "state": "unknown",
                            "attempts": 2,
                        }
                    ]
                },
                "get_operation": op,
            }
        )
        code, out, _ = run(
            capsys, "--socket", path, "ops", "--state", "unknown", "--neuron", "ab" * 32
        )
        assert code == 0
        assert "attempt 2 (guarded): unknown" in out and "receipt_hint: not_executed" in out
        assert "attempt 1" not in out
        listed = [r["params"] for r in seen if r["method"] == "list_operations"]
        assert listed[0]["state"] == "unknown"
