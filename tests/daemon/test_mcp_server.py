"""``wardd mcp`` against a real daemon, driven by the official MCP SDK's client
(``ClientSession`` over ``stdio_client`` and over the streamable HTTP client).

Effects are counted where they land: the ``quick`` and ``gated`` acts
append their idempotency key to the env's cli ledger, one line per run.
"""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests._poll import wait_for, wait_until_file
from tests.daemon._mcp_host import (
    bearer,
    call,
    http_host,
    http_server,
    mcp_argv,
    run_mcp,
    stdio_host,
    write_mcp_config,
)
from tests.daemon.backends import run_on
from tests.daemon.harness import NETWORK, Env, child_env
from wardd.client import Neuron
from wardd.protocol import UnknownNeuron

ANY = {"type": "object"}
AMOUNT = {
    "type": "object",
    "properties": {"amount": {"type": "integer"}},
    "required": ["amount"],
}
TOOLS: dict[str, dict[str, Any]] = {
    "echo": {"description": "Echo the arguments", "input_schema": AMOUNT},
    "quick": {"description": "Append the key to a ledger", "input_schema": ANY},
    "nofx": {"description": "Fail, doing nothing", "input_schema": ANY},
    "gated": {"description": "Wait for the test's gate", "input_schema": ANY},
    "notes": {"description": "Keyed by its arguments", "input_schema": ANY, "key": "arguments"},
}


def _asyncio(body: Any, *args: Any) -> Any:
    return run_on("asyncio", body, *args)


def _env() -> Env:
    env = Env()
    # `notes`: a tool keyed by its arguments, appending its key as `quick` does
    env.acts["notes"] = dict(env.acts["quick"])
    env.write_config()
    return env


def _runs(env: Env, op: str) -> int:
    """How many times an act of op `op` ran (its key's lines in the cli ledger)."""
    return sum(1 for line in env.ledger_lines(env.cli_ledger) if line.split("/")[1] == op)


def _neuron(config: Path) -> Neuron:
    return Neuron.load(config.parent / f"{config.name}.key")


def _op(daemon: Any, config: Path, op: str) -> dict[str, Any]:
    with daemon.connect() as client:
        return client.call("get_operation", {"neuron": _neuron(config).id, "op": op})


def _reconcile(daemon: Any, config: Path, op: str, value: bytes) -> None:
    """An operator's ``reconcile`` of attempt 1 as succeeded, signed with the neuron's key."""
    params = {"op": op, "attempt": 1, "outcome": {"status": "succeeded", "value": value}}
    with daemon.connect() as client:
        client.call("reconcile", _neuron(config).sign("reconcile", params, NETWORK))


@pytest.fixture
def setup(make_daemon):
    """A daemon and an mcp.toml exposing TOOLS."""
    env = _env()
    daemon = make_daemon(env)
    return daemon, write_mcp_config(env, TOOLS)


class TestToolsList:
    def test_lists_exactly_the_configured_tools_as_guarded_acts(self, setup) -> None:
        """Each tool: its act's name, description, schema, and the annotations
        of an act that must not be repeated lightly."""
        daemon, config = setup

        async def body() -> None:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                listed = (await session.list_tools()).tools
            assert [t.name for t in listed] == list(TOOLS)
            for tool in listed:
                assert tool.description == TOOLS[tool.name]["description"]
                assert tool.input_schema == TOOLS[tool.name]["input_schema"]
                hints = tool.annotations
                assert hints is not None
                assert (hints.read_only_hint, hints.idempotent_hint, hints.destructive_hint) == (
                    False,
                    False,
                    True,
                )

        _asyncio(body)


