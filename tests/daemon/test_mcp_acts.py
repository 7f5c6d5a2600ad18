"""The ``mcp`` act through a real daemon, against real MCP servers (contract §6).

The servers are `tests.daemon._mcp_peer`, written with the SDK's MCPServer:
over stdio, started by the daemon from the act's ``command``, or over
streamable HTTP on 127.0.0.1, started by the test and ended in a fixture.
Each records every ``tools/call`` it received and keeps a ledger of the
keys whose effect it had. The rules:

- a result with ``isError: false`` → succeeded with its structured content;
  the fence key is in ``_meta`` and ``params.idempotencyKey``, and with
  ``argument:NAME`` also as that argument;
- a tool error → unknown (``tool_errors = "failed"``: failed); a tool not
  in ``tools/list`` → failed, nothing sent; an unreachable server → failed;
- a server killed in the middle of a call → unknown, and the next call
  starts a new one;
- ``abort`` kills the stdio server: unknown, ``aborted: true``;
- a SIGKILL of the daemon during a slow call, then a start: the earlier
  server is killed as an orphan and the receipt tool resolves the attempt,
  ``executed`` or ``not_executed``;
- a secret ``env`` value reaches the server and nothing else.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tests._leftovers import alive, reaped
from tests._poll import wait_for
from tests.daemon._audit import Audit, all_reads, forms, pieces
from tests.daemon.harness import Actor, Background, Env, key

PEER = Path(__file__).resolve().parent / "_mcp_peer.py"


class Server:
    """What a peer records, where (one folder per server)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(exist_ok=True)
        self.root = root
        self.record = root / "record.jsonl"
        self.ledger = root / "ledger"
        self.marks = root / "marks"
        self.marks.mkdir(exist_ok=True)

    def argv(self) -> list[str]:
        return [
            sys.executable,
            str(PEER),
            *("--record", str(self.record), "--ledger", str(self.ledger)),
            *("--marks", str(self.marks)),
        ]

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        got = [json.loads(line) for line in self.record.read_text().splitlines()]
        return [c for c in got if tool is None or c["tool"] == tool]

    def effects(self) -> list[str]:
        return self.ledger.read_text().split() if self.ledger.exists() else []

    def started_pids(self) -> list[int]:
        return [int(p.name.split("-")[1]) for p in self.marks.glob("started-*")]


def stdio_act(server: Server, tool: str, **table: Any) -> dict[str, Any]:
    return {"adapter": "mcp", "command": server.argv(), "tool": tool, **table}


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[Server, str, subprocess.Popen[bytes]]]:
    """A streamable HTTP peer on 127.0.0.1 in a process of its own, ended at the end."""
    server = Server(tmp_path / "http-peer")
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [*server.argv(), "--port-file", str(port_file)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(port_file.exists, what="the server's port")
        port = int(port_file.read_text())

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, what="the server to listen")
        yield server, f"http://127.0.0.1:{port}/mcp", proc
    finally:
        proc.kill()
        proc.wait()


