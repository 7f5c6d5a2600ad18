"""The async client, on anyio: one connection shared by many tasks, under
asyncio and trio alike (contract §4 pipelining).

Calls from several tasks go out on one connection, each with its own request
id, and replies are matched by id as they arrive, so a long `execute` never
holds up a `status` sent after it. There is no reader task: whichever
waiting call finds nobody reading reads one chunk, hands every complete
reply in it to the call awaiting that id, and lets the others look again
(leader and followers). The client therefore needs no task group, lives as
long as the caller keeps it, and runs the same under ``asyncio.run`` and
``trio.run``. A read cut short by cancellation loses nothing: a socket
receive takes bytes only when it returns them (anyio, trio).
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from types import TracebackType
from typing import Any, Protocol

import anyio
import anyio.lowlevel
import attrs

from ._core import ClientCore, Connected, Reply, _copy_error, result_of
from ._errors import ConnectionClosed, DaemonUnreachable, NotSent
from ._paths import socket_path

__all__ = ["AsyncClient", "deadline", "pause", "timed_out"]

_RECV_SIZE = 1 << 16
#: How long one request frame may take to be written whole once its write
#: began (shielded from cancellation meanwhile) before the connection fails.
WRITE_TIMEOUT_S = 10.0
#: `reconnect=True`: the pause after a failed try doubles from the first to the last.
_RECONNECT_PAUSES = (0.05, 1.0)


class _TrioStream(Protocol):
    """What `over_stream` uses of a ``trio.abc.Stream`` (tests hand it memory streams)."""

    async def send_all(self, data: bytes) -> None: ...
    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray: ...
    async def aclose(self) -> None: ...


Stream = anyio.abc.ByteStream | _TrioStream
"""A byte stream `over_stream` accepts: an anyio one, or a trio one."""


@attrs.define
class _Bytes:
    """One byte stream, anyio's or trio's, as send / receive (``b""``: end of file)."""

    send: Callable[[bytes], Awaitable[None]]
    receive: Callable[[], Awaitable[bytes]]
    aclose: Callable[[], Awaitable[None]]

    @classmethod
    def of(cls, stream: Stream) -> _Bytes:
        if isinstance(stream, anyio.abc.ByteStream):
            anyio_stream = stream

            async def receive() -> bytes:
                try:
                    return await anyio_stream.receive(_RECV_SIZE)
                except anyio.EndOfStream:
                    return b""

            return cls(anyio_stream.send, receive, anyio_stream.aclose)
        trio_stream = stream

        async def receive_some() -> bytes:
            return bytes(await trio_stream.receive_some(_RECV_SIZE))

        return cls(trio_stream.send_all, receive_some, trio_stream.aclose)


@attrs.define(eq=False)
class _Slot:
    """Where one request's reply is left for the call awaiting it."""

    done: bool = False
    reply: Reply | None = None
    error: BaseException | None = None  # why the connection ended before the reply


