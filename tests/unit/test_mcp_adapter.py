"""The ``mcp`` adapter's pure parts: args, the outcome rules, receipts, its table (contract §6).

The calls themselves run against real MCP servers in tests/daemon/test_mcp_acts.py.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import cbor2
import pytest

from wardd.adapters import CallAborted, DefiniteFailure, OutcomeUnknown, build_adapter
from wardd.adapters._mcp import _KEYS, McpAdapter, decode_args, judge, receipt_of, redact_value
from wardd.adapters._mcp_link import Reply, _schema_refusal

MAX_FRAME = 1 << 20
DOCS = Path(__file__).resolve().parents[2] / "docs"


class TestArgs:
    def test_a_json_object_and_a_cbor_map_are_the_arguments(self):
        assert decode_args(b' {"a": 1, "b": [true, null]} ') == {"a": 1, "b": [True, None]}
        assert decode_args(cbor2.dumps({"a": 1.5, "b": "x"})) == {"a": 1.5, "b": "x"}

    def test_empty_args_are_an_empty_object(self):
        assert decode_args(b"") == {} and decode_args(b"  \n") == {}

    @pytest.mark.parametrize(
        "args",
        [b"[1]", b'"text"', b"\xff\xfe", b"{bad json", cbor2.dumps({"a": b"bytes"}), b"\xa1\x01"],
    )
    def test_anything_else_is_failed_before_sending(self, args):
        with pytest.raises(DefiniteFailure):
            decode_args(args)


class TestJudge:
    def test_a_result_is_its_structured_content_else_its_content(self):
        structured = {"content": [], "structuredContent": {"id": 1}, "isError": False}
        assert judge(Reply(sent=True, result=structured), "t") == {"id": 1}
        plain = {"content": [{"type": "text", "text": "hi"}], "isError": False}
        assert judge(Reply(sent=True, result=plain), "t") == [{"type": "text", "text": "hi"}]

    def test_a_tool_error_is_unknown_unless_declared_definite(self):
        error = {"content": [{"type": "text", "text": "half done"}], "isError": True}
        with pytest.raises(OutcomeUnknown, match="half done"):
            judge(Reply(sent=True, result=error), "t")
        with pytest.raises(DefiniteFailure):
            judge(Reply(sent=True, result=error), "t", tool_errors="failed")

    @pytest.mark.parametrize(
        "reply, outcome",
        [
            (Reply(sent=False, listed=False), DefiniteFailure),
            (Reply(sent=False, why="connection refused"), DefiniteFailure),
            (Reply(sent=False, timed_out=True, why="timed out"), DefiniteFailure),
            (Reply(sent=False, why="args do not match the inputSchema"), DefiniteFailure),
            # after the send, not even "not executed" codes prove nothing ran: the SDK's
            # server answers -32602 raised inside a tool, its client makes -32601 of a 404
            (Reply(sent=True, error_code=-32601), OutcomeUnknown),
            (Reply(sent=True, error_code=-32602), OutcomeUnknown),
            (Reply(sent=True, error_code=-32603), OutcomeUnknown),
            (Reply(sent=True, error_code=-32000, why="Connection closed"), OutcomeUnknown),
            (Reply(sent=True, timed_out=True), OutcomeUnknown),
            (Reply(sent=True, why="ValidationError: a cut result"), OutcomeUnknown),
            (Reply(sent=True, aborted=True), CallAborted),
            (Reply(sent=False, aborted=True), CallAborted),
        ],
    )
    def test_how_far_it_got_decides(self, reply, outcome):
        """failed only when nothing was sent."""
        with pytest.raises(outcome):
            judge(reply, "t")

    @pytest.mark.parametrize("code", [-32601, -32602])
    def test_not_executed_codes_are_failed_only_when_declared(self, code):
        """``tool_errors = "failed"`` declares the server's "not executed" answers definite."""
        with pytest.raises(DefiniteFailure):
            judge(Reply(sent=True, error_code=code), "t", tool_errors="failed")

    @pytest.mark.parametrize("kind", ["input_required", "task"])
    def test_a_result_that_is_not_complete_is_unknown(self, kind):
        """A result whose resultType is not ``complete`` has not ended, whatever it holds."""
        partial = {"content": [], "isError": False, "resultType": kind}
        with pytest.raises(OutcomeUnknown, match="not complete"):
            judge(Reply(sent=True, result=partial), "t")
        complete = {"content": [], "isError": False, "resultType": "complete"}
        assert judge(Reply(sent=True, result=complete), "t") == []