class TestOutcomes:
    def test_a_result_succeeds_with_its_structured_content_and_the_key_in_meta(
        self, make_daemon, tmp_path
    ):
        """The args (JSON bytes, and a CBOR map) are the tool's arguments; the
        key is in _meta["wardd/idempotency_key"] and params.idempotencyKey."""
        server = Server(tmp_path / "peer")
        env = Env(acts={"gh.create": stdio_act(server, "create")})
        d = make_daemon(env)
        a = Actor(d, acts=("gh.create",))
        a.submit("c1", "gh.create", b'{"title": "first"}')
        r = a.invoke("c1")
        assert r["status"] == "succeeded"
        assert r["result"] == {"id": f"thing-{key(a, 'c1')}", "title": "first"}
        (got,) = server.calls("create")
        assert got["params"]["_meta"]["wardd/idempotency_key"] == key(a, "c1")
        assert got["params"]["idempotencyKey"] == key(a, "c1")
        assert got["params"]["arguments"] == {"title": "first"}
        a.submit("c2", "gh.create", cbor2.dumps({"title": "second"}))
        assert a.invoke("c2")["result"]["title"] == "second"
        assert server.effects() == [key(a, "c1"), key(a, "c2")]
        (pid,) = {c["pid"] for c in server.calls()}  # one long-lived server
        assert d.terminate() == 0
        assert not alive(pid)  # stopped with the daemon

    def test_the_key_as_an_argument(self, make_daemon, tmp_path):
        """idempotency = "argument:key": the key also goes as the argument ``key``;
        args that already hold it are failed before anything is sent."""
        server = Server(tmp_path / "peer")
        env = Env(acts={"gh.create": stdio_act(server, "create", idempotency="argument:key")})
        a = Actor(make_daemon(env), acts=("gh.create",))
        a.submit("k", "gh.create", b'{"title": "t"}')
        assert a.invoke("k")["status"] == "succeeded"
        (got,) = server.calls("create")
        assert got["params"]["arguments"] == {"title": "t", "key": key(a, "k")}
        assert got["params"]["_meta"]["wardd/idempotency_key"] == key(a, "k")
        a.submit("dup", "gh.create", b'{"key": "mine"}')
        r = a.invoke("dup")
        assert r["status"] == "failed" and "fence key" in r["error"]
        assert len(server.calls("create")) == 1

    def test_a_tool_error_is_unknown_or_failed_when_declared_definite(self, make_daemon, tmp_path):
        """isError: true → unknown; with tool_errors = "failed" → failed."""
        server = Server(tmp_path / "peer")
        env = Env(
            acts={
                "t.boom": stdio_act(server, "boom", idempotency="none"),
                "t.boom_def": stdio_act(server, "boom", tool_errors="failed"),
            }
        )
        a = Actor(make_daemon(env), acts=("t.boom", "t.boom_def"))
        a.submit("b1", "t.boom")
        r = a.invoke("b1")
        assert r["status"] == "unknown" and "the tool answered an error" in r["error"]
        a.submit("b2", "t.boom_def")
        assert a.invoke("b2")["status"] == "failed"
        first, _ = server.calls("boom")
        assert "_meta" not in first["params"] and "idempotencyKey" not in first["params"]

    def test_a_tool_not_listed_is_failed_and_never_sent(self, make_daemon, tmp_path):
        server = Server(tmp_path / "peer")
        env = Env(acts={"t.nope": stdio_act(server, "no_such_tool")})
        a = Actor(make_daemon(env), acts=("t.nope",))
        a.submit("n", "t.nope")
        r = a.invoke("n")
        assert r["status"] == "failed" and "tools/list" in r["error"]
        assert server.calls() == []

    def test_args_that_are_not_an_object_are_failed(self, make_daemon, tmp_path):
        server = Server(tmp_path / "peer")
        env = Env(acts={"gh.create": stdio_act(server, "create")})
        a = Actor(make_daemon(env), acts=("gh.create",))
        a.submit("x", "gh.create", b"[1, 2]")
        assert a.invoke("x")["status"] == "failed"
        assert server.calls() == []

    def test_args_that_do_not_match_the_listed_schema_are_failed_and_never_sent(
        self, make_daemon, tmp_path
    ):
        """create's title is a string: a number is refused before anything is sent."""
        server = Server(tmp_path / "peer")
        env = Env(acts={"gh.create": stdio_act(server, "create")})
        a = Actor(make_daemon(env), acts=("gh.create",))
        a.submit("x", "gh.create", b'{"title": 5}')
        r = a.invoke("x")
        assert r["status"] == "failed" and "inputSchema" in r["error"]
        assert server.calls() == []

    def test_invalid_params_answered_after_the_effect_is_unknown(self, make_daemon, tmp_path):
        """The SDK's server answers an MCPError raised inside a tool (after its
        effect) as the call's -32602: unknown, never failed (a second run would
        be a second effect); failed only where tool_errors = "failed" declares it."""
        server = Server(tmp_path / "peer")
        env = Env(
            acts={
                "t.nested": stdio_act(server, "nested"),
                "t.nested_def": stdio_act(server, "nested", tool_errors="failed"),
            }
        )
        a = Actor(make_daemon(env), acts=("t.nested", "t.nested_def"))
        a.submit("n1", "t.nested")
        r = a.invoke("n1")
        assert r["status"] == "unknown" and "-32602" in r["error"]
        assert server.ledger.read_text().split() == [key(a, "n1")]
        a.submit("n2", "t.nested_def")
        assert a.invoke("n2")["status"] == "failed"

    def test_a_server_that_exits_at_once_is_failed(self, make_daemon, tmp_path):
        """A command that is no MCP server (it exits before the session is
        initialized): nothing was sent."""
        env = Env(acts={"t.gone": {"adapter": "mcp", "command": ["/bin/false"], "tool": "x"}})
        a = Actor(make_daemon(env), acts=("t.gone",))
        a.submit("g", "t.gone")
        r = a.invoke("g")
        assert r["status"] == "failed" and "nothing was sent" in r["error"]

    def test_a_server_killed_in_the_middle_of_a_call_is_unknown_and_restarted(
        self, make_daemon, tmp_path
    ):
        """slow(mode=before) holds; its process is SIGKILLed: unknown; the next
        call starts a new server and succeeds."""
        server = Server(tmp_path / "peer")
        env = Env(
            acts={
                "t.slow": stdio_act(server, "slow"),
                "t.create": stdio_act(server, "create"),
            }
        )
        d = make_daemon(env)
        a = Actor(d, acts=("t.slow", "t.create"))
        a.submit("s", "t.slow", b'{"mode": "before"}')
        call = Background(a.invoke, "s", 1, d.connect())
        wait_for(lambda: server.started_pids() != [], what="the slow call to start")
        (pid,) = server.started_pids()
        os.kill(pid, signal.SIGKILL)
        r = call.result()
        assert r["status"] == "unknown" and "after the request was sent" in r["error"]
        a.submit("s2", "t.slow", b'{"mode": "before"}')
        (server.marks / "go").touch()
        assert a.invoke("s2")["status"] == "succeeded"
        assert len({c["pid"] for c in server.calls("slow")}) == 2

    def test_a_call_past_its_timeout_is_unknown(self, make_daemon, tmp_path):
        """The server is up (a first call ran); the second call is held past
        timeout_s after it was sent: unknown."""
        server = Server(tmp_path / "peer")
        # timeout_s also bounds the first call's start of the server (a Python
        # process importing the MCP SDK, ~0.8 s of CPU): with 3 s, the first
        # call ended unknown on a 2-core machine whose core it ran on was
        # shared with four busy processes (2.9 s with three)
        env = Env(acts={"t.slow": stdio_act(server, "slow", timeout_s=10)})
        a = Actor(make_daemon(env), acts=("t.slow",))
        (server.marks / "go").touch()
        a.submit("s1", "t.slow", b'{"mode": "before"}')
        assert a.invoke("s1")["status"] == "succeeded"
        (server.marks / "go").unlink()
        a.submit("s2", "t.slow", b'{"mode": "before"}')
        r = a.invoke("s2")
        assert r["status"] == "unknown" and "timed out after 10 s" in r["error"]
        assert len(server.calls("slow")) == 2


