"""Unattended clients against a real daemon, under asyncio and trio: a new
boot's placement (`ensure_placement`, ``rebind_stale``) and `invoke`'s
`Retry`, which asks again only after answers that prove no effect."""

from __future__ import annotations

import shlex
from typing import Any

import anyio
import pytest

from tests._poll import wait_until_file
from tests.daemon.backends import backend, run_on
from tests.daemon.harness import Env
from wardd.client import (
    AsyncClient,
    AsyncSession,
    Client,
    ConnectionClosed,
    DaemonUnreachable,
    MayHaveRun,
    Neuron,
    Retry,
    Session,
)
from wardd.protocol import AttemptUnknown, Overloaded, PlacementStale

__all__ = ["backend"]  # the fixture, used by name

NO_PAUSE = {"backoff": 0.0}


def flaky_env(**top: Any) -> Env:
    """An Env with `flaky`: fails without effect (exit 2) on its first call, then succeeds."""
    env = Env(**top)
    mark = shlex.quote(str(env.root / "flaky-ran-once"))
    script = f"if [ -e {mark} ]; then echo ok; else touch {mark}; exit 2; fi"
    env.acts["flaky"] = {
        "adapter": "cli",
        "argv": ["/bin/sh", "-c", script],
        "no_effect_exits": [2],
    }
    env.write_config()
    return env


def set_up(socket: Any, neuron: Neuron, acts: tuple[str, ...]) -> None:
    """Register `neuron` with prog `p` granted `acts`, bound to w0 (blocking)."""
    with Client(socket) as client:
        session = Session(client, neuron)
        session.register()
        session.create_prog("p", 100)
        session.grant("p", acts)
        session.bind("w0")


class TestPlacementOfANewBoot:
    def test_ensure_placement_binds_each_new_boot_once(self, backend: str, make_daemon) -> None:
        d = make_daemon()
        neuron = Neuron.generate()

        async def first_boot() -> int:
            async with AsyncClient.connect(d.env.socket) as client:
                s = AsyncSession(client, neuron)
                await s.register()
                await s.create_prog("p", 100)
                await s.grant("p", ["echo"])
                bound = await s.ensure_placement("w1")  # unbound: binds
                assert bound.bound is True
                again = await s.ensure_placement("w1")  # names this boot: nothing
                assert again.to_wire() == {
                    "placement_generation": bound.placement_generation,
                    "bound": False,
                }
                return int(bound.placement_generation)

        async def next_boot(generation: int) -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                s = AsyncSession(client, neuron)
                await s.submit("p", "op", "echo", b"x")
                with pytest.raises(PlacementStale):
                    await s.invoke("op")
                rebound = await s.ensure_placement()  # the worker the placement names
                assert rebound.bound is True
                assert rebound.placement_generation == generation + 1
                root = await s.get_neuron()
                assert root.placement["executor"]["worker"] == "w1"
                assert root.placement["executor"]["boot"] == client.hello_result.boot
                assert (await s.invoke("op")).status == "succeeded"

        generation = run_on(backend, first_boot)
        d.terminate()
        d.start()
        run_on(backend, next_boot, generation)

    def test_rebind_stale_binds_once_and_asks_again(self, backend: str, make_daemon) -> None:
        """prepare and invoke with rebind_stale=True pass a restart; without it, placement_stale."""
        d = make_daemon()
        neuron = Neuron.generate()
        set_up(d.env.socket, neuron, ("echo",))
        d.terminate()
        d.start()

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                s = AsyncSession(client, neuron)
                await s.submit("p", "a", "echo", b"1")
                await s.submit("p", "b", "echo", b"2")
                with pytest.raises(PlacementStale):
                    await s.prepare("a")
                assert (await s.get_operation("a")).attempts == ()  # refused before any
                token = (await s.prepare("a", rebind_stale=True)).token
                assert (await s.execute(token)).status == "succeeded"

        run_on(backend, body)
        d.terminate()
        d.start()

        async def invoke_after_restart() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                s = AsyncSession(client, neuron)
                assert (await s.invoke("b", rebind_stale=True)).status == "succeeded"

        run_on(backend, invoke_after_restart)


