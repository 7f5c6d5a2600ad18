"""The trio client: one connection shared by many tasks (contract §4 pipelining).

Calls from several tasks go out on one connection, each with its own request
id; one reader task reads every reply and hands it to the task waiting for
that id, so a long `execute` never holds up a `status` sent after it. The
reader runs in the nursery given to `connect`, or, without one, as a trio
system task scoped to this client (it ends when the client is closed or the
connection ends, and never raises out of its task).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import attrs
import trio

from ._core import ClientCore, HelloResult, Reply, result_of
from ._errors import ConnectionClosed
from ._paths import socket_path

__all__ = ["TrioClient"]

_RECV_SIZE = 1 << 16


@attrs.define(eq=False)
class _Slot:
    """Where the reader leaves one request's reply for the task awaiting it."""

    done: trio.Event = attrs.Factory(trio.Event)
    reply: Reply | None = None


class TrioClient:
    """An async connection to wardd; `await TrioClient.connect(path)` opens one.

    `call` is safe to use from many tasks at once: requests are multiplexed
    by id and replies are matched by id as they arrive, in any order.
    Cancelling a `call` after its request went out does not unsend it: the
    daemon may apply it, and its reply is dropped when it comes. Cancelling a
    task in the middle of writing a frame leaves the stream unusable, so the
    connection is then failed for everyone (nothing is ever resent).
    """

    def __init__(self, stream: trio.abc.Stream, core: ClientCore, path: str) -> None:
        # Use `connect`; this only wires the parts together.
        self.path = path
        self._stream = stream
        self._core = core
        self._slots: dict[int, _Slot] = {}
        self._send_lock = trio.Lock()
        self._reader_scope = trio.CancelScope()
        self._reader_done = trio.Event()
        self._closed = False

    @classmethod
    async def connect(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        client_name: str = "wardctl",
        nursery: trio.Nursery | None = None,
    ) -> TrioClient:
        """Connect to the daemon's socket, run `hello` (contract §4), return a ready client.

        `path` defaults to ``$WARDD_SOCKET``, else the daemon's default socket.
        With `nursery`, the reader task runs there; otherwise it is a system
        task that lives until `aclose` or the end of the connection.
        """
        where = os.fspath(path) if path is not None else socket_path()
        stream = await trio.open_unix_socket(where)
        return await cls.over_stream(stream, client_name=client_name, nursery=nursery, name=where)

    @classmethod
    async def over_stream(
        cls,
        stream: trio.abc.Stream,
        *,
        client_name: str = "wardctl",
        nursery: trio.Nursery | None = None,
        name: str = "stream",
    ) -> TrioClient:
        """Like `connect`, over an already open stream (which the client then owns)."""
        self = cls(stream, ClientCore(client_name=client_name), name)
        if nursery is not None:
            nursery.start_soon(self._read_loop, name=f"wardd reader {name}")
        else:
            trio.lowlevel.spawn_system_task(self._read_loop, name=f"wardd reader {name}")
        try:
            async with self._send_lock:
                rid, data = self._core.hello_request()
                await self._send_frame(rid, data)
            await self.recv(rid)
        except BaseException:
            with trio.CancelScope(shield=True):
                await self.aclose()
            raise
        return self

    # -- properties -----------------------------------------------------------------
    @property
    def hello_result(self) -> HelloResult:
        """The daemon's `hello` reply: protocol, daemon, boot, network, max_frame."""
        hello = self._core.hello_result
        assert hello is not None  # set by connect
        return hello

    @property
    def network(self) -> str:
        """The daemon's network (what signatures on this connection must name)."""
        return self.hello_result.network

    # -- requests -------------------------------------------------------------------
    async def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Send one request and return its result (or raise its error)."""
        return result_of(await self.call_reply(method, params))

    async def call_reply(self, method: str, params: Mapping[str, Any] | None = None) -> Reply:
        """Send one request and return its reply unopened (`Response` or `ErrorReply`)."""
        return await self.recv_reply(await self.send(method, params))

    async def send(self, method: str, params: Mapping[str, Any] | None = None) -> int:
        """Send one request without waiting for its reply; returns its id for `recv`."""
        async with self._send_lock:
            rid, data = self._core.request(method, params)
            await self._send_frame(rid, data)
        return rid

    async def recv(self, rid: int) -> Any:
        """Wait for the reply to request `rid`; return its result or raise its error."""
        return result_of(await self.recv_reply(rid))

    async def recv_reply(self, rid: int) -> Reply:
        """Wait for the reply to request `rid` and return it unopened.

        If this wait is cancelled before the reply came, the request is
        abandoned: its reply is dropped when it arrives.
        """
        slot = self._slots.get(rid)
        if slot is None:
            raise KeyError(f"no request {rid} is awaited on this connection")
        try:
            await slot.done.wait()
        except BaseException:
            if slot.reply is None:
                self._core.abandon(rid)
            self._slots.pop(rid, None)
            raise
        self._slots.pop(rid, None)
        if slot.reply is None:
            self._core.raise_if_failed()
            raise ConnectionClosed("the connection ended before the daemon answered")
        return slot.reply

    async def _send_frame(self, rid: int, data: bytes) -> None:
        # Callers hold the send lock: trio streams take one writer at a time.
        self._slots[rid] = _Slot()
        try:
            await self._stream.send_all(data)
        except BaseException as exc:
            # Part of the frame may be out (trio: a cancelled send_all leaves
            # the stream in an unknown state), so the whole connection fails.
            self._fail(ConnectionClosed(f"sending to the daemon was interrupted: {exc!r}"))
            raise

    # -- lifetime -------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the connection; waiting calls raise `ConnectionClosed`."""
        if not self._closed:
            self._closed = True
            self._fail(ConnectionClosed("the client closed this connection"))
            self._reader_scope.cancel()
            await self._stream.aclose()
        await self._reader_done.wait()

    async def __aenter__(self) -> TrioClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<TrioClient {self.path!r}>"

    # -- the reader -----------------------------------------------------------------
    async def _read_loop(self) -> None:
        try:
            with self._reader_scope:
                await self._read_replies()
        except Exception as exc:  # never let the reader's task die loudly
            self._fail(exc)
        finally:
            self._fail(ConnectionClosed("the connection's reader stopped"))
            self._reader_done.set()

    async def _read_replies(self) -> None:
        while True:
            try:
                data = await self._stream.receive_some(_RECV_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                raise ConnectionClosed(f"receiving from the daemon failed: {exc!r}") from exc
            self._core.receive_data(bytes(data))
            while (reply := self._core.next_reply()) is not None:
                assert reply.id is not None
                slot = self._slots.get(reply.id)
                if slot is not None:
                    slot.reply = reply
                    slot.done.set()

    def _fail(self, error: BaseException) -> None:
        """Fail the connection and wake every waiting call (they raise why)."""
        self._core.fail(error)
        for slot in self._slots.values():
            slot.done.set()