class TestStreamableHttp:
    def test_success_key_and_tool_error_over_http(self, make_daemon, http_server):
        server, url, _ = http_server
        env = Env(
            acts={
                "h.create": {"adapter": "mcp", "url": url, "tool": "create"},
                "h.boom": {"adapter": "mcp", "url": url, "tool": "boom"},
                "h.nope": {"adapter": "mcp", "url": url, "tool": "nope"},
            }
        )
        d = make_daemon(env)
        a = Actor(d, acts=("h.create", "h.boom", "h.nope"))
        # checked at start (after READY=1): the missing tool is logged, the others are not
        wait_for(lambda: "act_check_failed" in d.log_text(), what="the start's tool check")
        checks = [ln for ln in d.log_text().splitlines() if "act_check_failed" in ln]
        assert len(checks) == 1 and "h.nope" in checks[0] and "tools/list" in checks[0]
        a.submit("c", "h.create", b'{"title": "over http"}')
        r = a.invoke("c")
        assert r["status"] == "succeeded" and r["result"]["title"] == "over http"
        (got,) = server.calls("create")
        assert got["params"]["_meta"]["wardd/idempotency_key"] == key(a, "c")
        assert got["params"]["idempotencyKey"] == key(a, "c")
        a.submit("b", "h.boom")
        assert a.invoke("b")["status"] == "unknown"
        a.submit("n", "h.nope")
        assert a.invoke("n")["status"] == "failed"
        assert [c["tool"] for c in server.calls()] == ["create", "boom"]

    def test_a_server_killed_in_the_middle_of_a_call_is_unknown(self, make_daemon, http_server):
        server, url, proc = http_server
        env = Env(acts={"h.slow": {"adapter": "mcp", "url": url, "tool": "slow"}})
        d = make_daemon(env)
        a = Actor(d, acts=("h.slow",))
        a.submit("s", "h.slow", b'{"mode": "before"}')
        call = Background(a.invoke, "s", 1, d.connect())
        wait_for(lambda: server.started_pids() != [], what="the slow call to start")
        proc.kill()
        r = call.result()
        assert r["status"] == "unknown" and "after the request was sent" in r["error"]

    def test_an_unreachable_url_is_failed(self, make_daemon):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # closed again: nobody listens there
        env = Env(
            acts={"h.x": {"adapter": "mcp", "url": f"http://127.0.0.1:{port}/mcp", "tool": "x"}}
        )
        a = Actor(make_daemon(env), acts=("h.x",))
        a.submit("u", "h.x")
        r = a.invoke("u")
        assert r["status"] == "failed" and "nothing was sent" in r["error"]


