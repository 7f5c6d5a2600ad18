"""The blocking client: one Unix-socket connection, one thread (contract §4)."""

from __future__ import annotations

import math
import os
import socket
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from ._core import ClientCore, Connected, Reply, result_of
from ._errors import ConnectionClosed, DaemonUnreachable, NotSent
from ._paths import socket_path

__all__ = ["Client", "deadline", "pause", "timed_out"]

_RECV_SIZE = 1 << 16


def pause(seconds: float) -> None:
    """Sleep (a retry's backoff in the blocking `Session`)."""
    time.sleep(seconds)


def deadline() -> float:
    """No deadline of the caller's: the blocking `Client` bounds each wait itself."""
    return math.inf


def timed_out(exc: BaseException, deadline: float) -> bool:
    """Whether `exc` ended a wait for an answer because the `Client`'s socket
    timeout passed (`deadline` is the async twin's; unused here)."""
    return isinstance(exc, TimeoutError)


class Client(Connected):
    """A blocking connection to wardd over its Unix socket.

    Connecting sends `hello` (contract §4) and waits for its reply, so a new
    `Client` is ready for calls and `hello_result` is set. `call` sends one
    request and returns its result, raising the `wardd.protocol.WarddError`
    subclass of the daemon's error code. For pipelining, `send` several
    requests and `recv` their replies by id, in any order: replies that come
    first for other ids are kept until asked for.

    `path` defaults to ``$WARDD_SOCKET``, else the daemon's default socket;
    a socket that cannot be connected to raises `DaemonUnreachable`.
    `timeout` bounds each socket operation (None: wait indefinitely). A
    timeout while waiting for a reply raises `TimeoutError` and leaves the
    request outstanding (`recv` it again later); the daemon may well apply
    it meanwhile. Nothing is ever resent. Not thread-safe: use one `Client`
    per thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        timeout: float | None = 30.0,
        client_name: str = "wardctl",
    ) -> None:
        self.path = os.fspath(path) if path is not None else socket_path()
        self._core = ClientCore(client_name=client_name)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            try:
                self._sock.connect(self.path)
            except OSError as exc:
                raise DaemonUnreachable.of(self.path, exc) from exc
            rid, data = self._core.hello_request()
            self._send_bytes(data)
            self.recv(rid)
        except BaseException:
            self._sock.close()
            raise

    @property
    def timeout(self) -> float | None:
        """The per-operation socket timeout in seconds (None: none)."""
        return self._sock.gettimeout()

    @timeout.setter
    def timeout(self, value: float | None) -> None:
        self._sock.settimeout(value)

    # -- requests -------------------------------------------------------------------
    def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Send one request and return its result (or raise its error)."""
        return self.recv(self.send(method, params))

    def send(self, method: str, params: Mapping[str, Any] | None = None) -> int:
        """Send one request without waiting; returns its id for `recv`."""
        rid, data = self._core.request(method, params)
        self._send_bytes(data)
        return rid

    def recv(self, rid: int) -> Any:
        """Wait for the reply to request `rid`; return its result or raise its error."""
        return result_of(self.recv_reply(rid))

    def recv_reply(self, rid: int) -> Reply:
        """Wait for the reply to request `rid` and return it unopened.

        Returns a `wardd.protocol.Response` or `ErrorReply`; other replies
        that arrive meanwhile are kept for their own `recv`.
        """
        while True:
            reply = self._core.take(rid)
            if reply is not None:
                return reply
            self._receive()

    def abandon(self, rid: int) -> None:
        """Give up on request `rid`: its reply, when it comes, is dropped."""
        self._core.abandon(rid)

    # -- lifetime -------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection. Outstanding requests lose their replies."""
        self._core.close()
        self._sock.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Client {self.path!r}>"

    # -- I/O ----------------------------------------------------------------------------
    def _send_bytes(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:
            # Part of a frame may be out: the stream can no longer be trusted
            # (this includes a timeout in the middle of sendall). The frame is
            # not whole, so the daemon cannot have read it: nothing was sent.
            self._core.fail(ConnectionClosed(f"sending to the daemon failed: {exc}"))
            raise NotSent(f"the request was not sent: sending to the daemon failed: {exc}") from exc

    def _receive(self) -> None:
        try:
            data = self._sock.recv(_RECV_SIZE)
        except TimeoutError:
            raise TimeoutError("timed out waiting for the daemon's reply") from None
        except OSError as exc:
            error = ConnectionClosed(f"the connection to the daemon broke: {exc.strerror or exc}")
            self._core.fail(error)
            raise error from exc
        self._core.receive_data(data)
