"""The pure parts of ``wardd mcp``: the config, which op a tool call is, and
what the model sees for each answer (the real-process tests are in
tests/daemon/test_mcp_server.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import anyio
import pytest

from wardd.client import MayHaveRun, Neuron
from wardd.client.mcpserver._config import McpConfig, parse_mcp_config
from wardd.client.mcpserver._guard import Guard
from wardd.client.mcpserver._keys import KeyRefused, OpKey, canonical_json, choose_op
from wardd.client.mcpserver._results import Finished, Lost, Refused, Unreachable, tool_result
from wardd.daemon.config import ConfigError
from wardd.protocol import Internal

TOOL = {"description": "Charge", "input_schema": {"type": "object"}}


def config(**top: Any) -> dict[str, Any]:
    return {"prog": "agent", "tools": {"pay.charge": dict(TOOL)}, **top}


class TestConfig:
    def test_defaults_are_the_clients(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """socket and key default as the client's ($WARDD_SOCKET, $WARDD_KEY
        first); worker w0; step_limit 1000; no key rule."""
        monkeypatch.setenv("WARDD_SOCKET", "/run/w.sock")
        monkeypatch.setenv("WARDD_KEY", "/keys/n.key")
        cfg = parse_mcp_config(config(), "mcp.toml")
        assert (cfg.socket, cfg.key) == (Path("/run/w.sock"), Path("/keys/n.key"))
        assert (cfg.worker, cfg.step_limit) == ("w0", 1000)
        (tool,) = cfg.tools
        assert (tool.act, tool.key_from_arguments) == ("pay.charge", False)

    def test_key_arguments_and_home_paths(self) -> None:
        tools = {"pay.charge": {**TOOL, "key": "arguments"}}
        cfg = parse_mcp_config(config(tools=tools, key="~/n.key"), "mcp.toml")
        assert cfg.tools[0].key_from_arguments
        assert cfg.key == Path.home() / "n.key"

    @pytest.mark.parametrize(
        ("data", "key"),
        [
            ({"tools": {"a": TOOL}}, "prog"),
            (config(prog=""), "prog"),
            (config(worker=3), "worker"),
            (config(step_limit=0), "step_limit"),
            (config(step_limit=True), "step_limit"),
            (config(socket="relative.sock"), "socket"),
            (config(key=""), "key"),
            (config(tools={}), "tools"),
            ({"prog": "agent"}, "tools"),
            (config(extra=1), "extra"),
            (config(tools={"bad tag": TOOL}), 'tools."bad tag"'),
            (config(tools={"a:b": TOOL}), 'tools."a:b"'),
            (config(tools={"a": 1}), "tools.a"),
            (config(tools={"a": {**TOOL, "colour": 1}}), "tools.a.colour"),
            (config(tools={"a": {"input_schema": {"type": "object"}}}), "tools.a.description"),
            (config(tools={"a": {**TOOL, "key": "random"}}), "tools.a.key"),
            (config(tools={"a": {"description": "x"}}), "tools.a.input_schema"),
            (
                config(tools={"a": {**TOOL, "input_schema": {"type": "string"}}}),
                "tools.a.input_schema",
            ),
            (
                config(tools={"a": {**TOOL, "input_schema": {"type": "object", "properties": 5}}}),
                "tools.a.input_schema.properties",
            ),
        ],
    )
    def test_a_refusal_names_the_dotted_key(self, data: dict[str, Any], key: str) -> None:
        with pytest.raises(ConfigError) as caught:
            parse_mcp_config(data, "mcp.toml")
        assert caught.value.key == key
        assert str(caught.value).startswith(f"mcp.toml: {key}: ")


class TestChooseOp:
    def pick(
        self,
        params_key: Any = None,
        meta: Any = None,
        *,
        by_args: bool = False,
        arguments: Any = None,
        tool: str = "t",
    ) -> OpKey:
        return choose_op(tool, by_args, arguments or {}, params_key, meta, fresh=lambda: "fresh")

    def test_the_order_of_the_keys(self) -> None:
        """idempotencyKey, then _meta's key, then the arguments (when the tool
        says so), then a fresh op id."""
        meta = {"wardd/idempotency_key": "m-1"}
        assert self.pick("p-1", meta, by_args=True) == OpKey("p-1", "idempotencyKey")
        assert self.pick(None, meta, by_args=True) == OpKey("m-1", "wardd/idempotency_key")
        assert self.pick(None, {}, by_args=True).source == "arguments"
        assert self.pick(None, {}) == OpKey("fresh", "random")

    def test_a_key_that_is_no_op_id_is_mapped_by_its_digest(self) -> None:
        for key in ("a b", "x/y", "k" * 129, "é"):
            expected = "key-" + hashlib.sha256(key.encode()).hexdigest()
            assert self.pick(key).op == expected
        assert self.pick("call_9.x:y-z").op == "call_9.x:y-z"

    def test_the_arguments_digest_is_of_tool_scope_and_canonical_arguments(self) -> None:
        one = self.pick(by_args=True, arguments={"a": 1, "b": [1, 2]})
        assert one == self.pick(by_args=True, arguments={"b": [1, 2], "a": 1})
        assert one.op.startswith("args-") and len(one.op) == 69
        others = [
            self.pick(by_args=True, arguments={"a": 2, "b": [1, 2]}),
            self.pick(by_args=True, arguments={"a": 1, "b": [1, 2]}, tool="u"),
            self.pick(
                None, {"wardd/scope": "conv-1"}, by_args=True, arguments={"a": 1, "b": [1, 2]}
            ),
        ]
        assert len({one.op, *(o.op for o in others)}) == 4

    @pytest.mark.parametrize(
        ("params_key", "meta"),
        [
            (5, None),
            ("", None),
            (None, {"wardd/idempotency_key": ["k"]}),
            (None, {"wardd/scope": 1}),
        ],
    )
    def test_a_key_or_scope_that_is_not_a_non_empty_string_is_refused(
        self, params_key: Any, meta: Any
    ) -> None:
        with pytest.raises(KeyRefused):
            self.pick(params_key, meta, by_args=True)

    def test_canonical_json(self) -> None:
        assert canonical_json({"b": "é", "a": [1, {"d": 1, "c": None}]}) == (
            '{"a":[1,{"c":null,"d":1}],"b":"é"}'.encode()
        )
        with pytest.raises(ValueError):
            canonical_json({"x": float("nan")})

    def test_one_spelling_per_number_shared_with_guarded_tool(self) -> None:
        """1200, 1200.0, 1.2e3 and -0.0/0 are one number each; a fraction or a
        float beyond 2**53 keeps its float spelling; GuardedTool's is the same."""
        from wardd.client import canonical_arguments

        same = [{"n": 1200}, {"n": 1200.0}, {"n": 1.2e3}]
        assert {canonical_json(v) for v in same} == {b'{"n":1200}'}
        assert canonical_json([-0.0, 0.5, 1e300]) == b"[0,0.5,1e+300]"
        assert canonical_arguments({"n": [2.0, {"m": 3.0}]}) == b'{"n":[2,{"m":3}]}'


