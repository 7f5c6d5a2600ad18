"""AsyncClient and AsyncSession against a real daemon, each test once under
asyncio and once under trio (the same classes, anyio underneath)."""

from __future__ import annotations

import anyio
import pytest

from tests._poll import wait_until, wait_until_file
from tests.daemon.backends import backend, run_on
from wardd.client import (
    AsyncClient,
    AsyncSession,
    ConnectionClosed,
    DispatchTimedOut,
    MayHaveRun,
    Neuron,
    TrioClient,
    TrioSession,
)
from wardd.protocol import TokenInvalid

__all__ = ["backend"]  # the fixture, used by name


async def ready_session(client: AsyncClient, acts: tuple[str, ...]) -> AsyncSession:
    """A registered neuron with prog `p` granted `acts` and bound to w0."""
    session = AsyncSession(client, Neuron.generate())
    await session.register()
    await session.create_prog("p", 100)
    await session.grant("p", acts)
    await session.bind("w0")
    return session


async def ended(session: AsyncSession, op: str) -> bool:
    """``op``'s attempt is no longer running (its gated call ended on its own)."""
    return (await session.get_operation(op)).state != "running"


class TestAsyncSession:
    def test_the_old_trio_names_are_the_same_classes(self) -> None:
        assert TrioClient is AsyncClient and TrioSession is AsyncSession

    def test_submit_invoke_consume(self, backend: str, make_daemon) -> None:
        """The whole way of an op, with the reads beside it."""
        d = make_daemon()

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                session = await ready_session(client, ("echo",))
                assert (await session.submit("p", "op-1", "echo", b"hi")).state == "pending"
                invoked = await session.invoke("op-1")
                assert (invoked.status, invoked.result) == ("succeeded", b"hi")
                assert (await session.consume("op-1")).result.value == b"hi"
                op = await session.get_operation("op-1")
                assert op.state == "consumed" and len(op.attempts) == 1
                assert [o.op for o in await session.list_operations()] == ["op-1"]
                kinds = [r.kind for r in await session.history("op-1")]
                assert kinds[0] == "submitted" and "consumed" in kinds
                assert (await session.status()).boot == d.boot
                assert [w.worker for w in await session.workers()] == ["w0", "w1"]

        run_on(backend, body)

    def test_an_awaited_connect_is_a_client_to_close(self, backend: str, make_daemon) -> None:
        d = make_daemon()

        async def body() -> None:
            client = await AsyncClient.connect(d.env.socket)
            try:
                assert client.hello_result.boot == d.boot
            finally:
                await client.aclose()
            with pytest.raises(ConnectionClosed):
                await client.call("status")

        run_on(backend, body)

    def test_many_tasks_share_one_connection(self, backend: str, make_daemon) -> None:
        """A long invoke does not hold up calls from other tasks on the same client."""
        d = make_daemon()

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                session = await ready_session(client, ("gated", "echo"))
                await session.submit("p", "slow", "gated")
                results: dict[str, object] = {}

                async def slow() -> None:
                    results["slow"] = (await session.invoke("slow")).status

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(slow)
                    await wait_until_file(d.env.started_marker("slow"))
                    for i in range(5):  # answered while the invoke still waits
                        await session.submit("p", f"later-{i}", "echo", b"x")
                        assert (await session.get_operation("slow")).state == "running"
                        assert (await session.status()).boot == d.boot
                    assert "slow" not in results
                    d.env.open_gate("slow")
                assert results == {"slow": "succeeded"}

        run_on(backend, body)

    def test_a_token_is_bound_to_the_connection_that_prepared_it(
        self, backend: str, make_daemon
    ) -> None:
        d = make_daemon()

        async def body() -> None:
            async with (
                AsyncClient.connect(d.env.socket) as first,
                AsyncClient.connect(d.env.socket) as second,
            ):
                session = await ready_session(first, ("echo",))
                await session.submit("p", "op", "echo", b"t")
                token = (await session.prepare("op")).token
                with pytest.raises(TokenInvalid):
                    await AsyncSession(second, session.neuron).execute(token)
                assert (await session.execute(token)).status == "succeeded"

        run_on(backend, body)

    def test_a_cancelled_invoke_is_not_resent_and_says_it_may_have_run(
        self, backend: str, make_daemon
    ) -> None:
        """Cancelling the wait leaves the attempt to the daemon; the exception says so,
        and the connection goes on serving."""
        d = make_daemon()

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                session = await ready_session(client, ("gated",))
                await session.submit("p", "op-c", "gated")
                caught: list[BaseException] = []
                with anyio.CancelScope() as scope:

                    async def invoke() -> None:
                        try:
                            await session.invoke("op-c")
                        except BaseException as exc:
                            caught.append(exc)
                            raise

                    async with anyio.create_task_group() as tasks:
                        tasks.start_soon(invoke)
                        await wait_until_file(d.env.started_marker("op-c"))
                        scope.cancel()
                (cancelled,) = caught
                assert isinstance(cancelled, anyio.get_cancelled_exc_class())
                notes = "\n".join(getattr(cancelled, "__notes__", []))
                assert "may have run" in notes and "op-c" in notes
                assert (await session.get_operation("op-c")).state == "running"
                d.env.open_gate("op-c")
                await wait_until(lambda: ended(session, "op-c"), what="op-c's gated call to end")
                op = await session.get_operation("op-c")
                assert op.state == "retained" and len(op.attempts) == 1

        run_on(backend, body)

    def test_a_daemon_killed_under_an_invoke_says_the_attempt_may_have_run(
        self, backend: str, make_daemon
    ) -> None:
        d = make_daemon()

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                session = await ready_session(client, ("gated",))
                await session.submit("p", "op-k", "gated")
                async with anyio.create_task_group() as tasks:
                    failed: list[ConnectionClosed] = []

                    async def invoke() -> None:
                        try:
                            await session.invoke("op-k")
                        except ConnectionClosed as exc:
                            failed.append(exc)

                    tasks.start_soon(invoke)
                    await wait_until_file(d.env.started_marker("op-k"))
                    d.kill()
                (exc,) = failed
                assert "may have run" in str(exc) and "wardctl op show op-k" in str(exc)

        run_on(backend, body)