class TestRetry:
    def test_a_failed_attempt_is_retried_with_a_new_attempt(self, backend: str, make_daemon):
        d = make_daemon(flaky_env())
        neuron = Neuron.generate()
        set_up(d.env.socket, neuron, ("flaky", "nofx"))

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                s = AsyncSession(client, neuron)
                await s.submit("p", "f", "flaky")
                result = await s.invoke("f", retry=Retry(max_attempts=3, **NO_PAUSE))
                assert (result.status, result.attempt) == ("succeeded", 2)
                await s.submit("p", "n", "nofx")
                result = await s.invoke("n", retry=Retry(max_attempts=3, **NO_PAUSE))
                assert (result.status, result.attempt) == ("failed", 3)  # all asks spent
                states = [a.state for a in (await s.get_operation("n")).attempts]
                assert states == ["failed", "failed", "failed"]

        run_on(backend, body)

    def test_unknown_is_never_retried_and_names_the_attempt(self, backend: str, make_daemon):
        """An unknown outcome raises MayHaveRun; a next attempt_unknown is not retried."""
        d = make_daemon()
        neuron = Neuron.generate()
        set_up(d.env.socket, neuron, ("boom",))

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                s = AsyncSession(client, neuron)
                await s.submit("p", "u", "boom")
                with pytest.raises(MayHaveRun) as info:
                    await s.invoke("u", retry=Retry(max_attempts=5, **NO_PAUSE))
                assert (info.value.op, info.value.attempt) == ("u", 1)
                assert "may have run" in str(info.value)
                with pytest.raises(AttemptUnknown):
                    await s.invoke("u", retry=Retry(max_attempts=5, **NO_PAUSE))
                attempts = (await s.get_operation("u")).attempts
                assert [a.state for a in attempts] == ["unknown"]

        run_on(backend, body)

    def test_overloaded_is_retried_until_admitted(self, backend: str, make_daemon) -> None:
        """With max_in_flight = 1 the second request on a busy connection is
        `overloaded`; the retry asks again until the first is answered."""
        d = make_daemon(Env(max_in_flight=1))
        neuron = Neuron.generate()
        set_up(d.env.socket, neuron, ("gated", "echo"))

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                s = AsyncSession(client, neuron)
                await s.submit("p", "g", "gated")
                await s.submit("p", "e", "echo", b"e")
                root = await s.get_neuron()
                fences = {
                    "expected_attempt": 1,
                    "placement_generation": root.placement_generation,
                    "expected_epoch": root.epoch,
                }
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(s.invoke, "g")
                    await wait_until_file(d.env.started_marker("g"))
                    try:
                        with pytest.raises(Overloaded):  # no retry: the refusal itself
                            await s.invoke("e", **fences)
                    finally:
                        d.env.open_gate("g")
                await s.submit("p", "g2", "gated")
                retried = anyio.Event()
                answers: list[Any] = []

                def on_retry(asks: int, answer: Any) -> None:
                    answers.append(answer)
                    retried.set()

                retry = Retry(max_attempts=1000, backoff=0.01, max_backoff=0.05, on_retry=on_retry)
                results: list[Any] = []

                async def invoke_e() -> None:
                    results.append(await s.invoke("e", **fences, retry=retry))

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(s.invoke, "g2")
                    await wait_until_file(d.env.started_marker("g2"))
                    tasks.start_soon(invoke_e)
                    await retried.wait()
                    d.env.open_gate("g2")
                assert all(isinstance(a, Overloaded) for a in answers)
                assert results[0].status == "succeeded" and results[0].attempt == 1

        run_on(backend, body)

    def test_a_lost_answer_is_never_retried(self, backend: str, make_daemon) -> None:
        d = make_daemon()
        neuron = Neuron.generate()
        set_up(d.env.socket, neuron, ("gated",))

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                s = AsyncSession(client, neuron)
                await s.submit("p", "k", "gated")
                lost: list[ConnectionClosed] = []

                async def invoke() -> None:
                    try:
                        await s.invoke("k", retry=Retry(max_attempts=5, **NO_PAUSE))
                    except ConnectionClosed as exc:
                        lost.append(exc)

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(invoke)
                    await wait_until_file(d.env.started_marker("k"))
                    d.kill()
                (exc,) = lost
                assert "may have run" in str(exc) and "op show k" in str(exc)
                # in words: who closed, and which attempt is in doubt
                assert str(exc).startswith(
                    "the daemon closed the connection before answering: op k attempt 1 may "
                    "have run, or may never have started"
                ), str(exc)

        run_on(backend, body)
        d.start()
        with d.connect() as c:
            op = c.call("get_operation", {"neuron": neuron.id, "op": "k"})
        assert [a["state"] for a in op["attempts"]] == ["unknown"]  # one attempt, never re-sent