class TestAbort:
    def test_abort_kills_the_stdio_server_and_records_unknown_aborted(self, make_daemon, tmp_path):
        server = Server(tmp_path / "peer")
        env = Env(acts={"t.slow": stdio_act(server, "slow", timeout_s=600)})
        d = make_daemon(env)
        a = Actor(d, acts=("t.slow",))
        a.submit("h", "t.slow", b'{"mode": "before"}')
        call = Background(a.invoke, "h", 1, d.connect())
        wait_for(lambda: server.started_pids() != [], what="the slow call to start")
        (pid,) = server.started_pids()
        res = a.call("abort", {"op": "h", "attempt": 1})
        assert res == {"op": "h", "attempt": 1, "status": "unknown", "aborted": True}
        own = call.result()
        assert own["status"] == "unknown" and "abort" in own["error"]
        wait_for(lambda: reaped(pid), what="the server to be killed and reaped")
        (server.marks / "go").touch()
        assert server.effects() == []


class TestReceipts:
    @staticmethod
    def crash_during(d, a, server: Server, op: str, mode: str) -> int:
        """Invoke ``op`` (slow), wait until the server runs it, SIGKILL, start again;
        the pid of the server that ran it."""
        a.submit(op, "t.slow", json.dumps({"mode": mode}).encode())
        Background(a.invoke, op, 1, d.connect())
        wait_for(lambda: server.started_pids() != [], what="the slow call to start")
        (pid,) = server.started_pids()
        d.kill()
        d.start()
        a.client = d.connect()
        return pid

    @staticmethod
    def daemon(make_daemon, tmp_path):
        server = Server(tmp_path / "peer")
        env = Env(acts={"t.slow": stdio_act(server, "slow", receipt_tool="find_by_key")})
        d = make_daemon(env)
        return server, d, Actor(d, acts=("t.slow",))

    def test_sigkill_during_a_call_then_the_start_receipt_says_executed(
        self, make_daemon, tmp_path
    ):
        """The tool had its effect and holds its answer; the daemon is SIGKILLed;
        at the next start the receipt tool resolves it succeeded, source receipt;
        the original tool is never called again."""
        server, d, a = self.daemon(make_daemon, tmp_path)
        self.crash_during(d, a, server, "x", "after")
        att = a.op("x")["attempts"][0]
        assert att["state"] == "succeeded" and att["outcome"]["source"] == "receipt"
        assert att["outcome"]["value"] == {"key": key(a, "x")}
        assert [c["params"]["arguments"] for c in server.calls("find_by_key")] == [
            {"key": key(a, "x")}
        ]
        assert len(server.calls("slow")) == 1

    def test_sigkill_during_a_call_then_the_start_receipt_says_not_executed(
        self, make_daemon, tmp_path
    ):
        """The tool waits before its effect; the daemon is SIGKILLed; the start
        kills the earlier server (orphan) before the receipt asks a new one:
        not_executed, and the effect never happens."""
        server, d, a = self.daemon(make_daemon, tmp_path)
        pid = self.crash_during(d, a, server, "y", "before")
        assert not alive(pid)
        att = a.op("y")["attempts"][0]
        assert att["state"] == "not_executed" and att["outcome"]["source"] == "receipt"
        assert att["evidence"]["orphan_killed"] is True, att["evidence"]
        assert a.state("y") == "pending"
        (server.marks / "go").touch()
        assert server.effects() == []

    def test_a_tool_error_after_the_effect_is_resolved_executed_by_check_receipts(
        self, make_daemon, tmp_path
    ):
        """soak(mode=error) has its effect, then answers a tool error: unknown;
        check_receipts asks the receipt tool (in-process, as at start): succeeded."""
        server = Server(tmp_path / "peer")
        env = Env(acts={"t.soak": stdio_act(server, "soak", receipt_tool="find_by_key")})
        a = Actor(make_daemon(env), acts=("t.soak",))
        a.submit("e", "t.soak", b'{"mode": "error"}')
        assert a.invoke("e")["status"] == "unknown"
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 1}
        out = a.op("e")["attempts"][0]["outcome"]
        assert out["status"] == "succeeded" and out["source"] == "receipt"
        assert out["value"] == {"key": key(a, "e")}
        assert len(server.calls("soak")) == 1  # never called again