class TestToolsCall:
    def test_a_call_runs_the_act_and_answers_its_value(self, setup) -> None:
        """succeeded: isError false, the value as text and, being a JSON object,
        as structuredContent; the result names the op, its attempt and its key."""
        daemon, config = setup

        async def body() -> None:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                echoed = await call(session, "echo", {"amount": 3}, key="order-1")
                ran = await call(session, "quick", {}, key="order-2")
            assert echoed.is_error is False
            assert echoed.content[0].text == '{"amount":3}'  # type: ignore[union-attr]
            assert echoed.structured_content == {"amount": 3}
            assert echoed.meta == {
                "wardd/op": "order-1",
                "wardd/attempt": 1,
                "wardd/key": "idempotencyKey",
            }
            assert ran.is_error is False

        _asyncio(body)
        assert _runs(daemon.env, "order-2") == 1
        op = _op(daemon, config, "order-1")
        # canonical JSON; consumed once answered, so that retention prunes it in time
        assert (op["state"], op["args"]) == ("consumed", b'{"amount":3}')

    def test_the_same_key_twice_runs_once_and_answers_the_same(self, setup) -> None:
        """A retry with the key (params.idempotencyKey, or _meta's) gets the
        first call's result, and the act ran once."""
        daemon, config = setup
        meta = {"wardd/idempotency_key": "tool-call/7"}  # not an op id: mapped by digest

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                return [
                    await call(session, "quick", {"n": 1}, key="charge-1"),
                    await call(session, "quick", {"n": 1}, key="charge-1"),
                    await call(session, "quick", {"n": 2}, meta=meta),
                    await call(session, "quick", {"n": 2}, meta=meta),
                ]

        first, again, by_meta, by_meta_again = _asyncio(body)
        assert first.is_error is False and again.content == first.content
        assert again.meta == {**first.meta, "wardd/already": True}  # type: ignore[dict-item]
        assert _runs(daemon.env, "charge-1") == 1
        op = by_meta.meta["wardd/op"]  # type: ignore[index]
        assert op.startswith("key-") and by_meta.meta["wardd/key"] == "wardd/idempotency_key"  # type: ignore[index]
        assert by_meta_again.content == by_meta.content and _runs(daemon.env, op) == 1

    def test_the_2026_protocol_gets_the_same_guard(self, setup) -> None:
        """A client of the envelope protocol (no handshake): the same tools, the
        same key rules, one run per key."""
        daemon, config = setup

        async def body() -> list[Any]:
            log = daemon.env.root / "mcp.log"
            async with stdio_host(config, log, modern=True) as session:
                assert session.protocol_version == "2026-07-28"
                names = [t.name for t in (await session.list_tools()).tools]
                meta = {"wardd/idempotency_key": "m-1"}
                return [
                    names,
                    await call(session, "quick", {"a": 1}, key="m-1"),
                    await call(session, "quick", {"a": 1}, meta=meta),
                ]

        names, first, again = _asyncio(body)
        assert names == list(TOOLS)
        assert first.is_error is False and again.meta["wardd/already"] is True
        assert again.content == first.content and _runs(daemon.env, "m-1") == 1

    def test_the_same_key_with_other_arguments_is_op_conflict(self, setup) -> None:
        """Other arguments under a used key run nothing: a refusal naming op_conflict."""
        daemon, config = setup

        async def body() -> Any:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                await call(session, "quick", {"to": "ann"}, key="mail-1")
                return await call(session, "quick", {"to": "bob"}, key="mail-1")

        other = _asyncio(body)
        assert other.is_error is True
        assert other.structured_content["code"] == "op_conflict"  # type: ignore[index]
        assert other.structured_content["may_have_run"] is False  # type: ignore[index]
        assert "op_conflict" in other.content[0].text  # type: ignore[union-attr]
        assert _runs(daemon.env, "mail-1") == 1

    def test_two_calls_at_once_with_one_key_run_once(self, setup) -> None:
        """The second call, while the first runs, is answered attempt_busy as
        unknown (the op's attempt is running: it may have run); the first
        answers; the act ran once; the arguments appear in no log line."""
        daemon, config = setup
        env = daemon.env
        secret = {"card": "4111-secret-1111"}

        async def body() -> list[Any]:
            results: list[Any] = []
            async with stdio_host(config, env.root / "mcp.log") as session:

                async def first() -> None:
                    results.append(await call(session, "gated", secret, key="twin-1"))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(first)
                    await wait_until_file(env.started_marker("twin-1"))
                    results.append(await call(session, "gated", secret, key="twin-1"))
                    env.open_gate("twin-1")
            return results

        busy, done = _asyncio(body)
        # the op's attempt is running: the second call may have run, never "nothing ran"
        assert busy.is_error is True and "attempt_busy" in busy.content[0].text
        assert busy.structured_content["status"] == "unknown"
        assert (busy.structured_content["may_have_run"], busy.structured_content["retry_safe"]) == (
            True,
            False,
        )
        assert done.is_error is False and _runs(env, "twin-1") == 1
        assert "4111" not in (env.root / "mcp.log").read_text()

    def test_a_failed_act_says_nothing_was_done(self, setup) -> None:
        """failed: isError true, "failed, nothing was done"; asked again, the
        same failure (a repeated call never runs anything again)."""
        daemon, config = setup

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                return [await call(session, "nofx", {}, key="f-1") for _ in range(2)]

        failed, again = _asyncio(body)
        assert failed.is_error is True
        assert failed.content[0].text.startswith("failed, nothing was done")  # type: ignore[union-attr]
        assert failed.structured_content["status"] == "failed"  # type: ignore[index]
        assert failed.meta["wardd/attempt"] == 1  # type: ignore[index]
        assert again.structured_content == failed.structured_content
        op = _op(daemon, config, "f-1")  # cancelled once answered: retention prunes it
        assert (op["state"], len(op["attempts"])) == ("cancelled", 1)

    def test_key_arguments_gives_a_reissued_call_the_first_result(self, setup) -> None:
        """key = "arguments": the same arguments (without a key) are one op
        within a scope; another scope or other arguments are another op."""
        daemon, config = setup

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                in_a = {"wardd/scope": "conversation-a"}
                return [
                    await call(session, "notes", {"text": "hi"}, meta=in_a),
                    await call(session, "notes", {"text": "hi"}, meta=in_a),
                    await call(session, "notes", {"text": "hi"}, meta={"wardd/scope": "b"}),
                    await call(session, "notes", {"text": "ho"}, meta=in_a),
                ]

        results = _asyncio(body)
        ops = [r.meta["wardd/op"] for r in results]
        assert ops[0] == ops[1] and len(set(ops)) == 3
        assert all(r.meta["wardd/key"] == "arguments" for r in results)
        assert [_runs(daemon.env, op) for op in ops] == [1, 1, 1, 1]
        assert len(daemon.env.ledger_lines(daemon.env.cli_ledger)) == 3

    def test_without_a_key_each_call_is_a_new_op_that_names_its_id(self, setup) -> None:
        """No key: a fresh op per call, said in the result; passing that op id
        back as the key reaches the same op (nothing runs again)."""
        daemon, config = setup

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                first = await call(session, "quick", {})
                second = await call(session, "quick", {})
                op = first.meta["wardd/op"]  # type: ignore[index]
                return [first, second, await call(session, "quick", {}, key=op)]

        first, second, back = _asyncio(body)
        assert first.meta["wardd/key"] == "random"  # type: ignore[index]
        assert first.meta["wardd/op"] != second.meta["wardd/op"]  # type: ignore[index]
        assert first.meta["wardd/op"] in first.content[0].text  # type: ignore[index,union-attr]
        assert back.meta["wardd/already"] is True  # type: ignore[index]
        assert len(daemon.env.ledger_lines(daemon.env.cli_ledger)) == 2

    def test_bad_input_is_refused_before_anything_is_sent(self, setup) -> None:
        """Arguments against the schema, a key that is not a string: a refusal
        (bad_request), no op; an unknown tool: an MCP error."""
        daemon, config = setup
        from mcp import MCPError

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                results = [
                    await call(session, "echo", {"amount": "3"}, key="bad-1"),
                    await call(session, "quick", {}, meta={"wardd/idempotency_key": 5}),
                ]
                with pytest.raises(MCPError, match="Unknown tool"):
                    await call(session, "rm-rf", {}, key="bad-2")
                return results

        for result in _asyncio(body):
            assert result.is_error is True
            assert result.structured_content["code"] == "bad_request"  # type: ignore[index]
        with daemon.connect() as client:
            listed = client.call("list_operations", {"neuron": _neuron(config).id})
        assert listed["operations"] == []

    def test_numbers_spelled_two_ways_are_one_op(self, setup) -> None:
        """key = "arguments": 1200, 1200.0 and 1.2e3 are one number, one op, one run."""
        daemon, config = setup

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                return [
                    await call(session, "notes", {"amount": 1200}),
                    await call(session, "notes", {"amount": 1200.0}),
                    await call(session, "quick", {"amount": 1.2e3}, key="n-1"),
                    await call(session, "quick", {"amount": 1200}, key="n-1"),
                ]

        first, again, keyed, keyed_again = _asyncio(body)
        assert again.meta["wardd/op"] == first.meta["wardd/op"] and again.meta["wardd/already"]
        assert keyed.is_error is False and keyed_again.meta["wardd/already"] is True
        assert keyed_again.content == keyed.content
        assert len(daemon.env.ledger_lines(daemon.env.cli_ledger)) == 2
        assert _op(daemon, config, "n-1")["args"] == b'{"amount":1200}'

    def test_a_nan_argument_is_a_bad_request_without_a_traceback(self, setup) -> None:
        """A NaN (which the SDK's client never sends: raw JSON-RPC over stdio) to
        a tool keyed by its arguments: refused (bad_request), nothing sent, no
        traceback; the server answers the next call."""
        daemon, config = setup
        init = {"protocolVersion": "2025-06-18", "capabilities": {}}
        init["clientInfo"] = {"name": "raw", "version": "0"}
        lines = [
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "notes", "arguments": {"x": float("nan")}},
            },
        ]
        log = daemon.env.root / "mcp-raw.log"
        with open(log, "ab") as errlog:
            proc = subprocess.Popen(
                mcp_argv(config),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errlog,
                env=child_env(),
            )
        with proc:
            try:
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in lines))
                proc.stdin.flush()
                answers = [json.loads(proc.stdout.readline()) for _ in range(2)]
                proc.stdin.close()
                assert proc.wait(20) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        result = answers[1]["result"]
        assert result["isError"] is True and result["structuredContent"]["code"] == "bad_request"
        assert "Traceback" not in log.read_text()
        assert daemon.env.ledger_lines(daemon.env.cli_ledger) == []


