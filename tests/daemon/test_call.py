"""`call`: submit and invoke in one signed request, against a real daemon
(contract §3.2.6).

Effects are counted in the ledger file the acts append to themselves; a
repeated call must never add a line.
"""

from __future__ import annotations

import shlex

import anyio
import pytest

from tests._poll import wait_for
from tests.daemon.backends import backend, run_on
from tests.daemon.harness import Actor, Background, Env, code_of, key, run_wardctl
from wardd.client import (
    ActFailed,
    AsyncClient,
    AsyncSession,
    Called,
    Client,
    GuardedTool,
    MayHaveRun,
    NotSent,
    Session,
    arguments_key,
)
from wardd.protocol import (
    AttemptState,
    AttemptUnknown,
    EpochMismatch,
    GrantDisabled,
    OpConflict,
    OpState,
    PlacementStale,
)

__all__ = ["backend"]  # the fixture, used by name


def call_env(**top: object) -> Env:
    """The default acts, and: ``stamp`` appends its key to the CLI ledger and
    prints a value no second run repeats; ``lost`` appends its key, then
    exits with a status that is no definite failure (unknown)."""
    env = Env(**top)
    ledger = shlex.quote(str(env.cli_ledger))
    key_ = '"$WARDD_IDEMPOTENCY_KEY"'
    env.acts["stamp"] = {
        "adapter": "cli",
        "argv": ["/bin/sh", "-c", f"echo {key_} >> {ledger}; cat; date +%s%N"],
    }
    env.acts["lost"] = {
        "adapter": "cli",
        "argv": ["/bin/sh", "-c", f"echo {key_} >> {ledger}; exit 7"],
    }
    env.write_config()
    return env


@pytest.fixture
def actor(make_daemon) -> Actor:
    d = make_daemon(call_env())
    return Actor(d, acts=("stamp", "lost", "nofx", "echo", "gated"))


def call(a: Actor, op: str, act: str = "stamp", args: bytes = b"x", client=None, **extra) -> dict:
    params = {"prog": a.prog, "op": op, "act": act, "args": args, **extra}
    return a.call("call", params, client)


def runs(a: Actor) -> list[str]:
    return a.daemon.env.ledger_lines(a.daemon.env.cli_ledger)