class AsyncClient(Connected):
    """An async connection to wardd, for asyncio and trio alike (anyio).

    Open one with ``async with AsyncClient.connect(path) as client:`` (or
    ``client = await AsyncClient.connect(path)`` and `aclose` it yourself).
    `call` is safe to use from many tasks at once: requests are multiplexed
    by id and replies are matched by id as they arrive, in any order.

    Cancelling a `call` after its request went out does not unsend it: the
    daemon may apply it, and its reply is dropped when it comes. Nothing is
    ever resent. A call cancelled before its frame began to go out sent
    nothing, and the connection goes on for the other tasks; once a frame
    began, it is written whole, shielded from the cancellation (at most
    `WRITE_TIMEOUT_S`), so one task's cancellation never cuts a frame and
    never fails the connection for the others. Only a write that fails or
    times out does (part of a frame may be out).

    With ``connect(..., reconnect=True)``, a request made after the connection
    was lost (the daemon restarted) first opens a new one; the requests that
    were waiting for answers when it was lost still raise `ConnectionClosed`.
    """

    def __init__(self, stream: Stream, core: ClientCore, path: str) -> None:
        # Use `connect` or `over_stream`; this only wires the parts together.
        self.path = path
        self._reconnect_within: float | None = None  # seconds; None: never reconnect
        self._io = _Bytes.of(stream)
        self._core = core
        self._slots: dict[int, _Slot] = {}
        self._send_lock = anyio.Lock()
        self._reading = False
        self._round = anyio.Event()  # set when the current read ends
        self._closed = False

    @classmethod
    def connect(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        client_name: str = "wardctl",
        nursery: object = None,
        reconnect: bool = False,
        reconnect_within: float = 30.0,
    ) -> _Opening:
        """Connect to the daemon's socket and run `hello` (contract §4).

        Use it as ``async with AsyncClient.connect(path) as client:`` (closed
        at the end of the block) or ``client = await AsyncClient.connect(path)``.
        `path` defaults to ``$WARDD_SOCKET``, else the daemon's default
        socket; a socket that cannot be connected to raises
        `DaemonUnreachable` (nothing was sent). `nursery` is accepted for
        callers of the trio client and not used: this client runs no task of
        its own.

        `reconnect`: once the connection is lost (a daemon restart), the next
        request opens a new one, trying for up to `reconnect_within` seconds
        (pauses doubling from 0.05 s to 1 s) before it raises
        `DaemonUnreachable`. A request that was sent is never sent again: one
        whose answer the lost connection took raises `ConnectionClosed`, and
        only requests made afterwards go out on the new connection (with a
        new boot: see `AsyncSession.ensure_placement`).
        """
        where = os.fspath(path) if path is not None else socket_path()

        async def open_() -> AsyncClient:
            client = await cls._open(where, ClientCore(client_name=client_name))
            if reconnect:
                client._reconnect_within = reconnect_within
            return client

        return _Opening(open_)

    @classmethod
    async def _open(cls, where: str, core: ClientCore) -> AsyncClient:
        try:
            stream = await anyio.connect_unix(where)
        except OSError as exc:
            raise DaemonUnreachable.of(where, exc) from exc
        return await cls._hello(stream, core, where)

    @classmethod
    async def over_stream(
        cls,
        stream: Stream,
        *,
        client_name: str = "wardctl",
        nursery: object = None,
        name: str = "stream",
    ) -> AsyncClient:
        """Like `connect`, over an open anyio or trio byte stream (the client then owns it)."""
        return await cls._hello(stream, ClientCore(client_name=client_name), name)

    @classmethod
    async def _hello(cls, stream: Stream, core: ClientCore, name: str) -> AsyncClient:
        self = cls(stream, core, name)
        try:
            async with self._send_lock:
                rid, data = self._core.hello_request()
                await self._send_frame(rid, data)
            await self.recv(rid)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.aclose()
            raise
        return self

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
            within = None if self._closed else self._reconnect_within
            if within is not None and self._core.failed:
                await self._reopen(within)
            rid, data = self._core.request(method, params)
            try:
                await self._send_frame(rid, data)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                # The write failed: the daemon closed this connection (it stopped)
                # before the frame was whole, so it cannot have applied it. Only
                # with `reconnect` is it written once on a new connection.
                self._slots.pop(rid, None)
                if within is None:
                    raise NotSent(
                        f"the request was not sent: the daemon closed the connection "
                        f"({self.path}) before the frame was whole"
                    ) from exc
                await self._reopen(within)
                rid, data = self._core.request(method, params)
                await self._send_frame(rid, data)
        return rid

    async def _reopen(self, within: float) -> None:
        """Replace the lost connection by a new one (`reconnect=True`), trying
        with a bounded backoff. Nothing of the old connection is sent again:
        its waiting requests were failed when it was lost."""
        with anyio.CancelScope(shield=True):
            await self._io.aclose()
        deadline = anyio.current_time() + within
        pause, longest = _RECONNECT_PAUSES
        while True:
            # the new connection's ids go on from the old one's: no id names two requests
            core = ClientCore(client_name=self._core.client_name, first_id=self._core.next_id)
            try:
                fresh = await AsyncClient._open(self.path, core)
                break
            except DaemonUnreachable as exc:  # not listening (yet)
                why = exc
            except (OSError, ConnectionClosed) as exc:  # accepted, then gone again
                why = DaemonUnreachable(self.path, f"the connection ended during hello ({exc})")
            if anyio.current_time() + pause > deadline:
                raise why
            await anyio.sleep(pause)
            pause = min(pause * 2, longest)
        self._io, self._core = fresh._io, fresh._core

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
            while not slot.done:
                if self._reading:
                    await self._round.wait()
                else:
                    await self._read_once()
        except BaseException:
            if slot.reply is None:
                self._core.abandon(rid)
            self._slots.pop(rid, None)
            raise
        self._slots.pop(rid, None)
        if slot.reply is None:
            if slot.error is not None:
                raise _copy_error(slot.error, in_flight=True)
            raise ConnectionClosed("the connection ended before the daemon answered")
        return slot.reply

    async def _send_frame(self, rid: int, data: bytes) -> None:
        """Write one frame whole, or nothing (callers hold the send lock).

        A cancellation before the first byte sends nothing and leaves the
        connection to the other tasks. Once the write begins it is shielded
        and written whole: a frame cut in the middle would leave the stream
        unusable for every task. Only a write that fails, or takes longer
        than `WRITE_TIMEOUT_S`, fails the connection (part of the frame may
        be out)."""
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except BaseException:
            self._core.abandon(rid, sent=False)  # nothing left: no reply will come
            raise
        self._slots[rid] = _Slot()
        try:
            with anyio.CancelScope(shield=True) as scope:
                scope.deadline = anyio.current_time() + WRITE_TIMEOUT_S
                await self._io.send(data)
        except BaseException as exc:
            self._fail(ConnectionClosed(f"sending to the daemon failed: {exc!r}"))
            raise
        if scope.cancelled_caught:
            error = ConnectionClosed(
                f"sending a request to the daemon took more than {WRITE_TIMEOUT_S:g} s"
            )
            self._fail(error)
            raise error

    async def _read_once(self) -> None:
        """Read one chunk as the leader, hand out its replies, wake the followers."""
        self._reading = True
        io = self._io
        try:
            try:
                data = await io.receive()
                if io is not self._io:  # replaced meanwhile (reconnect): nothing here matters
                    return
            except Exception as exc:  # noqa: BLE001 - closed, broken, reset: the connection is over
                if io is not self._io:
                    return
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
                self._fail(ConnectionClosed(f"the connection to the daemon broke: {why}"))
                return
            self._core.receive_data(data)
            try:
                while (reply := self._core.next_reply()) is not None:
                    assert reply.id is not None
                    slot = self._slots.get(reply.id)
                    if slot is not None:
                        slot.reply, slot.done = reply, True
            except Exception as exc:  # noqa: BLE001 - end of file, a frame the protocol forbids
                self._fail(exc)
        finally:
            self._reading = False
            finished, self._round = self._round, anyio.Event()
            finished.set()

    # -- lifetime -------------------------------------------------------------------
    async def aclose(self) -> None:
        """Close the connection; waiting calls raise `ConnectionClosed`."""
        if not self._closed:
            self._closed = True
            self._fail(ConnectionClosed("the client closed this connection"))
            await self._io.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r}>"

    def _fail(self, error: BaseException) -> None:
        """Fail the connection and wake every waiting call (they raise why)."""
        self._core.fail(error)
        for slot in self._slots.values():
            if not slot.done:
                slot.done, slot.error = True, error
        self._round.set()


