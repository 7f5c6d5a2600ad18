"""wardd.client's connections without a daemon: the blocking ``Client``
against a peer thread scripted by the test on a real Unix socket, the
async client (``TrioClient``) against a trio memory stream whose far end
the test plays, the default paths, and a daemon that cannot be reached.
The tests in tests/daemon/ drive the clients against a real daemon process."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.unit._client_peer import (
    HELLO,
    NETWORK,
    MemoryPeer,
    answer_next,
    answer_peer_hello,
    err,
    ok,
    trio_pair,
)
from wardd.client import AsyncClient, Client, ConnectionClosed, DaemonUnreachable, TrioClient
from wardd.protocol import EpochMismatch, FrameDecoder, WarddError

Script = Callable[[socket.socket, FrameDecoder], None]


def read_request(conn: socket.socket, decoder: FrameDecoder) -> dict[str, Any]:
    while True:
        item = decoder.next_item()
        if isinstance(item, dict):
            return item
        data = conn.recv(65536)
        if not data:
            raise EOFError
        decoder.feed(data)


def answer_hello(conn: socket.socket, decoder: FrameDecoder) -> None:
    hello = read_request(conn, decoder)
    assert hello["method"] == "hello" and hello["params"]["protocol"] == 1
    conn.sendall(ok(hello["id"], HELLO))


@pytest.fixture
def peer(short_dir: Path) -> Iterator[Callable[[Script], str]]:
    """`peer(script)` → a socket path where one connection is served by `script`."""
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []
    listeners: list[socket.socket] = []

    def start(script: Script) -> str:
        path = str(short_dir / f"s{len(listeners)}")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listeners.append(listener)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # the test ended before it connected
            with conn:
                decoder = FrameDecoder()
                try:
                    answer_hello(conn, decoder)
                    script(conn, decoder)
                except BaseException as exc:  # noqa: BLE001 - reported by the fixture
                    errors.append(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        threads.append(thread)
        return path

    try:
        yield start
    finally:
        for listener in listeners:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)  # wakes a serve() still in accept()
            listener.close()
        for thread in threads:
            thread.join(5)
    assert not errors, errors


class TestBlockingClient:
    def test_connect_runs_hello_and_exposes_its_result(self, peer) -> None:
        """A new Client has done hello; hello_result carries boot, network and max_frame."""
        path = peer(lambda conn, dec: None)
        with Client(path, timeout=5, client_name="t") as client:
            assert client.hello_result.boot == "b" * 32
            assert client.network == NETWORK
            assert client.hello_result.max_frame == 1 << 20

    def test_pipelined_requests_get_their_own_replies_out_of_order(self, peer) -> None:
        """send/recv by id: replies arriving in reverse order still reach their requests."""

        def script(conn: socket.socket, dec: FrameDecoder) -> None:
            first, second = read_request(conn, dec), read_request(conn, dec)
            conn.sendall(ok(second["id"], second["method"]) + err(first["id"], "epoch_mismatch"))

        with Client(peer(script), timeout=5) as client:
            a = client.send("invoke", {"op": "o"})
            b = client.send("status")
            assert client.recv(b) == "status"
            with pytest.raises(EpochMismatch):
                client.recv(a)

    def test_the_daemon_closing_raises_connection_closed(self, peer) -> None:
        """EOF under a waiting call is ConnectionClosed."""

        def script(conn: socket.socket, dec: FrameDecoder) -> None:
            read_request(conn, dec)

        with Client(peer(script), timeout=5) as client, pytest.raises(ConnectionClosed):
            client.call("status")

    def test_a_timeout_leaves_the_request_outstanding(self, peer) -> None:
        """A timed-out recv raises TimeoutError; the reply can still be received afterwards."""
        go = threading.Event()

        def script(conn: socket.socket, dec: FrameDecoder) -> None:
            req = read_request(conn, dec)
            go.wait(5)
            conn.sendall(ok(req["id"], "late"))

        with Client(peer(script), timeout=5) as client:  # hello is answered at once
            client.timeout = 0.05  # only the recv that must time out is this short
            rid = client.send("status")
            with pytest.raises(TimeoutError):
                client.recv(rid)
            go.set()
            client.timeout = 5
            assert client.recv(rid) == "late"

    def test_connecting_to_nothing_raises_oserror(self, short_dir: Path) -> None:
        """No daemon at the path: the OS error, not a hang."""
        with pytest.raises(OSError):
            Client(str(short_dir / "none"), timeout=1)


class TestTrioClient:
    async def test_concurrent_calls_are_multiplexed_by_id(self, nursery: trio.Nursery) -> None:
        """Calls from several tasks share one connection; replies out of order reach each."""
        client, peer = await trio_pair(nursery)
        results: dict[str, Any] = {}

        async def call(name: str) -> None:
            try:
                results[name] = await client.call("get_operation", {"op": name})
            except WarddError as exc:
                results[name] = exc.code

        async with trio.open_nursery() as callers:
            for name in ("a", "b", "c"):
                callers.start_soon(call, name)
            reqs = [await peer.request() for _ in range(3)]
            by_op = {r["params"]["op"]: r["id"] for r in reqs}
            await peer.send(ok(by_op["c"], "C"))
            await trio.testing.wait_all_tasks_blocked()
            assert results == {"c": "C"}
            await peer.send(err(by_op["a"], "unknown_operation") + ok(by_op["b"], "B"))
        assert results == {"a": "unknown_operation", "b": "B", "c": "C"}
        assert client.hello_result.network == NETWORK
        await client.aclose()

    async def test_a_cancelled_call_does_not_disturb_the_others(
        self, nursery: trio.Nursery
    ) -> None:
        """Cancelling a waiting call abandons it; its late reply is dropped, others proceed."""
        client, peer = await trio_pair(nursery)
        async with trio.open_nursery() as callers:
            callers.start_soon(client.call, "invoke", {"op": "slow"})
            slow = await peer.request()
            await trio.testing.wait_all_tasks_blocked()
            callers.cancel_scope.cancel()
        await peer.send(ok(slow["id"], "late"))
        await trio.testing.wait_all_tasks_blocked()  # the reader drops it

        async def answer_next() -> None:
            req = await peer.request()
            await peer.send(ok(req["id"], "fresh"))

        nursery.start_soon(answer_next)
        assert await client.call("status") == "fresh"
        await client.aclose()

    async def test_a_task_cancelled_while_its_frame_goes_out_cuts_nothing(
        self, nursery: trio.Nursery
    ) -> None:
        """A frame whose write began is written whole though its task is cancelled
        (shielded); a task cancelled while it waits its turn sends nothing; the
        connection goes on for the others and no reply is lost."""
        client_side, daemon_side = trio.testing.lockstep_stream_pair()
        peer = MemoryPeer(daemon_side)
        nursery.start_soon(answer_peer_hello, peer)
        client = await TrioClient.over_stream(client_side)
        big = {"pad": b"x" * 200_000}  # more than one read of the peer's: the write waits
        writer, waiter = trio.CancelScope(), trio.CancelScope()
        answers: dict[str, Any] = {}

        async def call(name: str, params: dict[str, Any], scope: trio.CancelScope) -> None:
            with scope:
                answers[name] = await client.call("status", params)

        async with trio.open_nursery() as callers:
            callers.start_soon(call, "writer", big, writer)
            await trio.testing.wait_all_tasks_blocked()  # its write waits for the peer
            callers.start_soon(call, "waiter", {"w": 1}, waiter)
            callers.start_soon(call, "other", {"o": 1}, trio.CancelScope())
            await trio.testing.wait_all_tasks_blocked()
            chunk = await peer.stream.receive_some(65536)  # the write has begun
            assert chunk and len(chunk) < 200_000
            peer.decoder.feed(chunk)
            writer.cancel()
            waiter.cancel()
            first = await peer.request()  # the rest of the writer's frame comes whole
            assert first["params"] == big
            second = await peer.request()
            assert second["params"] == {"o": 1}  # the waiter's never went out
            await peer.send(ok(first["id"], "dropped") + ok(second["id"], "pong"))
        assert answers == {"other": "pong"}
        nursery.start_soon(answer_next, peer, "fresh")
        assert await client.call("status") == "fresh"
        await client.aclose()

    async def test_the_daemon_closing_fails_waiting_calls(self, nursery: trio.Nursery) -> None:
        """EOF under waiting calls raises ConnectionClosed in each of them."""
        client, peer = await trio_pair(nursery)
        failures: list[BaseException] = []

        async def call() -> None:
            try:
                await client.call("status")
            except ConnectionClosed as exc:
                failures.append(exc)

        async with trio.open_nursery() as callers:
            callers.start_soon(call)
            callers.start_soon(call)
            await peer.request()
            await peer.request()
            await peer.stream.aclose()
        assert len(failures) == 2
        with pytest.raises(ConnectionClosed):
            await client.call("status")
        await client.aclose()

    async def test_aclose_fails_waiting_calls(self, nursery: trio.Nursery) -> None:
        """Closing the client wakes waiting calls with ConnectionClosed."""
        client, peer = await trio_pair(nursery)
        failures: list[BaseException] = []

        async def call() -> None:
            with pytest.raises(ConnectionClosed) as info:
                await client.call("status")
            failures.append(info.value)

        async with trio.open_nursery() as callers:
            callers.start_soon(call)
            await peer.request()
            await client.aclose()
        assert len(failures) == 1

    async def test_a_client_needs_no_nursery(self) -> None:
        """`over_stream` without a nursery serves calls: the client runs no task of its own."""
        client_side, daemon_side = trio.testing.memory_stream_pair()
        peer = MemoryPeer(daemon_side)
        async with trio.open_nursery() as nursery:

            async def daemon() -> None:
                for answer in (HELLO, "pong"):
                    req = await peer.request()
                    await peer.send(ok(req["id"], answer))

            nursery.start_soon(daemon)
            async with await TrioClient.over_stream(client_side) as client:
                assert await client.call("status") == "pong"


class TestDefaultPaths:
    def test_socket_defaults_follow_the_daemon(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """$XDG_RUNTIME_DIR/wardd/wardd.sock, else the daemon's /tmp/wardd-<uid> fallback."""
        from wardd.client import default_socket_path

        monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/7")
        assert default_socket_path() == "/run/user/7/wardd/wardd.sock"
        monkeypatch.delenv("XDG_RUNTIME_DIR")
        assert default_socket_path() == f"/tmp/wardd-{os.getuid()}/wardd/wardd.sock"

    def test_wardd_socket_overrides_for_clients(
        self, monkeypatch: pytest.MonkeyPatch, short_dir: Path
    ) -> None:
        """Client() with no path connects to $WARDD_SOCKET."""
        monkeypatch.setenv("WARDD_SOCKET", str(short_dir / "nothing-here"))
        with pytest.raises(DaemonUnreachable) as info:
            Client(timeout=1)
        assert info.value.path == str(short_dir / "nothing-here")