class TestCall:
    def test_first_call_runs_once_and_a_repeat_answers_the_retained_value(self, actor):
        """A call submits and runs its op in one request; the same call again
        runs nothing and answers the retained value (``already: true``)."""
        first = call(actor, "c1")
        assert (first["op"], first["attempt"], first["status"]) == ("c1", 1, "succeeded")
        assert first["result"]["stdout"].startswith(b"x")
        again = call(actor, "c1")
        assert again["already"] is True and again["state"] == "retained"
        assert (again["attempt"], again["status"], again["result"]) == (
            1,
            "succeeded",
            first["result"],
        )
        assert runs(actor) == [key(actor, "c1")]
        kinds = [r["kind"] for r in actor.history("c1")]
        assert kinds == ["submitted", "prepared", "claimed", "outcome"]

    def test_other_content_is_op_conflict_and_changes_nothing(self, actor):
        call(actor, "c1")
        assert code_of(call, actor, "c1", args=b"y").code == "op_conflict"
        assert code_of(call, actor, "c1", act="echo").code == "op_conflict"
        assert runs(actor) == [key(actor, "c1")]
        assert len(actor.history("c1")) == 4

    def test_a_pending_op_is_invoked(self, actor):
        """An op submitted earlier and never invoked runs at its first call."""
        actor.submit("p1", "stamp", b"x")
        got = call(actor, "p1")
        assert (got["attempt"], got["status"]) == (1, "succeeded") and "already" not in got
        assert runs(actor) == [key(actor, "p1")]

    def test_an_op_whose_only_attempt_was_voided_is_invoked(self, actor):
        """An attempt voided before its claim never ran: the call runs the next one."""
        actor.submit("v1", "stamp", b"x")
        actor.prepare("v1")
        actor.bind(0)  # a new placement generation voids the prepared attempt
        got = call(actor, "v1")
        assert (got["attempt"], got["status"]) == (2, "succeeded")
        assert runs(actor) == [key(actor, "v1", 2)]

    def test_after_consume_the_consumed_state(self, actor):
        first = call(actor, "c1")
        actor.call("consume", {"op": "c1"})
        again = call(actor, "c1")
        assert again["state"] == "consumed" and again["already"] is True
        assert (again["attempt"], again["status"], again["result"]) == (
            1,
            "succeeded",
            first["result"],
        )
        assert runs(actor) == [key(actor, "c1")]

    def test_a_failed_call_is_answered_not_run_again(self, actor):
        """``failed`` (nothing was done) is the op's answer: a repeat runs nothing."""
        first = call(actor, "f1", act="nofx")
        assert first["status"] == "failed" and isinstance(first["error"], str)
        again = call(actor, "f1", act="nofx")
        assert (again["already"], again["status"], again["error"]) == (
            True,
            "failed",
            first["error"],
        )
        assert len(actor.op("f1")["attempts"]) == 1

    def test_an_unknown_outcome_then_the_same_call_is_attempt_unknown(self, actor):
        first = call(actor, "u1", act="lost")
        assert (first["status"], first["attempt"]) == ("unknown", 1)
        err = code_of(call, actor, "u1", act="lost")
        assert err.code == "attempt_unknown" and err.data == {"op": "u1", "attempt": 1}
        assert runs(actor) == [key(actor, "u1")]
        assert len(actor.op("u1")["attempts"]) == 1

    def test_the_same_call_while_the_first_runs_is_attempt_busy_and_runs_nothing(self, actor):
        """Two identical calls at once: the second one is refused (naming the
        running attempt), and after the first ends the same call answers it."""
        env = actor.daemon.env
        other = actor.daemon.connect()
        first = Background(lambda: call(actor, "g2", "gated", b"", client=other))
        wait_for(env.started_marker("g2").exists, what="the gated act to start")
        err = code_of(call, actor, "g2", act="gated", args=b"")
        assert err.code == "attempt_busy" and err.data == {"op": "g2", "attempt": 1}
        env.open_gate("g2")
        assert first.result()["status"] == "succeeded"
        again = call(actor, "g2", act="gated", args=b"")
        assert again["already"] is True and again["status"] == "succeeded"
        assert runs(actor) == [key(actor, "g2")]

    def test_unknown_act_and_stale_placement_write_nothing(self, make_daemon):
        """A refused call leaves no op behind: the same call succeeds once its cause is gone."""
        d = make_daemon(call_env())
        a = Actor(d, acts=("stamp",))
        assert code_of(call, a, "n1", act="no.such").code == "unknown_act"
        assert code_of(call, a, "n1", act="echo").code == "act_not_granted"
        assert d.terminate() == 0
        d.start()
        a.client = d.connect()
        assert code_of(call, a, "n1").code == "placement_stale"
        assert code_of(a.op, "n1").code == "unknown_operation"
        a.bind(0)
        assert call(a, "n1")["status"] == "succeeded"
        assert runs(a) == [key(a, "n1")]

    def test_bad_params_are_refused_and_change_nothing(self, actor):
        base = {"prog": actor.prog, "op": "b1", "act": "stamp", "args": b"x"}
        bad = [
            {k: v for k, v in base.items() if k != "args"},
            {**base, "args": "text"},
            {**base, "op": "no spaces"},
            {**base, "act": 7},
            {**base, "placement_generation": -1},
            {**base, "expected_epoch": "1"},
            {**base, "expected_attempt": 1},
        ]
        for params in bad:
            assert code_of(actor.call, "call", params).code == "bad_request", params
        assert code_of(call, actor, "b1", expected_epoch=9).code == "epoch_mismatch"
        gen = actor.root()["placement_generation"]
        err = code_of(call, actor, "b1", placement_generation=gen + 1)
        assert err.code == "generation_mismatch"
        assert actor.read("list_operations", {"neuron": actor.id})["operations"] == []
        assert runs(actor) == []

    def test_a_sigkill_during_a_slow_call_then_the_same_call_is_attempt_unknown(self, actor):
        """The claim is durable before the act: a crash during it leaves the
        attempt unknown at the next start, and the same call runs nothing."""
        d, env = actor.daemon, actor.daemon.env
        params = {"prog": actor.prog, "op": "g1", "act": "gated", "args": b""}
        slow = Background(actor.call, "call", params, d.connect())
        wait_for(env.started_marker("g1").exists, what="the gated act to start")
        d.kill()
        slow.error_of()  # the answer is lost with the daemon
        d.start()
        actor.client = d.connect()
        actor.bind(0)
        err = code_of(call, actor, "g1", act="gated", args=b"")
        assert err.code == "attempt_unknown" and err.data == {"op": "g1", "attempt": 1}
        assert not env.started_marker("g1", 2).exists()
        att = actor.op("g1")["attempts"]
        assert len(att) == 1 and att[0]["state"] == "unknown" and att[0]["claimed"] is True