KEYED = OpKey("op-1", "idempotencyKey")


class TestResults:
    def test_succeeded_gives_the_value_and_a_json_object_as_structured(self) -> None:
        result = tool_result(KEYED, Finished(2, "succeeded", b'{"id": "ch_1"}'))
        assert result.is_error is False
        assert result.content[0].text == '{"id": "ch_1"}'  # type: ignore[union-attr]
        assert result.structured_content == {"id": "ch_1"}
        assert result.meta == {
            "wardd/op": "op-1",
            "wardd/attempt": 2,
            "wardd/key": "idempotencyKey",
        }

    @pytest.mark.parametrize(
        ("value", "text", "structured"),
        [
            (b"plain", "plain", None),
            (b"[1, 2]", "[1, 2]", None),
            (b"\xff\x00", '{"base64": "/wA="}', None),
            ({"stdout": b"ok", "n": 1}, '{"n": 1, "stdout": "ok"}', {"stdout": "ok", "n": 1}),
            (None, "null", None),
            (7, "7", None),
        ],
    )
    def test_values_as_text(self, value: Any, text: str, structured: Any) -> None:
        result = tool_result(KEYED, Finished(1, "succeeded", value))
        assert result.content[0].text == text  # type: ignore[union-attr]
        assert result.structured_content == structured

    def test_failed_says_nothing_was_done(self) -> None:
        result = tool_result(KEYED, Finished(1, "failed", error="exit status 2", already=True))
        assert result.is_error is True
        assert result.content[0].text.startswith("failed, nothing was done")  # type: ignore[union-attr]
        assert result.structured_content == {
            "status": "failed",
            "op": "op-1",
            "attempt": 1,
            "may_have_run": False,
            "error": "exit status 2",
        }
        assert result.meta["wardd/already"] is True  # type: ignore[index]

    @pytest.mark.parametrize(
        "answer",
        [
            Finished(3, "unknown", error="killed"),
            Refused("attempt_unknown", "unknown", attempt=3, in_doubt=True),
            Refused("attempt_busy", "running", attempt=3, in_doubt=True),
            Refused("grant_disabled", "an earlier attempt ran", attempt=3, in_doubt=True),
            Lost("the answer was lost", attempt=3),
        ],
    )
    def test_every_may_have_run_is_unknown_and_says_do_not_retry(self, answer: Any) -> None:
        result = tool_result(KEYED, answer)
        assert result.is_error is True
        assert result.structured_content == {
            "status": "unknown",
            "op": "op-1",
            "attempt": 3,
            "may_have_run": True,
            "retry_safe": False,
        }
        assert "Do not retry" in result.content[0].text  # type: ignore[union-attr]
        assert result.meta["wardd/attempt"] == 3  # type: ignore[index]

    def test_a_discarded_success_says_it_took_effect(self) -> None:
        """A cancelled op's success: its value is gone, its effect is not."""
        result = tool_result(KEYED, Finished(2, "succeeded", None, discarded=True))
        assert result.is_error is True and "took effect" in result.content[0].text  # type: ignore[union-attr]
        assert result.structured_content["may_have_run"] is True  # type: ignore[index]
        assert result.structured_content["value_discarded"] is True  # type: ignore[index]

    def test_a_lost_answer_without_an_attempt_has_no_attempt_meta(self) -> None:
        result = tool_result(KEYED, Lost("lost"))
        assert result.structured_content["attempt"] is None  # type: ignore[index]
        assert "wardd/attempt" not in result.meta  # type: ignore[operator]

    def test_a_refusal_names_its_code(self) -> None:
        result = tool_result(KEYED, Refused("grant_disabled", "the prog's grant is disabled"))
        assert result.is_error is True
        assert result.structured_content["code"] == "grant_disabled"  # type: ignore[index]
        assert "grant_disabled" in result.content[0].text  # type: ignore[union-attr]
        down = tool_result(KEYED, Unreachable("no such file"))
        assert down.structured_content["code"] == "unavailable"  # type: ignore[index]
        assert "nothing was sent" in down.content[0].text  # type: ignore[union-attr]

    def test_a_fresh_op_id_is_named_for_a_retry(self) -> None:
        result = tool_result(OpKey("call-1", "random"), Finished(1, "succeeded", b"x"))
        assert 'pass it as _meta["wardd/idempotency_key"]' in result.content[0].text  # type: ignore[union-attr]
        assert result.meta["wardd/key"] == "random"  # type: ignore[index]


class TestGuardAnswers:
    def test_an_answer_after_the_claim_is_unknown_never_refused(self, tmp_path: Path) -> None:
        """An internal answered to the call (the session's MayHaveRun) reaches the
        model as unknown, naming the attempt: never as a refusal."""
        lost = Internal("the outcome could not be stored", {"reason": "fail_stop"})

        class Session:
            async def call(self, *args: Any) -> Any:
                raise MayHaveRun("op-1", 3, answer=lost)

        cfg = McpConfig("t", tmp_path / "s", tmp_path / "k", "agent", "w0", 10, ())
        guard = Guard(cfg, Neuron.generate())
        answer = anyio.run(guard._call, Session(), "op-1", "pay.charge", b"{}")
        assert isinstance(answer, Lost) and answer.attempt == 3
        result = tool_result(KEYED, answer)
        assert result.structured_content["status"] == "unknown"  # type: ignore[index]
