"""The sans-IO heart of both clients (contract §4), h11-shaped.

`ClientCore` never touches a socket: a driver asks it for the bytes of a
request (`hello_request`, `request`), hands it whatever the socket produced
(`receive_data`, ``b""`` for end of file) and asks for replies back
(`next_reply` in arrival order, or `take` for one request id, keeping the
others). Framing, CBOR and the reply shape are `wardd.protocol`'s
(`FrameDecoder`, `encode_frame`, `parse_reply`); what the core adds is the
bookkeeping of one connection:

- request ids are allocated here, from 1, and every reply must answer an id
  that is outstanding: replies may come out of order (pipelining), but a
  reply to nothing, or a second reply to one id, is a `RemoteProtocolError`;
- `hello` must be the first request; its reply fixes the connection's
  network, boot and `max_frame`, which bounds the frames we send afterwards;
- a reply without an id (``bad_frame``, or a ``protocol_error`` about a
  frame whose id could not be read) concerns the connection as a whole: the
  core fails, and every later use raises an error naming why;
- a request the caller gave up on (`abandon`) still gets its reply from the
  daemon, which is then dropped silently.

The core never resends anything (contract §4: a client never resends a signed
request after sending a later one that depends on its outcome).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

import attrs

from wardd.protocol import (
    DEFAULT_MAX_FRAME,
    NEED_DATA,
    PROTOCOL_VERSION,
    ErrorReply,
    FrameDecoder,
    Response,
    WarddError,
    encode_frame,
    encode_item,
    error_for,
    parse_reply,
)

from ._errors import ConnectionClosed, FrameTooLarge, NotSent, RemoteProtocolError

__all__ = ["ClientCore", "Connected", "HelloResult", "Reply", "result_of"]

Reply: TypeAlias = Response | ErrorReply


@attrs.frozen
class HelloResult:
    """What the daemon said about itself in its `hello` reply (contract §4)."""

    protocol: int
    daemon: str
    boot: str
    network: str
    max_frame: int

    @classmethod
    def from_wire(cls, result: Any) -> HelloResult:
        """Validate a `hello` result; a malformed one is a `RemoteProtocolError`."""
        if not isinstance(result, Mapping):
            raise RemoteProtocolError("the hello reply is not a map")
        fields = {
            "protocol": int,
            "boot": str,
            "network": str,
            "max_frame": int,
        }
        for name, kind in fields.items():
            value = result.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise RemoteProtocolError(f"the hello reply has no valid {name!r}")
        if result["protocol"] != PROTOCOL_VERSION:
            raise RemoteProtocolError(
                f"the daemon speaks protocol {result['protocol']}, not {PROTOCOL_VERSION}"
            )
        if result["max_frame"] < 1:
            raise RemoteProtocolError("the hello reply has no valid 'max_frame'")
        daemon = result.get("daemon")
        return cls(
            protocol=result["protocol"],
            daemon=daemon if isinstance(daemon, str) else "",
            boot=result["boot"],
            network=result["network"],
            max_frame=result["max_frame"],
        )


def result_of(reply: Reply) -> Any:
    """The result a reply carries, or raise the `WarddError` subclass of its code."""
    if isinstance(reply, ErrorReply):
        raise reply.error
    return reply.result


def _copy_error(error: BaseException, *, in_flight: bool = False) -> BaseException:
    """A fresh exception equal to `error`, so that several waiters can each raise one.

    `in_flight`: for a request sent before the connection failed, whose answer
    the failure took (said as it happened), else for one that came after it."""
    if isinstance(error, WarddError):
        copy: BaseException = error_for(error.code, error.message, error.data)
        return copy
    said = str(error) if in_flight else f"the connection failed earlier: {error}"
    fresh = ConnectionClosed(said)
    fresh.__cause__ = error
    return fresh


class ClientCore:
    """Bookkeeping of one client connection: ids, framing, replies. No I/O."""

    def __init__(
        self, *, client_name: str = "wardctl", max_frame: int = DEFAULT_MAX_FRAME, first_id: int = 1
    ) -> None:
        # `first_id`: a connection that replaces another goes on with its ids,
        # so that no id ever names two requests of one client.
        self.client_name = client_name
        # Until hello answers, we neither send nor accept frames above the
        # protocol default; afterwards, the daemon's own bound applies.
        self._decoder = FrameDecoder(max_frame=max_frame)
        self._send_max_frame = max_frame
        self._next_id = first_id
        self._pending: set[int] = set()
        self._abandoned: set[int] = set()
        self._ready: dict[int, Reply] = {}
        self._eof = False
        self._closed_by_us = False
        self._failure: BaseException | None = None
        self._hello_id: int | None = None
        self._hello: HelloResult | None = None

    # -- state ------------------------------------------------------------------
    @property
    def hello_result(self) -> HelloResult | None:
        """The validated `hello` reply, or None before it arrived."""
        return self._hello

    @property
    def pending(self) -> frozenset[int]:
        """Ids of requests sent whose replies have not been handed out yet."""
        return frozenset(self._pending | self._ready.keys())

    @property
    def next_id(self) -> int:
        """The id the next request will get."""
        return self._next_id

    @property
    def failed(self) -> bool:
        """True once the connection is unusable (a connection-level error or EOF)."""
        return self._failure is not None

    def fail(self, error: BaseException) -> None:
        """Mark the connection unusable because of `error` (drivers call this on I/O errors)."""
        if self._failure is None:
            self._failure = error

    def close(self) -> None:
        """Mark the connection closed by this side: later uses raise `ConnectionClosed`."""
        self._closed_by_us = True
        self.fail(ConnectionClosed("the client closed this connection"))

    def raise_if_failed(self, *, in_flight: bool = False) -> None:
        """Raise (a fresh copy of) why the connection is unusable, if it is
        (`in_flight`: to a request that was awaiting its answer then)."""
        if self._failure is not None:
            raise _copy_error(self._failure, in_flight=in_flight)

    # -- sending ----------------------------------------------------------------
    def hello_request(self) -> tuple[int, bytes]:
        """The id and frame of the `hello` request; it must be the first one sent."""
        if self._hello_id is not None:
            raise RuntimeError("hello was already sent on this connection")
        rid, data = self._encode(
            "hello", {"protocol": PROTOCOL_VERSION, "client": self.client_name}
        )
        self._hello_id = rid
        return rid, data

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> tuple[int, bytes]:
        """Allocate an id for a request and return ``(id, frame bytes)`` to send.

        Raises `FrameTooLarge` (nothing allocated) if the frame would exceed the
        daemon's `max_frame`, and the connection's failure if it has failed.
        """
        if self._hello_id is None:
            raise RuntimeError("hello must be the first request on a connection (contract §4)")
        return self._encode(method, dict(params) if params is not None else {})

    def _encode(self, method: str, params: dict[str, Any]) -> tuple[int, bytes]:
        if isinstance(self._failure, WarddError):  # the daemon's word on the connection
            self.raise_if_failed()
        if self._failure is not None:  # nothing of this request goes out
            raise NotSent(
                f"the request was not sent: {_copy_error(self._failure)}"
            ) from self._failure
        rid = self._next_id
        item = {"id": rid, "method": method, "params": params}
        try:
            data = encode_frame(item, max_frame=self._send_max_frame)
        except ValueError as exc:
            # encode_frame says ValueError both for a value CBOR cannot carry
            # and for a frame over the bound: tell them apart (error path only).
            if len(encode_item(item)) <= self._send_max_frame:
                raise
            raise FrameTooLarge(
                f"the {method} request does not fit in one frame of {self._send_max_frame} bytes"
            ) from exc
        self._next_id += 1
        self._pending.add(rid)
        return rid, data

    def abandon(self, rid: int, *, sent: bool = True) -> None:
        """Forget request `rid`: its reply, if one comes, is dropped.

        `sent=False` says the frame never left (a send that did not start), so
        no reply is expected at all.
        """
        self._ready.pop(rid, None)
        if rid in self._pending:
            self._pending.discard(rid)
            if sent:
                self._abandoned.add(rid)

    # -- receiving --------------------------------------------------------------
    def receive_data(self, data: bytes) -> None:
        """Hand over bytes read from the socket; ``b""`` means end of file."""
        if not data:
            self._eof = True
        else:
            self._decoder.feed(data)

    def take(self, rid: int) -> Reply | None:
        """The reply to `rid` if it has arrived (others are kept), else None (need data)."""
        if rid in self._ready:
            return self._ready.pop(rid)
        if rid not in self._pending:
            raise KeyError(f"no request {rid} is outstanding on this connection")
        while True:
            reply = self.next_reply()
            if reply is None:
                return None
            assert reply.id is not None
            if reply.id == rid:
                return reply
            self._ready[reply.id] = reply

    def next_reply(self) -> Reply | None:
        """The next reply to an outstanding request, in arrival order, or None (need data).

        Raises the connection-level error for an id-less error reply, a
        `RemoteProtocolError` for a frame or reply the protocol forbids, and
        `ConnectionClosed` at end of file.
        """
        while True:
            self.raise_if_failed()
            try:
                item = self._decoder.next_item()
            except WarddError as exc:  # bad_frame: the daemon sent a malformed frame
                error = RemoteProtocolError(f"malformed frame from the daemon: {exc}")
                raise self._broken(error) from exc
            if item is NEED_DATA:
                if self._eof:
                    raise self._broken(self._eof_error())
                return None
            reply = self._parse(item)
            if reply is not None:
                return reply

    def _parse(self, item: Any) -> Reply | None:
        try:
            reply = parse_reply(item)
        except WarddError as exc:
            error = RemoteProtocolError(f"malformed reply from the daemon: {exc}")
            raise self._broken(error) from exc
        if reply.id is None:
            # contract §4: bad_frame (and a protocol_error whose id could not be
            # read) concern the connection, not one request.
            assert isinstance(reply, ErrorReply)
            self.fail(reply.error)
            raise _copy_error(reply.error)
        if reply.id in self._abandoned:
            self._abandoned.discard(reply.id)
            self._after_reply(reply)
            return None
        if reply.id not in self._pending:
            raise self._broken(
                RemoteProtocolError(
                    f"the daemon answered request {reply.id}, which is not outstanding"
                )
            )
        self._pending.discard(reply.id)
        self._after_reply(reply)
        return reply

    def _after_reply(self, reply: Reply) -> None:
        if reply.id != self._hello_id or self._hello is not None:
            return
        if isinstance(reply, ErrorReply):
            # contract §4: a refused hello closes the connection.
            self.fail(reply.error)
            return
        try:
            self._hello = HelloResult.from_wire(reply.result)
        except RemoteProtocolError as exc:
            raise self._broken(exc) from None
        self._send_max_frame = self._hello.max_frame
        if self._decoder.buffered == 0:
            self._decoder = FrameDecoder(max_frame=max(self._hello.max_frame, DEFAULT_MAX_FRAME))

    def _eof_error(self) -> ConnectionClosed:
        if self._decoder.buffered:
            return ConnectionClosed("the daemon closed the connection in the middle of a frame")
        if self._pending:
            return ConnectionClosed("the daemon closed the connection before answering")
        return ConnectionClosed("the daemon closed the connection")

    def _broken(self, error: BaseException) -> BaseException:
        self.fail(error)
        return error


class Connected:
    """What both clients say about their connection once `hello` was answered."""

    _core: ClientCore

    @property
    def hello_result(self) -> HelloResult:
        """The daemon's `hello` reply: protocol, daemon, boot, network, max_frame."""
        hello = self._core.hello_result
        assert hello is not None  # set before the client is handed out
        return hello

    @property
    def network(self) -> str:
        """The daemon's network (what signatures on this connection must name)."""
        return self.hello_result.network