class TestSessionCall:
    def test_typed_result_and_errors(self, actor):
        session = Session(actor.daemon.connect(), actor.neuron)
        got = session.call(actor.prog, "s1", "stamp", b"x")
        assert isinstance(got, Called)
        assert (got.op, got.attempt, got.status, got.already) == (
            "s1",
            1,
            AttemptState.SUCCEEDED,
            False,
        )
        again = session.call(actor.prog, "s1", "stamp", b"x")
        assert again.already and again.state is OpState.RETAINED and again.result == got.result
        with pytest.raises(OpConflict):
            session.call(actor.prog, "s1", "stamp", b"y")
        assert session.call(actor.prog, "s2", "lost").status is AttemptState.UNKNOWN
        with pytest.raises(AttemptUnknown) as ei:
            session.call(actor.prog, "s2", "lost")
        assert ei.value.data == {"op": "s2", "attempt": 1}
        assert runs(actor) == [key(actor, "s1"), key(actor, "s2")]

    def test_rebind_stale_places_the_new_boot_and_calls(self, make_daemon):
        d = make_daemon(call_env())
        a = Actor(d, acts=("stamp",))
        assert d.terminate() == 0
        d.start()
        session = Session(d.connect(), a.neuron)
        assert session.call(a.prog, "r1", "stamp", rebind_stale=True).status == "succeeded"
        assert runs(a) == [key(a, "r1")]


class TestAsyncCall:
    def test_async_session_call_and_a_guarded_tool(self, backend: str, actor) -> None:
        """AsyncSession.call and GuardedTool under asyncio and trio alike: one
        run per key, typed errors for a failure and for what may have run."""
        d = actor.daemon

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                session = AsyncSession(client, actor.neuron)
                got = await session.call(actor.prog, "a1", "stamp", b"x")
                assert got.status is AttemptState.SUCCEEDED
                assert (await session.call(actor.prog, "a1", "stamp", b"x")).already
                tool = GuardedTool(session, actor.prog, "stamp")
                key = arguments_key("run-1")
                first = await tool(key, {"n": 1})
                assert await tool(key, {"n": 1}) == first
                with pytest.raises(ActFailed):
                    await GuardedTool(session, actor.prog, "nofx")("f", {})
                for _ in range(2):
                    with pytest.raises(MayHaveRun) as ei:
                        await GuardedTool(session, actor.prog, "lost")("u", {})
                    assert (ei.value.op, ei.value.attempt) == ("u", 1)

        run_on(backend, body)
        assert len(runs(actor)) == 3  # a1, run-1's key, and "lost" once