class TestDaemonUnreachable:
    """Connecting where no daemon listens raises the library's own error, with the
    socket path, the system's reason and what to check; nothing is sent."""

    def expect(self, error: DaemonUnreachable, path: Path, reason: str) -> None:
        assert (error.path, error.reason) == (str(path), reason)
        assert str(error).startswith(f"cannot reach wardd at {path}: {reason}. ")
        assert "Is the daemon running" in str(error) and "$WARDD_SOCKET" in str(error)
        assert isinstance(error, ConnectionError)  # code catching OSError still does

    def test_no_socket_file(self, short_dir: Path) -> None:
        with pytest.raises(DaemonUnreachable) as info:
            Client(short_dir / "none.sock", timeout=1)
        self.expect(info.value, short_dir / "none.sock", "No such file or directory")

    def test_a_socket_nobody_listens_on(self, short_dir: Path) -> None:
        path = short_dir / "dead.sock"
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(path))  # bound, never listening: what a dead daemon leaves
        with pytest.raises(DaemonUnreachable) as info:
            Client(path, timeout=1)
        self.expect(info.value, path, "Connection refused")

    @pytest.mark.parametrize("backend", ["asyncio", "trio"])
    def test_the_async_client_raises_it_too(self, short_dir: Path, backend: str) -> None:
        import anyio

        async def main() -> None:
            await AsyncClient.connect(short_dir / "none.sock")

        with pytest.raises(DaemonUnreachable) as info:
            anyio.run(main, backend=backend)
        self.expect(info.value, short_dir / "none.sock", "No such file or directory")

    def test_key_default_is_under_xdg_config_home(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """$XDG_CONFIG_HOME/wardd/neuron.key, else ~/.config/wardd/neuron.key."""
        from wardd.client import default_key_path

        monkeypatch.setenv("XDG_CONFIG_HOME", "/cfg")
        assert default_key_path() == "/cfg/wardd/neuron.key"
        monkeypatch.delenv("XDG_CONFIG_HOME")
        monkeypatch.setenv("HOME", "/home/u")
        assert default_key_path() == "/home/u/.config/wardd/neuron.key"