class TestFailures:
    def test_a_refusal_of_an_op_that_ran_says_it_may_have_run(self, setup) -> None:
        """grant_disabled comes before the op's state: refusing a repeat of a key
        that ran, it is unknown (may have run), not "nothing was run"; a new key
        is refused plainly."""
        daemon, config = setup
        neuron = _neuron(config)

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                await call(session, "quick", {}, key="g-1")
                with daemon.connect() as client:
                    root = client.call("get_neuron", {"neuron": neuron.id})
                    params = {
                        "prog": "agent",
                        "acts": sorted(TOOLS),
                        "enabled": False,
                        "expected_policy_version": root["policy_version"],
                    }
                    client.call("set_grant", neuron.sign("set_grant", params, NETWORK))
                return [
                    await call(session, "quick", {}, key="g-1"),
                    await call(session, "quick", {}, key="g-2"),
                ]

        ran, fresh = _asyncio(body)
        assert ran.structured_content["status"] == "unknown"
        assert ran.structured_content["may_have_run"] is True
        assert ran.structured_content["attempt"] == 1 and "grant_disabled" in ran.content[0].text
        assert fresh.structured_content["code"] == "grant_disabled"
        assert fresh.structured_content["may_have_run"] is False
        assert _runs(daemon.env, "g-1") == 1

    def test_a_pruned_key_may_have_run_and_never_runs_again(self, make_daemon) -> None:
        """A key whose op ran, was consumed and pruned: its fate is gone, so
        the answer is unknown (may have run), never "nothing ran"."""
        env = _env()
        env.top.update(retention_s=1, prune_interval_s=1)
        env.write_config()
        daemon = make_daemon(env)
        config = write_mcp_config(env, TOOLS)

        async def body() -> list[Any]:
            async with stdio_host(config, env.root / "mcp.log") as session:
                first = await call(session, "quick", {}, key="pr-1")
                await anyio.to_thread.run_sync(
                    lambda: wait_for(lambda: _op(daemon, config, "pr-1").get("pruned") is True)
                )
                return [first, await call(session, "quick", {}, key="pr-1")]

        first, pruned = _asyncio(body)
        assert first.is_error is False
        assert pruned.structured_content["status"] == "unknown"
        assert pruned.structured_content["may_have_run"] is True
        assert "pruned" in pruned.content[0].text and "nothing ran" not in pruned.content[0].text
        assert _runs(env, "pr-1") == 1

    def test_a_sigkill_during_a_call_answers_unknown_and_the_key_never_runs_again(
        self, setup
    ) -> None:
        """The daemon dies while the act runs: unknown, may have run, do not
        retry. After a restart the same key runs nothing: still unknown."""
        daemon, config = setup
        env = daemon.env

        async def body() -> list[Any]:
            results: list[Any] = []
            async with stdio_host(config, env.root / "mcp.log") as session:

                async def slow() -> None:
                    results.append(await call(session, "gated", {}, key="deploy-1"))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(slow)
                    await wait_until_file(env.started_marker("deploy-1"))
                    daemon.kill()
                await anyio.to_thread.run_sync(daemon.start)
                results.append(await call(session, "gated", {}, key="deploy-1"))
                _reconcile(daemon, config, "deploy-1", b"deployed by hand")
                results.append(await call(session, "gated", {}, key="deploy-1"))
            return results

        lost, after, resolved = _asyncio(body)
        # resolved by an operator: the key answers that outcome, and runs nothing
        assert resolved.is_error is False and resolved.content[0].text == "deployed by hand"
        assert resolved.meta["wardd/already"] is True
        for result in (lost, after):
            assert result.is_error is True
            structured = result.structured_content
            assert structured["status"] == "unknown"
            assert (structured["may_have_run"], structured["retry_safe"]) == (True, False)
            assert "Do not retry" in result.content[0].text
        assert after.structured_content["attempt"] == 1 and after.meta["wardd/attempt"] == 1
        op = _op(daemon, config, "deploy-1")
        assert op["state"] == "consumed" and len(op["attempts"]) == 1
        assert not env.started_marker("deploy-1", 2).exists()

    def test_a_daemon_restart_between_calls_is_placed_again_by_itself(self, setup) -> None:
        """After a restart the next call succeeds: wardd mcp places the neuron on
        the new boot (no manual bind)."""
        daemon, config = setup

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                before = await call(session, "quick", {}, key="r-1")
                await anyio.to_thread.run_sync(daemon.terminate)
                await anyio.to_thread.run_sync(daemon.start)
                return [before, await call(session, "quick", {}, key="r-2")]

        before, after = _asyncio(body)
        assert before.is_error is False and after.is_error is False
        with daemon.connect() as client:
            root = client.call("get_neuron", {"neuron": _neuron(config).id})
        assert root["placement"]["executor"]["boot"] == daemon.boot

    def test_a_daemon_that_is_down_gets_nothing_sent(self, setup) -> None:
        """No daemon to connect to: refused (unavailable), may_have_run false."""
        daemon, config = setup

        async def body() -> Any:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                await anyio.to_thread.run_sync(daemon.terminate)
                return await call(session, "quick", {}, key="down-1")

        down = _asyncio(body)
        assert down.is_error is True
        assert down.structured_content["code"] == "unavailable"
        assert down.structured_content["may_have_run"] is False
        assert "nothing was sent" in down.content[0].text

    def test_a_cancelled_call_still_lands(self, setup) -> None:
        """notifications/cancelled after the dispatch was sent cancels nothing:
        the act finishes, its outcome is stored, and the key answers it."""
        daemon, config = setup
        env = daemon.env

        async def body() -> Any:
            async with stdio_host(config, env.root / "mcp.log") as session:
                with anyio.CancelScope() as scope:

                    async def cancel_once_started() -> None:
                        await wait_until_file(env.started_marker("c-1"))
                        scope.cancel()  # the SDK sends notifications/cancelled

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(cancel_once_started)
                        await call(session, "gated", {}, key="c-1")
                assert scope.cancelled_caught
                env.open_gate("c-1")
                await anyio.to_thread.run_sync(
                    lambda: wait_for(lambda: _op(daemon, config, "c-1")["state"] == "consumed")
                )
                return await call(session, "gated", {}, key="c-1")

        again = _asyncio(body)
        assert again.is_error is False and again.meta["wardd/already"] is True
        assert _runs(env, "c-1") == 1

    def test_an_advanced_epoch_retires_the_running_server(self, setup) -> None:
        """The epoch read at start is sent on every call: once an operator
        advances it, calls are refused (epoch_mismatch) and nothing runs."""
        daemon, config = setup
        neuron = _neuron(config)

        async def body() -> list[Any]:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                before = await call(session, "quick", {}, key="e-1")
                with daemon.connect() as client:
                    params = {"expected_epoch": 1}
                    client.call("advance_epoch", neuron.sign("advance_epoch", params, NETWORK))
                return [before, await call(session, "quick", {}, key="e-2")]

        before, after = _asyncio(body)
        assert before.is_error is False
        assert after.structured_content["code"] == "epoch_mismatch"
        assert _runs(daemon.env, "e-2") == 0