class TestDoubt:
    """An answer after which an attempt of the op may have run, or may be
    running, says so: never "nothing ran" (wardd.client._doubt)."""

    def test_a_refusal_before_the_op_state_names_an_earlier_claimed_attempt(self, actor):
        """unknown_act and grant_disabled come before the op's state: refusing
        a repeat of an op that ran, they say it may have run (data.may_have_run);
        for an op never claimed they do not."""
        call(actor, "ran-1")
        err = code_of(call, actor, "ran-1", act="no.such")
        assert err.code == "unknown_act"
        assert err.data == {"op": "ran-1", "attempt": 1, "may_have_run": True}
        assert code_of(call, actor, "new-1", act="no.such").data is None
        actor.grant(["stamp", "lost", "nofx", "echo", "gated"], enabled=False)
        err = code_of(call, actor, "ran-1")
        assert err.code == "grant_disabled" and err.data["may_have_run"] is True
        assert code_of(call, actor, "new-2").data is None

        async def body() -> None:
            async with AsyncClient.connect(actor.daemon.env.socket) as client:
                tool = GuardedTool(AsyncSession(client, actor.neuron), actor.prog, "stamp")
                with pytest.raises(MayHaveRun) as ei:
                    await tool("ran-1", {})
                assert (ei.value.op, ei.value.attempt) == ("ran-1", 1)
                with pytest.raises(GrantDisabled):
                    await tool("new-3", {})

        run_on("asyncio", body)
        assert runs(actor) == [key(actor, "ran-1")]

    def test_a_call_racing_a_running_attempt_may_have_run(self, actor):
        """attempt_busy: the op's attempt is running. GuardedTool raises
        MayHaveRun naming it; wardctl call exits 3."""
        env = actor.daemon.env
        actor.neuron.save(env.root / "neuron.key")
        other = actor.daemon.connect()
        first = Background(lambda: call(actor, "busy-1", "gated", b"{}", client=other))
        try:
            wait_for(env.started_marker("busy-1").exists, what="the gated act to start")

            async def body() -> None:
                async with AsyncClient.connect(env.socket) as client:
                    tool = GuardedTool(AsyncSession(client, actor.neuron), actor.prog, "gated")
                    with pytest.raises(MayHaveRun) as ei:
                        await tool("busy-1", {})
                    assert (ei.value.op, ei.value.attempt) == ("busy-1", 1)

            run_on("asyncio", body)
            out = run_wardctl(
                env, "call", actor.prog, "busy-1", "gated", "--args", "{}", check=False
            )
            assert out.returncode == 3 and "may have run" in out.stderr
        finally:
            env.open_gate("busy-1")
        assert first.result()["status"] == "succeeded"

    def test_a_cancelled_ops_repeat_never_answers_its_discarded_value(self, actor):
        """cancel discards a retained value: the same call answers the
        cancelled state and the attempt's status, without the value."""
        first = call(actor, "cx-1")
        assert first["status"] == "succeeded" and first["result"]
        assert actor.call("cancel", {"op": "cx-1"})["was"] == "retained"
        again = call(actor, "cx-1")
        assert (again["state"], again["attempt"], again["status"]) == ("cancelled", 1, "succeeded")
        assert "result" not in again

        async def body() -> None:
            async with AsyncClient.connect(actor.daemon.env.socket) as client:
                tool = GuardedTool(AsyncSession(client, actor.neuron), actor.prog, "stamp")
                with pytest.raises(MayHaveRun, match="discarded"):
                    await tool("cx-2", {})

        call(actor, "cx-2", args=b"{}")
        actor.call("cancel", {"op": "cx-2"})
        run_on("asyncio", body)
        assert runs(actor) == [key(actor, "cx-1"), key(actor, "cx-2")]