class TestSchemaRefusal:
    """Args are checked against the tool's listed inputSchema before sending."""

    SCHEMA = {
        "type": "object",
        "properties": {"amount": {"type": "integer"}},
        "required": ["amount"],
    }

    def test_matching_args_are_sent(self):
        assert _schema_refusal(self.SCHEMA, {"amount": 3}) is None

    def test_a_mismatch_names_the_place_and_rule_never_the_value(self):
        why = _schema_refusal(self.SCHEMA, {"amount": "s3cret-value"})
        assert why is not None and "amount" in why and "type" in why
        assert "s3cret" not in why

    def test_a_schema_that_cannot_be_used_decides_nothing(self):
        broken = {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}
        assert _schema_refusal(broken, {"a": 1}) is None
        assert _schema_refusal({"type": 12}, {"a": 1}) is None


class TestReceiptOf:
    def test_the_three_answers(self):
        executed = {"structuredContent": {"status": "executed", "value": {"id": 7}}}
        got = receipt_of(executed, "")
        assert (got.answer, got.value) == ("executed", {"id": 7})
        assert receipt_of({"structuredContent": {"status": "not_executed"}}, "").answer == (
            "not_executed"
        )
        for other in (
            {"structuredContent": {"status": "maybe"}},
            {"structuredContent": ["executed"]},
            {"content": [{"type": "text", "text": "executed"}]},
            {"structuredContent": {"status": "executed"}, "isError": True},
            None,
        ):
            assert receipt_of(other, "timed out").answer == "unknown", other


def test_secrets_are_redacted_from_every_string_of_a_value():
    value = {"a": ["x s3cret y", 1, None], "s3cret": {"b": "s3cret"}}
    assert redact_value(value, [b"s3cret"]) == {
        "a": ["x [redacted] y", 1, None],
        "[redacted]": {"b": "[redacted]"},
    }


class TestTable:
    def test_building_starts_nothing(self):
        """check-config builds every act: no thread, no server, no connection."""
        before = {t.name for t in threading.enumerate()}
        a = build_adapter(
            "gh.x",
            {"adapter": "mcp", "url": "http://127.0.0.1:9/mcp", "tool": "x"},
            max_frame=MAX_FRAME,
        )
        assert isinstance(a, McpAdapter) and a.in_process and a.abortable
        assert (a.idempotency, a.timeout_s, a.tool_errors) == ("meta", 60.0, "unknown")
        assert not a.receipt_supported and a.boot is None  # check-config: no boot
        assert {t.name for t in threading.enumerate()} == before
        table = {"adapter": "mcp", "command": ["/bin/srv"], "tool": "x"}
        running = build_adapter("gh.x", table, max_frame=MAX_FRAME, boot="b1")
        assert isinstance(running, McpAdapter) and running.boot == "b1"  # WARDD_BOOT

    def test_argument_placement_and_a_receipt(self):
        a = build_adapter(
            "gh.x",
            {
                "adapter": "mcp",
                "command": ["/bin/srv"],
                "tool": "x",
                "idempotency": "argument:request_id",
                "receipt_tool": "find",
            },
            max_frame=MAX_FRAME,
        )
        assert isinstance(a, McpAdapter)
        assert (a.idempotency, a.argument) == ("argument", "request_id")
        assert a.receipt_supported
        assert a.claim_info() == {"server": ["/bin/srv"], "tool": "x", "idempotency": "argument"}

    def test_a_not_executed_about_another_claim_is_only_a_hint(self):
        a = build_adapter(
            "gh.x",
            {"adapter": "mcp", "command": ["/bin/srv"], "tool": "x", "receipt_tool": "find"},
            max_frame=MAX_FRAME,
        )
        assert isinstance(a, McpAdapter)
        assert a._hint(a.claim_info()) is None
        assert a._hint({**a.claim_info(), "tool": "y"}) is not None
        assert a._hint({**a.claim_info(), "server": ["/bin/other"]}) is not None
        assert a._hint({**a.claim_info(), "idempotency": "none"}) is not None
        assert a._hint({"pid": 1}) is not None
        assert a.receipt("n/o/1", None).answer == "not_executed"  # never claimed: not asked


def test_the_default_config_shows_every_mcp_key():
    from wardd.daemon.config import DEFAULT_TOML

    part = DEFAULT_TOML[DEFAULT_TOML.index('adapter = "mcp"') - 40 :]
    for k in _KEYS:
        assert f"# {k} = " in part or f"# # {k} = " in part, k


def test_the_configuration_doc_shows_every_mcp_key():
    doc = (DOCS / "configuration.md").read_text()
    section = doc[doc.index("### `mcp`") : doc.index("### Plug-in adapters")]
    for k in set(_KEYS) - {"adapter", "max_arg_bytes"}:
        assert f"`{k}`" in section, k


def test_the_client_and_the_adapters_package_import_no_mcp():
    """The SDK loads only with an mcp act: a client, and a daemon without one, never pay for it."""
    code = (
        "import sys, wardd.client, wardd.adapters\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