class TestHttp:
    def test_streamable_http_lists_and_calls_once_per_key(self, setup) -> None:
        """The same server over streamable HTTP at /mcp on loopback."""
        daemon, config = setup

        async def body() -> list[Any]:
            async with http_host(config, daemon.env.root / "mcp-http.log") as session:
                names = [t.name for t in (await session.list_tools()).tools]
                return [
                    names,
                    await call(session, "quick", {"a": 1}, key="h-1"),
                    await call(session, "quick", {"a": 1}, key="h-1"),
                ]

        names, first, again = _asyncio(body)
        assert names == list(TOOLS)
        assert first.is_error is False and again.content == first.content
        assert _runs(daemon.env, "h-1") == 1

    def test_a_request_naming_another_host_is_refused(self, setup) -> None:
        """DNS rebinding: a page of another site that resolves to 127.0.0.1
        reaches the port, but its Host (or Origin) is not loopback: refused."""
        daemon, config = setup
        hello = {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "page", "version": "1"},
        }
        body = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        ).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            **bearer(config),  # the token is no defence here: a page has none
        }

        def post(url: str, extra: dict[str, str]) -> int:
            parts = urllib.parse.urlsplit(url)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
            try:
                conn.request("POST", parts.path, body, {**headers, **extra})
                return conn.getresponse().status
            finally:
                conn.close()

        async def run() -> list[int]:
            async with http_server(config, daemon.env.root / "mcp-http.log") as url:
                return [
                    await anyio.to_thread.run_sync(post, url, {}),
                    await anyio.to_thread.run_sync(post, url, {"Host": "attacker.example"}),
                    await anyio.to_thread.run_sync(
                        post, url, {"Origin": "http://attacker.example"}
                    ),
                ]

        own, other_host, other_origin = _asyncio(run)
        assert own == 200  # the same request from a loopback page is served
        assert other_host in (403, 421) and other_origin in (403, 421)

    def test_every_http_request_needs_the_bearer_token(self, setup) -> None:
        """Another local user reaches the loopback port but has no token: 401,
        and nothing runs; the right token is served."""
        daemon, config = setup
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}}
        hello["clientInfo"] = {"name": "other-user", "version": "1"}
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }

        def post(url: str, extra: dict[str, str]) -> int:
            parts = urllib.parse.urlsplit(url)
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
            try:
                conn.request("POST", parts.path, body.encode(), {**headers, **extra})
                return conn.getresponse().status
            finally:
                conn.close()

        async def run() -> list[int]:
            async with http_server(config, daemon.env.root / "mcp-http.log") as url:
                wrong = {"Authorization": "Bearer " + "0" * 64}
                return [
                    await anyio.to_thread.run_sync(post, url, {}),
                    await anyio.to_thread.run_sync(post, url, wrong),
                    await anyio.to_thread.run_sync(post, url, bearer(config)),
                ]

        missing, wrong, right = _asyncio(run)
        assert (missing, wrong) == (401, 401) and right == 200

    @pytest.mark.parametrize("problem", ["no key", "readable", "short"])
    def test_http_without_a_usable_token_file_is_refused_exit_78(self, setup, problem) -> None:
        """--http needs http_token_file: of mode 0600, with a long token."""
        daemon, config = setup
        token = daemon.env.root / "other.token"
        token.write_text("x" * 64)
        token.chmod(0o644 if problem == "readable" else 0o600)
        if problem == "short":
            token.write_text("short")
        given = None if problem == "no key" else str(token)
        bad = write_mcp_config(daemon.env, TOOLS, name="bad.toml", http_token_file=given)
        done = run_mcp(bad, "--http", "127.0.0.1:0")
        assert done.returncode == 78, done.stderr
        assert done.stderr.startswith(f"wardd: config error: {bad}: http_token_file: ")
        assert len(done.stderr.splitlines()) == 1

    def test_a_missing_token_file_is_created_private(self, setup) -> None:
        """http_token_file names a file that does not exist: created, 0600, and
        its token is the one the server asks for."""
        daemon, config = setup
        token = daemon.env.root / "new.token"
        made = write_mcp_config(daemon.env, TOOLS, name="made.toml", http_token_file=str(token))

        async def run() -> int:
            async with http_server(made, daemon.env.root / "mcp-made.log") as url:
                parts = urllib.parse.urlsplit(url)
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
                try:
                    auth = {"Authorization": f"Bearer {token.read_text().strip()}"}
                    await anyio.to_thread.run_sync(lambda: conn.request("GET", "/mcp", None, auth))
                    return (await anyio.to_thread.run_sync(conn.getresponse)).status
                finally:
                    conn.close()

        status = _asyncio(run)
        assert status != 401 and (token.stat().st_mode & 0o777) == 0o600
        assert len(token.read_text().strip()) == 64

    def test_http_refuses_an_address_that_is_not_loopback(self, setup) -> None:
        _, config = setup
        done = run_mcp(config, "--http", "0.0.0.0:8080")
        assert done.returncode == 78
        assert "not a loopback address" in done.stderr and "--http" in done.stderr