def test_a_pruned_op_is_said_to_have_maybe_run_never_to_run_again(make_daemon):
    """A pruned op's tombstone keeps no fate: wardctl call exits 3 and says it
    may have run (no new op id suggested); GuardedTool raises MayHaveRun."""
    d = make_daemon(call_env(retention_s=1, prune_interval_s=1))
    a = Actor(d, acts=("stamp",))
    a.neuron.save(d.env.root / "neuron.key")
    call(a, "p-1", args=b"{}")
    a.call("consume", {"op": "p-1"})
    wait_for(lambda: a.op("p-1").get("pruned") is True, what="op p-1 pruned")
    out = run_wardctl(d.env, "call", a.prog, "p-1", "stamp", "--args", "{}", check=False)
    assert out.returncode == 3, (out.stdout, out.stderr)
    assert "may have run" in out.stdout and "new op id" not in out.stdout + out.stderr

    async def body() -> None:
        async with AsyncClient.connect(d.env.socket) as client:
            tool = GuardedTool(AsyncSession(client, a.neuron), a.prog, "stamp")
            with pytest.raises(MayHaveRun, match="pruned"):
                await tool("p-1", {})

    run_on("asyncio", body)
    assert runs(a) == [key(a, "p-1")]


def test_a_refused_calls_bytes_replayed_after_an_epoch_advance_run_nothing(make_daemon):
    """A Session that pins no epoch still sends expected_epoch on call (read
    once): its refused call (placement_stale, nothing written) replayed
    byte for byte after advance_epoch and a bind is epoch_mismatch, and runs
    nothing; the session's next call is refused too (never silently re-read)."""
    d = make_daemon(call_env())
    a = Actor(d, acts=("stamp",))
    assert d.terminate() == 0
    d.start()  # a new boot: the placement is stale
    a.client = d.connect()
    sent: list[dict] = []

    class Recording(Client):
        def send(self, method, params=None):  # type: ignore[no-untyped-def]
            if method == "call":
                sent.append(dict(params or {}))
            return super().send(method, params)

    with Recording(d.env.socket) as recording:
        session = Session(recording, a.neuron)
        with pytest.raises(PlacementStale):
            session.call(a.prog, "rp-1", "stamp", b"x")
        assert sent[0]["expected_epoch"] == a.root()["epoch"]
        a.call("advance_epoch", {"expected_epoch": a.root()["epoch"]})
        a.bind(0)
        with d.connect() as client, pytest.raises(EpochMismatch):
            client.call("call", sent[0])
        with pytest.raises(EpochMismatch):
            session.call(a.prog, "rp-2", "stamp", b"x")
    fresh = Session(d.connect(), a.neuron)
    assert fresh.call(a.prog, "rp-3", "stamp", b"x").status == "succeeded"
    assert runs(a) == [key(a, "rp-3")]


class TestRestart:
    def test_a_guarded_tool_across_a_daemon_restart(self, backend: str, make_daemon) -> None:
        """On one session: without reconnect, a call after a restart is NotSent
        (never MayHaveRun: nothing went out, nothing ran), again and again;
        with reconnect=True the next call reconnects, places this boot and runs."""
        d = make_daemon(call_env())
        a = Actor(d, acts=("stamp",))
        restarted = {"done": False}

        def restart() -> None:
            assert d.terminate() == 0
            d.start()
            restarted["done"] = True

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as plain:
                tool = GuardedTool(AsyncSession(plain, a.neuron), a.prog, "stamp")
                await tool("before", {})
                async with AsyncClient.connect(d.env.socket, reconnect=True) as kept:
                    kept_tool = GuardedTool(AsyncSession(kept, a.neuron), a.prog, "stamp")
                    await kept_tool("before-2", {})
                    await anyio.to_thread.run_sync(restart)
                    for op in ("after-1", "after-2"):
                        with pytest.raises(NotSent) as ei:
                            await tool(op, {})
                        assert not isinstance(ei.value, MayHaveRun)
                    assert await kept_tool("after-3", {}) is not None

        run_on(backend, body)
        assert restarted["done"]
        assert runs(a) == [key(a, "before"), key(a, "before-2"), key(a, "after-3")]
        a.client = d.connect()
        assert code_of(a.op, "after-1").code == "unknown_operation"