class TestReconnect:
    """`AsyncClient.connect(..., reconnect=True)` across a real daemon restart."""

    def test_a_service_survives_a_restart_and_never_resends(
        self, backend: str, make_daemon
    ) -> None:
        """The invoke the crash cut off raises ConnectionClosed and is never sent
        again (its attempt stays the one unknown attempt); the next request, on
        the same client, reconnects to the new boot and work goes on."""
        d = make_daemon()
        neuron = Neuron.generate()
        set_up(d.env.socket, neuron, ("gated", "quick"))

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket, reconnect=True) as client:
                s = AsyncSession(client, neuron)
                first_boot = client.hello_result.boot
                await s.submit("p", "k", "gated")
                lost: list[ConnectionClosed] = []

                async def invoke() -> None:
                    try:
                        await s.invoke("k")
                    except ConnectionClosed as exc:
                        lost.append(exc)

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(invoke)
                    await wait_until_file(d.env.started_marker("k"))
                    d.kill()
                assert len(lost) == 1 and "op k attempt 1 may have run" in str(lost[0])
                d.start()
                assert (await s.ensure_placement("w0")).bound is True  # reconnected
                assert client.hello_result.boot == d.boot != first_boot
                await s.submit("p", "next", "quick")
                assert (await s.invoke("next")).status == "succeeded"
                op = await s.get_operation("k")
                assert [a.state for a in op.attempts] == ["unknown"]  # not run again

        run_on(backend, body)
        # `next` ran once; k's attempt, cut off before its gate opened, never ran again
        assert d.env.ledger_lines(d.env.cli_ledger) == [f"{neuron.id}/next/1"]
        with d.connect() as c:
            assert c.call("status", {})["boot"] == d.boot

    def test_a_daemon_that_stays_down_is_unreachable_within_the_bound(
        self, backend: str, make_daemon
    ) -> None:
        """A request after the daemon stopped tries to reconnect for
        `reconnect_within`, then raises DaemonUnreachable; a later one tries
        again and reaches a daemon started meanwhile, as does one made after a
        restart the client never saw (its write finds the old connection closed,
        so it goes out once, on the new one)."""
        d = make_daemon()

        async def body() -> None:
            async with AsyncClient.connect(
                d.env.socket, reconnect=True, reconnect_within=0.3
            ) as client:
                d.kill()
                started = anyio.current_time()
                with pytest.raises(DaemonUnreachable) as info:
                    await client.call("status")
                assert anyio.current_time() - started < 5
                assert info.value.path == str(d.env.socket)
                d.start()
                assert (await client.call("status"))["boot"] == d.boot
                d.kill()
                d.start()
                assert (await client.call("status"))["boot"] == d.boot
                assert client.hello_result.boot == d.boot

        run_on(backend, body)