class TestStart:
    def test_the_start_is_idempotent_and_leaves_the_prog_and_grant_alone(self, make_daemon) -> None:
        """A second start changes nothing: no new grant, the prog's step limit as
        created (step_limit is used only when the prog is created)."""
        env = _env()
        daemon = make_daemon(env)
        config = write_mcp_config(env, TOOLS, step_limit=50)

        async def start_once() -> None:
            async with stdio_host(config, env.root / "mcp.log") as session:
                await session.list_tools()

        _asyncio(start_once)
        neuron = _neuron(config).id
        with daemon.connect() as client:
            first = client.call("get_neuron", {"neuron": neuron})
        write_mcp_config(env, TOOLS, step_limit=99)
        _asyncio(start_once)
        with daemon.connect() as client:
            second = client.call("get_neuron", {"neuron": neuron})
            prog = client.call("get_prog", {"neuron": neuron, "prog": "agent"})
        assert second["policy_version"] == first["policy_version"]
        assert sorted(second["grants"]["agent"]["acts"]) == sorted(TOOLS)
        assert prog["step_limit"] == 50

    def test_an_operators_revoke_survives_a_restart(self, setup) -> None:
        """The start grants the acts only to a prog it created: an act an
        operator revoked stays revoked after wardd mcp starts again (logged
        mcp_not_granted), and its tool's calls are refused."""
        daemon, config = setup
        neuron = _neuron(config)
        assert run_mcp(config).returncode == 0  # creates the prog and grants
        kept = sorted(set(TOOLS) - {"quick"})
        with daemon.connect() as client:
            root = client.call("get_neuron", {"neuron": neuron.id})
            params = {
                "prog": "agent",
                "acts": kept,
                "enabled": True,
                "expected_policy_version": root["policy_version"],
            }
            client.call("set_grant", neuron.sign("set_grant", params, NETWORK))
        again = run_mcp(config)
        assert again.returncode == 0 and "mcp_not_granted" in again.stderr
        with daemon.connect() as client:
            after = client.call("get_neuron", {"neuron": neuron.id})
        assert sorted(after["grants"]["agent"]["acts"]) == kept
        assert after["policy_version"] == root["policy_version"] + 1

        async def body() -> Any:
            async with stdio_host(config, daemon.env.root / "mcp.log") as session:
                return await call(session, "quick", {}, key="rv-1")

        refused = _asyncio(body)
        assert refused.structured_content["code"] == "act_not_granted"
        assert _runs(daemon.env, "rv-1") == 0

    def test_an_act_the_daemon_lacks_fails_the_start_naming_the_tool(self, make_daemon) -> None:
        """Checked before anything is written: the refused start registered nothing."""
        env = _env()
        daemon = make_daemon(env)
        config = write_mcp_config(env, {"pay.charge": TOOLS["quick"]})
        done = run_mcp(config)
        assert done.returncode == 1
        assert 'tools."pay.charge"' in done.stderr and len(done.stderr.splitlines()) == 1
        with daemon.connect() as client, pytest.raises(UnknownNeuron):
            client.call("get_neuron", {"neuron": _neuron(config).id})

    def test_a_host_closing_stdin_ends_it_with_status_0(self, setup) -> None:
        _, config = setup
        done = run_mcp(config)
        assert done.returncode == 0, done.stderr
        assert "mcp_ready" in done.stderr

    def test_a_missing_key_is_one_line_with_one_hint_naming_the_path(self) -> None:
        env = Env()  # never started: the key is read first
        missing = env.root / "no.key"
        done = run_mcp(write_mcp_config(env, TOOLS, key=str(missing)))
        assert done.returncode == 1
        assert done.stderr.count("create one with") == 1, done.stderr
        assert f"wardctl --key {missing} keygen" in done.stderr
        assert len(done.stderr.splitlines()) == 1

    def test_a_daemon_that_cannot_be_reached_fails_the_start(self) -> None:
        env = Env()  # never started
        config = write_mcp_config(env, TOOLS)
        done = run_mcp(config)
        assert done.returncode == 1 and str(env.socket) in done.stderr

    @pytest.mark.parametrize(
        ("top", "tools", "key"),
        [
            ({"prog": "bad prog"}, TOOLS, "prog"),
            ({"colour": "red"}, TOOLS, "colour"),
            ({}, {"quick": {"input_schema": ANY}}, "tools.quick.description"),
            ({}, {"quick": {**TOOLS["quick"], "key": "random"}}, "tools.quick.key"),
            ({}, {"a:b": TOOLS["quick"]}, 'tools."a:b"'),
            (
                {},
                {"quick": {**TOOLS["quick"], "input_schema": {"type": "array"}}},
                "tools.quick.input_schema",
            ),
            (  # a $ref that resolves nowhere (nothing is fetched)
                {},
                {"quick": {**TOOLS["quick"], "input_schema": {**ANY, "$ref": "#/$defs/no"}}},
                "tools.quick.input_schema",
            ),
        ],
    )
    def test_a_config_error_is_one_line_naming_the_key_exit_78(self, top, tools, key) -> None:
        env = Env()
        config = write_mcp_config(env, tools, **top)
        done = run_mcp(config)
        assert done.returncode == 78, done.stderr
        lines = done.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"wardd: config error: {config}: {key}: ")

    def test_help_documents_stdio_and_http(self) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "wardd.daemon.cli", "mcp", "--help"],
            capture_output=True,
            text=True,
            env=child_env(),
        )
        assert done.returncode == 0
        text = " ".join(done.stdout.split())
        assert "stdin and stdout" in text and "--http HOST:PORT" in text and "/mcp" in text

    def test_sigterm_ends_the_http_server_cleanly(self, setup) -> None:
        daemon, config = setup
        log = daemon.env.root / "mcp-term.log"
        with open(log, "ab") as errlog:
            proc = subprocess.Popen(
                mcp_argv(config, "--http", "127.0.0.1:0"),
                stdin=subprocess.DEVNULL,
                stderr=errlog,
                stdout=subprocess.DEVNULL,
                env=child_env(),
            )
        try:
            wait_for(lambda: "mcp_listening" in log.read_text(), what="mcp_listening")
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        assert [x["event"] for x in lines][-2:] == ["mcp_ready", "mcp_listening"]
