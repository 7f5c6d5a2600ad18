"""docs/recipes.md "Guard an agent's tools in Python" stays true: its act,
its session and each framework's tool, run for real against a daemon,
without a model (the tool objects are called directly, as the framework
would call them). A framework that is not installed skips its test."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests._recipes import recipe_block, recipe_section
from tests.daemon.harness import Actor, Env
from wardd.client import ActFailed, GuardedTool, MayHaveRun, arguments_key, canonical_arguments
from wardd.protocol import OpConflict

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    return recipe_section("Guard an agent's tools in Python")


def block(language: str, containing: str) -> str:
    return recipe_block("Guard an agent's tools in Python", language, containing)


def module(folder: Path, name: str, source: str) -> ModuleType:
    """``source`` written as ``folder/name.py`` and imported under that name."""
    path = folder / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


class Recipe:
    """A daemon running the recipe's act, a neuron set up as the recipe says,
    and the recipe's `guarded.py` imported."""

    def __init__(self, make_daemon: Any, tmp_path: Path) -> None:
        package = tmp_path / "lib" / "mytools"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "pay.py").write_text(block("python", "def charge(request)"))
        table = tomllib.loads(block("toml", 'callable = "mytools.pay:charge"'))["acts"]
        table["pay.charge"]["python_path"] = [str(tmp_path / "lib")]
        self.ledger = tmp_path / "charges.log"
        self.daemon = make_daemon(Env(acts=table), start=False)
        self.daemon.start({"MYTOOLS_PAY_LEDGER": str(self.ledger)})
        actor = Actor(self.daemon, acts=("pay.charge", "nofx", "gated"), prog="agent")
        self.key_path = tmp_path / "neuron.key"
        actor.neuron.save(self.key_path)
        self.actor = actor
        self.folder = tmp_path
        self.guarded = module(tmp_path, "guarded", block("python", "async def open_charge"))

    def charges(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []

    def run(self, body: Any) -> Any:
        """``body(tool)`` with the recipe's tool, on asyncio, the client closed after."""

        async def main() -> Any:
            client, tool = await self.guarded.open_charge(self.key_path)
            try:
                return await body(tool)
            finally:
                await client.aclose()

        return asyncio.run(main())


@pytest.fixture
def recipe(make_daemon, tmp_path: Path, monkeypatch) -> Iterator[Recipe]:
    r = Recipe(make_daemon, tmp_path)
    monkeypatch.setenv("WARDD_SOCKET", str(r.daemon.env.socket))
    try:
        yield r
    finally:
        for name in ("guarded", "agent_tools", "graph_tools"):
            sys.modules.pop(name, None)


class TestGuardedTool:
    def test_one_key_runs_once_and_answers_the_first_value(self, recipe):
        async def body(tool: GuardedTool) -> Any:
            first = await tool("order-1:charge", {"amount": 5})
            again = await tool("order-1:charge", {"amount": 5})
            with pytest.raises(OpConflict):
                await tool("order-1:charge", {"amount": 6})
            return first, again

        first, again = recipe.run(body)
        assert first == again == {"charged": 5}
        assert recipe.charges() == [f"{recipe.actor.id}/order-1:charge/1\t5"]
        op = recipe.actor.op("order-1:charge")
        assert op["args"] == canonical_arguments({"amount": 5}) == b'{"amount":5}'

    def test_a_key_function_of_the_arguments(self, recipe):
        key = arguments_key("run-7")

        async def body(tool: GuardedTool) -> Any:
            return [await tool(key, {"amount": a}) for a in (1, 2, 1)]

        assert recipe.run(body) == [{"charged": 1}, {"charged": 2}, {"charged": 1}]
        assert [line.split("\t")[1] for line in recipe.charges()] == ["1", "2"]
        assert key({"amount": 1}) != key({"amount": 2})
        assert arguments_key("run-8")({"amount": 1}) != key({"amount": 1})
        with pytest.raises(ValueError):
            arguments_key("a thread id with spaces")

    def test_failed_and_unknown_outcomes_are_typed_errors(self, recipe):
        """A failure with no effect is ActFailed; an outcome that may have
        happened is MayHaveRun naming the op and attempt, then and on a repeat."""

        async def body(tool: GuardedTool) -> list[BaseException]:
            nofx = GuardedTool(tool.session, "agent", "nofx")
            caught = []
            # the recipe's act raises KeyError without an amount: no
            # DefiniteFailure, so the outcome is unknown
            for guarded, key, args in ((tool, "k-u", {"nope": 1}), (nofx, "k-f", {})):
                for _ in range(2):
                    with pytest.raises((ActFailed, MayHaveRun)) as ei:
                        await guarded(key, args)
                    caught.append(ei.value)
            return caught

        unknown, unknown_again, failed, failed_again = recipe.run(body)
        for e in (unknown, unknown_again):
            assert isinstance(e, MayHaveRun) and (e.op, e.attempt) == ("k-u", 1)
        for e in (failed, failed_again):
            assert isinstance(e, ActFailed) and (e.op, e.attempt, e.status) == ("k-f", 1, "failed")
        assert len(recipe.actor.op("k-f")["attempts"]) == 1
        assert recipe.charges() == []

    def test_a_sigkill_during_the_call_is_may_have_run_and_no_second_run(self, recipe):
        """The answer lost with the daemon is MayHaveRun (no attempt known);
        after the restart the same key runs nothing: MayHaveRun naming attempt 1."""
        env = recipe.daemon.env

        async def during(tool: GuardedTool) -> BaseException:
            gated = GuardedTool(tool.session, "agent", "gated")
            task = asyncio.ensure_future(gated("g-1", {}))
            for _ in range(1000):  # bounded polling of the act's own start marker
                if env.started_marker("g-1").exists() or task.done():
                    break
                await asyncio.sleep(0.02)
            assert env.started_marker("g-1").exists(), "the gated act never started"
            recipe.daemon.kill()
            with pytest.raises(MayHaveRun) as ei:
                await task
            return ei.value

        lost = recipe.run(during)
        assert (lost.op, lost.attempt) == ("g-1", None)
        recipe.daemon.start({"MYTOOLS_PAY_LEDGER": str(recipe.ledger)})

        async def after(tool: GuardedTool) -> BaseException:
            with pytest.raises(MayHaveRun) as ei:
                await GuardedTool(tool.session, "agent", "gated")("g-1", {})
            return ei.value

        again = recipe.run(after)
        assert (again.op, again.attempt) == ("g-1", 1)
        assert not env.started_marker("g-1", 2).exists()


class TestOpenAIAgentsTool:
    def test_the_function_tool_charges_once_across_new_tool_call_ids(self, recipe):
        agents = pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed")
        from agents.tool_context import ToolContext

        tools = module(recipe.folder, "agent_tools", block("python", "from agents import"))

        async def body(tool: GuardedTool) -> Any:
            job = tools.Job(run_key="order-1042", charge=tool)
            answers = []
            for call_id in ("call_a", "call_b"):  # the model re-issued the call
                ctx = ToolContext(
                    context=job,
                    tool_name="charge",
                    tool_call_id=call_id,
                    tool_arguments='{"amount": 700}',
                )
                answers.append(await tools.charge.on_invoke_tool(ctx, '{"amount": 700}'))
            return answers

        assert isinstance(tools.charge, agents.FunctionTool)
        assert recipe.run(body) == ["charged 700 cents", "charged 700 cents"]
        assert len(recipe.charges()) == 1
        assert recipe.charges()[0].startswith(f"{recipe.actor.id}/order-1042:")

    def test_its_error_text_says_not_to_retry_what_may_have_run(self, recipe):
        pytest.importorskip("agents", reason="the OpenAI Agents SDK is not installed")
        tools = module(recipe.folder, "agent_tools", block("python", "from agents import"))
        text = tools.tool_error(None, MayHaveRun("op-1", 1))
        assert "do not retry" in text and "op-1" in text


class TestLangChainTool:
    def test_the_tool_charges_once_per_thread_and_arguments(self, recipe):
        pytest.importorskip("langchain_core", reason="LangChain is not installed")
        tools = module(recipe.folder, "graph_tools", block("python", "from langchain_core"))

        async def body(tool: GuardedTool) -> Any:
            charge = tools.charge_tool(tool)
            config = {"configurable": {"thread_id": "order-1042"}}
            # a resumed graph runs the interrupted tool node again
            first = await charge.ainvoke({"amount": 300}, config=config)
            again = await charge.ainvoke({"amount": 300}, config=config)
            other = await charge.ainvoke(
                {"amount": 300}, config={"configurable": {"thread_id": "t2"}}
            )
            return charge, [first, again, other]

        charge, answers = recipe.run(body)
        assert answers == ["charged 300 cents"] * 3
        assert "config" not in charge.args  # the model never sees the config
        assert len(recipe.charges()) == 2  # one per thread