class TestSecrets:
    def test_a_secret_env_value_reaches_the_server_and_nothing_else(self, make_daemon, tmp_path):
        """env.PEER_TEST_SECRET = {file = ...}: the server runs with it and
        echoes it in a result and in an error; it is found nowhere in the
        results, the DB, the WAL, the logs or any read, in any form."""
        secret = secrets.token_urlsafe(30).encode()
        secret_file = tmp_path / "token"
        secret_file.write_bytes(secret + b"\n")
        server = Server(tmp_path / "peer")
        table = stdio_act(server, "leak", env={"PEER_TEST_SECRET": {"file": str(secret_file)}})
        env = Env(acts={"t.leak": table})
        d = make_daemon(env)
        a = Actor(d, acts=("t.leak",))
        a.call("create_prog", {"prog": "other", "step_limit": 10})  # all_reads reads it
        audit = Audit()
        a.submit("ok", "t.leak")
        ok = audit.add("invoke", a.invoke("ok"))
        assert ok["status"] == "succeeded" and "[redacted]" in json.dumps(ok["result"])
        a.submit("bad", "t.leak")
        bad = audit.add("invoke", a.invoke("bad"))
        assert bad["status"] == "unknown" and "[redacted]" in bad["error"]
        all_reads(a.client, a, audit)
        audit.add("status", a.read("status"))
        assert d.terminate() == 0
        haystacks = [(p.name, p.read_bytes()) for p in env.database.parent.iterdir()]
        haystacks += [(log.name, log.read_bytes()) for log in d.logs]
        haystacks += audit.seen
        needles = [*forms(secret), *pieces(secret)]
        leaks = [where for where, hay in haystacks if any(n in hay for n in needles)]
        assert leaks == []


class TestConfig:
    @pytest.mark.parametrize(
        "table, where, why",
        [
            ({"tool": "x"}, 'acts."gh.x".command', "exactly one of command"),
            ({"command": ["/bin/x"], "url": "http://h/mcp", "tool": "x"}, "command", "one of"),
            ({"command": ["/bin/x"]}, 'acts."gh.x".tool', "missing"),
            ({"url": "ftp://h/x", "tool": "x"}, 'acts."gh.x".url', "http:// or https://"),
            ({"url": "http://h/mcp", "tool": "x", "env": {"A": "b"}}, "env", "only a stdio server"),
            ({"command": ["/bin/x"], "tool": "x", "idempotency": "arg"}, "idempotency", "meta"),
            (
                {"command": ["/bin/x"], "tool": "x", "idempotency": "none", "receipt_tool": "r"},
                'acts."gh.x".receipt_tool',
                "key is never sent",
            ),
            ({"command": ["/bin/x"], "tool": "x", "tool_errors": "x"}, "tool_errors", "failed"),
            ({"command": ["/bin/x"], "tool": "x", "timeout_s": 0}, "timeout_s", "positive"),
            (
                {"command": ["/bin/x"], "tool": "x", "env": {"WARDD_X": "1"}},
                "env.WARDD_X",
                "reserved",
            ),
            ({"command": ["/bin/x"], "tool": "x", "max_arg_bytes": 0}, "max_arg_bytes", "between"),
            (
                {"command": ["/bin/x"], "tool": "x", "colour": 1},
                'acts."gh.x".colour',
                "unknown key",
            ),
        ],
    )
    def test_check_config_refuses_in_one_line_with_the_dotted_key(self, table, where, why):
        env = Env(acts={"gh.x": {"adapter": "mcp", **table}})
        out = subprocess.run(
            [sys.executable, "-m", "wardd.daemon.cli", "check-config", str(env.config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 78, out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and where in lines[0] and why in lines[0], lines