async def pause(seconds: float) -> None:
    """Sleep on whichever event loop runs (a retry's backoff in `AsyncSession`)."""
    await anyio.sleep(seconds)


def deadline() -> float:
    """The calling task's effective deadline (its cancel scopes', anyio or trio);
    inf when none. `AsyncSession` reads it before it waits for an answer."""
    return anyio.current_effective_deadline()


def timed_out(exc: BaseException, deadline: float) -> bool:
    """Whether `exc` ended a wait because `deadline`, read before the wait,
    has passed: a cancellation by the caller's timeout (``anyio.fail_after``,
    ``move_on_after``, trio's), not by an explicit ``cancel()`` before it."""
    return isinstance(exc, anyio.get_cancelled_exc_class()) and deadline <= anyio.current_time()


class _Opening:
    """What `AsyncClient.connect` returns: await it, or enter it with ``async with``."""

    def __init__(self, open_: Callable[[], Coroutine[Any, Any, AsyncClient]]) -> None:
        self._open = open_
        self._client: AsyncClient | None = None

    def __await__(self) -> Generator[Any, None, AsyncClient]:
        return self._open().__await__()

    async def __aenter__(self) -> AsyncClient:
        self._client = await self._open()
        return self._client

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        client = self._client
        assert client is not None
        with anyio.CancelScope(shield=True):
            await client.aclose()