class TestTimeouts:
    @pytest.mark.parametrize("scope", ["fail_after", "move_on_after"])
    def test_a_timeout_around_an_invoke_names_the_attempt_that_may_have_run(
        self, backend: str, scope: str, make_daemon
    ) -> None:
        """The caller's deadline passes while a slow act runs: the caller gets
        DispatchTimedOut, a TimeoutError and a MayHaveRun naming the op and attempt
        (not a bare TimeoutError, not a silent move on); the attempt runs on, once."""
        d = make_daemon()

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                session = await ready_session(client, ("gated",))
                await session.submit("p", "op-t", "gated")
                root = await session.get_neuron()
                fences = {
                    "expected_attempt": 1,
                    "placement_generation": root.placement_generation,
                    "expected_epoch": root.epoch,
                }
                with pytest.raises(DispatchTimedOut) as info:  # only the invoke is timed
                    with getattr(anyio, scope)(3.0):
                        await session.invoke("op-t", **fences)
                timed_out = info.value
                assert isinstance(timed_out, TimeoutError) and isinstance(timed_out, MayHaveRun)
                assert (timed_out.op, timed_out.attempt, timed_out.method) == ("op-t", 1, "invoke")
                assert "attempt 1 of op op-t may have run" in str(timed_out)
                assert "wardctl op show op-t" in str(timed_out)
                await wait_until_file(d.env.started_marker("op-t"))  # it was sent: it runs
                assert (await session.get_operation("op-t")).state == "running"
                d.env.open_gate("op-t")
                await wait_until(lambda: ended(session, "op-t"), what="op-t's gated call to end")
                op = await session.get_operation("op-t")
                assert op.state == "retained" and len(op.attempts) == 1
                assert await client.call("status", {})  # the connection goes on

        run_on(backend, body)

    def test_a_timeout_around_a_read_is_the_loops_own(self, backend: str, make_daemon) -> None:
        """Nothing is in doubt for a read: fail_after raises its plain TimeoutError."""
        d = make_daemon()

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                session = await ready_session(client, ("echo",))
                with pytest.raises(TimeoutError) as info:
                    with anyio.fail_after(0):
                        await session.status()
                assert not isinstance(info.value, MayHaveRun)

        run_on(backend, body)


class TestCancellationOnASharedConnection:
    def test_tasks_cancelled_while_sending_leave_the_connection_to_the_others(
        self, backend: str, make_daemon
    ) -> None:
        """Rounds of 40 tasks submit 58 KiB requests on one connection, and 30 of
        each round are cancelled while the frames go out (the daemon decodes each
        on a thread meanwhile, so writes wait for room): the other 10 are all
        answered, the connection stays usable, and each op a cancelled task left
        is whole (its frame went out whole or not at all)."""
        d = make_daemon()
        args = bytes(range(256)) * 234  # 58.5 KiB: under the args bound

        async def round_of(session: AsyncSession, n: int) -> set[str]:
            scopes = [anyio.CancelScope() for _ in range(40)]
            answered: dict[int, object] = {}
            some_answered = anyio.Event()

            async def submit(i: int) -> None:
                with scopes[i]:
                    submitted = await session.submit("p", f"op-{n}-{i}", "echo", args)
                    answered[i] = submitted.state
                    if len(answered) >= 3:
                        some_answered.set()

            async with anyio.create_task_group() as tasks:
                for i in range(40):
                    tasks.start_soon(submit, i)
                await some_answered.wait()
                for i in range(40):
                    if i % 4:
                        scopes[i].cancel()
            kept = range(0, 40, 4)
            assert {i: answered.get(i) for i in kept} == dict.fromkeys(kept, "pending")
            return {f"op-{n}-{i}" for i in kept}

        async def body() -> None:
            async with AsyncClient.connect(d.env.socket) as client:
                session = await ready_session(client, ("echo",))
                kept = set()
                for n in range(3):
                    kept |= await round_of(session, n)
                assert (await session.status()).boot == d.boot
                listed = {o.op for o in await session.list_operations()}
                assert kept <= listed
                for op in listed:
                    assert (await session.get_operation(op)).args == args

        run_on(backend, body)
