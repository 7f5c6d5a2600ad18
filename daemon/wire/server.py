"""The Unix-socket server: peer uid, hello, framing, pipelining, limits (contract §4).

Bytes go through the sans-IO :mod:`wardd.protocol`; requests are handed to
the router (``Router.handle``). Each request runs in the daemon's own nursery, not the
connection's, so its effect does not depend on the connection staying open
(contract §3.1); a response to a closed connection is dropped.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import cbor2
import structlog
import trio

from wardd.protocol import (
    NEED_DATA,
    PROTOCOL_VERSION,
    BadFrame,
    ErrorReply,
    Forbidden,
    FrameDecoder,
    Internal,
    Overloaded,
    ProtocolError,
    Request,
    Response,
    WarddError,
    check_value,
    decode_item,
    encode_frame,
    encode_item,
    parse_request,
    reference_decode,
)

__all__ = ["Connection", "Server", "shrink_to_frame"]

log = structlog.get_logger("wardd.server")
_ids = itertools.count(1)


@attrs.define(eq=False)
class Connection:
    stream: trio.SocketStream
    uid: int
    max_frame: int
    id: int = attrs.field(factory=lambda: next(_ids))
    in_flight: int = 0
    unsent: int = 0
    closed: bool = False
    greeted: bool = False
    send_lock: trio.Lock = attrs.field(factory=trio.Lock)

    async def send(self, item: dict[str, Any]) -> None:
        """Send one reply, whole and in order with the connection's other replies
        (or close the connection, see `send_rest`)."""
        frame = encode_reply(item, self.max_frame)
        sent = self.write_now(frame)
        if sent < len(frame):
            await self.send_rest(frame, sent)

    def write_now(self, frame: bytes) -> int:
        """Write what the socket takes of `frame` at once, without waiting, if
        no other frame is on its way; the number of bytes written (all of them
        if the connection is closed). The usual reply leaves here whole, with
        no schedule point, no lock and no cancel scope.

        A caller that gets less must call `send_rest` next, with no await in
        between, so that no other frame can start in the middle of this one.
        """
        if self.closed:
            return len(frame)
        if self.send_lock.locked():
            return 0
        try:
            # the socket is non-blocking (trio's); fileno() is -1 once it is closed
            return os.write(self.stream.socket.fileno(), frame)
        except BlockingIOError:
            return 0
        except OSError:  # the peer is gone (EPIPE, ECONNRESET) or the socket is closed
            self.closed = True
            return len(frame)

    async def send_rest(self, frame: bytes, sent: int) -> None:
        """Send `frame` from byte `sent` on, after `write_now` (see there).

        contract §4 [2.3]: a reply that cannot be written whole within
        `WRITE_TIMEOUT_S` (the wait for the replies ahead of it included)
        closes the connection, so that nothing is ever sent after a partial
        frame and no reply is silently skipped; so does any other cut
        (a cancellation, the peer gone).
        """
        if self.closed:
            return
        whole = False
        try:
            with trio.move_on_after(WRITE_TIMEOUT_S) as timer:
                if sent:
                    self.send_lock.acquire_nowait()  # free: write_now just wrote frame's start
                else:
                    await self.send_lock.acquire()
                try:
                    if not self.closed:  # closed while this reply waited for the lock
                        await self.stream.send_all(memoryview(frame)[sent:])
                        whole = True
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                finally:
                    self.send_lock.release()
        finally:
            if not whole:
                self.abort()
        if timer.cancelled_caught:
            log.warning("reply_timeout", conn=self.id, timeout_s=WRITE_TIMEOUT_S, sent=sent)

    def abort(self) -> None:
        """Close the connection now: no byte is written on it after this, and
        its read loop ends (trio wakes a task blocked on a closing socket)."""
        self.closed = True
        self.stream.socket.close()


def encode_reply(item: dict[str, Any], max_frame: int) -> bytes:
    """Encode a reply that never exceeds ``max_frame`` and never fails: a
    part too large is replaced by ``{omitted_bytes, digest}`` (contract §4,
    `shrink_to_frame`), a value that is not a wire value (or nests too deep)
    by ``{omitted: reason}``."""
    try:
        return encode_frame(item, max_frame=max_frame)
    except Exception:  # noqa: BLE001 - too large, too deep, or not a wire value
        return _shrunk(item, max_frame)


def _shrunk(item: dict[str, Any], max_frame: int) -> bytes:
    try:
        return encode_frame(shrink_to_frame(item, max_frame), max_frame=max_frame)
    except Exception:  # noqa: BLE001
        err = ErrorReply(item.get("id"), Internal("the reply could not be encoded"))
        return encode_frame(err.to_wire(), max_frame=max_frame)


async def _encoded(item: dict[str, Any], max_frame: int) -> bytes:
    """`encode_reply`, with a reply that needs shrinking shrunk on a thread: a
    stored value of megabytes costs its walks there (0.15-0.3 s measured for
    300,000 integers, 40 maps deep or not: the value's check, one encoding
    of each large part and its digest), not on the event loop. The first
    try, which finds the reply too large, stays on the loop as for any reply."""
    try:
        return encode_frame(item, max_frame=max_frame)
    except Exception:  # noqa: BLE001 - too large, too deep, or not a wire value
        pass
    return await trio.to_thread.run_sync(_shrunk, item, max_frame)


def shrink_to_frame(item: Any, max_frame: int) -> Any:
    """contract §4: the reply `item` made to fit in ``max_frame``; the record keeps it.

    Whatever its shape, a part too large is replaced by ``{omitted_bytes:
    n, digest: hex}``: the length of its deterministic CBOR encoding and
    that encoding's sha256 (`canonical_digest`), so that every reply that
    carries a stored value (``invoke``, ``get_operation``, ``consume``,
    ``call``) can always be sent. An act's stored value over the bound is
    replaced as a whole, however deep (`_is_stored_value`). Elsewhere, top
    down, a map or array over the bound is replaced whole when each of its
    parts is under a quarter of the bound, else it keeps its parts and each
    is shrunk in turn (an op's attempts stay a list). The reply's own map
    and its ``result`` or ``error`` map are never replaced, only shrunk.
    The bound starts at half the frame and falls by four until the reply
    fits."""
    try:
        check_value(item)
    except (TypeError, ValueError):
        item = _wire_only(item, 0)
    limit = max_frame // 2
    while limit >= 64:
        shrunk = _fit(item, limit, 0, {})
        if len(encode_item(shrunk)) + 4 <= max_frame:
            return shrunk
        limit //= 4
    return {"id": item.get("id"), "error": Internal("the response is too large").to_wire()}


_MAX_INT = 2**64 - 1
#: The nesting of a reply's own maps (the reply, its result or error): never replaced.
_ENVELOPE = 2


def _wire_only(v: Any, depth: int) -> Any:
    """``v`` with what is not a wire value, or nests too deep to be sent,
    replaced by ``{omitted: reason}`` (a copy only where something changed)."""
    if depth >= 60:
        return {"omitted": "too_deep"}
    if isinstance(v, (bytes, str, bool, float)) or v is None:
        return v
    if isinstance(v, int):
        return v if -_MAX_INT - 1 <= v <= _MAX_INT else {"omitted": "not_a_wire_value"}
    if isinstance(v, dict):
        if all(isinstance(k, (str, bytes)) for k in v):
            return {k: _wire_only(x, depth + 1) for k, x in v.items()}
        return {"omitted": "not_a_wire_value"}
    if isinstance(v, (list, tuple)):
        return [_wire_only(x, depth + 1) for x in v]
    return {"omitted": "not_a_wire_value"}


def _fit(v: Any, limit: int, depth: int, sizes: dict[int, int]) -> Any:
    """``v`` with each part whose encoding exceeds ``limit`` shrunk or replaced."""
    if isinstance(v, (bytes, str)):
        return _omission(v) if _size(v, sizes) > limit else v
    if not isinstance(v, (dict, list, tuple)) or _size(v, sizes) <= limit:
        return v  # a number, true, false, null: at most 9 bytes
    parts = v.values() if isinstance(v, dict) else v
    if depth >= _ENVELOPE and _all_under(parts, limit // 4, sizes):
        return _omission(v)  # made of many small parts: replaced whole
    if isinstance(v, dict):
        return {
            k: _omission(x)
            if _is_stored_value(k, v) and _size(x, sizes) > limit
            else _fit(x, limit, depth + 1, sizes)
            for k, x in v.items()
        }
    return [_fit(x, limit, depth + 1, sizes) for x in v]


def _is_stored_value(key: Any, parent: dict[Any, Any]) -> bool:
    """Whether ``parent[key]`` is an act's stored value, replaced as a whole
    (contract §3.2.3): a ``value`` (an outcome's, a retained result's, a
    receipt's), or the ``result`` beside ``status`` in a dispatch's answer
    (``invoke``, ``execute``, ``call``)."""
    return key == "value" or (key == "result" and "status" in parent)


def _size(v: Any, sizes: dict[int, int]) -> int:
    """The length of ``v``'s encoding, at most (a number counts 9 bytes, a
    string's or container's head 9), each container's once. A container of a
    few parts sums theirs, so a deep value is not encoded again at each level;
    one of many is encoded (cbor2, a checked wire value)."""
    if isinstance(v, (bytes, str)):
        return 9 + (len(v) if isinstance(v, bytes) or v.isascii() else len(v.encode()))
    if not isinstance(v, (dict, list, tuple)):
        return 9
    known = sizes.get(id(v))
    if known is None:
        if len(v) > _FEW_PARTS:
            known = len(cbor2.dumps(v))
        elif isinstance(v, dict):
            known = 9 + sum(_size(k, sizes) + _size(x, sizes) for k, x in v.items())
        else:
            known = 9 + sum(_size(x, sizes) for x in v)
        sizes[id(v)] = known
    return known


#: A container of at most this many parts is sized by its parts (see `_size`).
_FEW_PARTS = 16
_NUMBERS = frozenset({int, float, bool, type(None)})


def _all_under(parts: Any, bound: int, sizes: dict[int, int]) -> bool:
    """Whether each part's encoding is at most `bound` bytes; a list of only
    numbers (or of short strings) is told by its types at C speed, not walked."""
    kinds = set(map(type, parts))
    if kinds <= _NUMBERS:
        return 9 <= bound
    if kinds <= {str, bytes} and 9 + 4 * max(map(len, parts)) <= bound:
        return True  # UTF-8 takes at most 4 bytes a character
    return all(_size(x, sizes) <= bound for x in parts)


def _omission(v: Any) -> dict[str, Any]:
    """What replaces a part too large to be sent: its encoding's length and sha256."""
    encoded = cbor2.dumps(v, canonical=True)  # a wire value, checked: `encode_item`'s bytes
    return {"omitted_bytes": len(encoded), "digest": hashlib.sha256(encoded).hexdigest()}


Handler = Callable[[Connection, Request], Awaitable[Any]]


class Server:
    def __init__(
        self,
        *,
        handle: Handler,
        hello: Callable[[], dict[str, Any]],
        allowed_uids: set[int],
        max_frame: int,
        max_connections: int,
        max_in_flight: int,
        on_close: Callable[[Connection], None],
        inline: frozenset[str] = frozenset(),
    ) -> None:
        self._handle = handle
        self._inline = inline  # methods answered in the read loop (Method.inline)
        self._hello = hello
        self._allowed = allowed_uids
        self._max_frame = max_frame
        self._max_connections = max_connections
        self._max_in_flight = max_in_flight
        self._on_close = on_close
        self.connections: set[Connection] = set()
        # large frames are decoded on threads of their own, at most two at once
        self._decode_limiter = trio.CapacityLimiter(2)
        self._decodes: set[trio.CancelScope] = set()
        self._decoding_stopped = False
        self.requests: trio.Nursery | None = None

    def snapshot(self) -> dict[str, Any]:
        """Its part of ``status``."""
        return {"connections": len(self.connections)}

    async def serve(
        self, listener: trio.socket.SocketType, requests: trio.Nursery, conns: trio.Nursery
    ) -> None:
        """Accept forever (cancel to stop accepting). Connections live in
        ``conns`` and requests in ``requests``, both owned by the daemon, so
        that a shutdown can stop accepting and still answer what is in flight."""
        self.requests = requests
        while True:
            try:
                sock, _ = await listener.accept()
            except OSError as exc:  # EMFILE and friends: back off, never die
                log.warning("accept_failed", error=str(exc))
                await trio.sleep(0.1)
                continue
            conns.start_soon(self._connection, sock)

    async def _connection(self, sock: trio.socket.SocketType) -> None:
        stream = trio.SocketStream(sock)
        uid = _peer_uid(sock)
        conn = Connection(stream=stream, uid=uid, max_frame=self._max_frame)
        try:
            if uid not in self._allowed:
                log.warning("peer_forbidden", uid=uid)
                await conn.send(ErrorReply(None, Forbidden("this uid may not use wardd")).to_wire())
                return
            if len(self.connections) >= self._max_connections:
                await conn.send(ErrorReply(None, Overloaded("too many connections")).to_wire())
                return
            self.connections.add(conn)
            await self._read_loop(conn)
        finally:
            conn.closed = True
            self.connections.discard(conn)
            self._on_close(conn)
            with trio.CancelScope(shield=True):
                await stream.aclose()

    async def _read_loop(self, conn: Connection) -> None:
        decoder = FrameDecoder(self._max_frame)
        while True:
            try:
                data = await conn.stream.receive_some(65536)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                return
            if not data:
                return
            decoder.feed(data)
            while True:
                try:
                    body = decoder.next_body()
                    if body is NEED_DATA:
                        break
                    item = await self._decode(body)
                except BadFrame as err:
                    await conn.send(ErrorReply(None, err).to_wire())
                    return
                except Exception as exc:  # noqa: BLE001 - e.g. no decode thread could start
                    # the daemon never dies from one frame: only its connection ends.
                    # The type only: an exception's text may quote the client's bytes
                    log.error("decode_failed", conn=conn.id, error=type(exc).__name__)
                    await conn.send(
                        ErrorReply(None, Internal("the request was not decoded")).to_wire()
                    )
                    return
                if item is _DROPPED:
                    return
                if not await self._dispatch(conn, item):
                    return

    async def _decode(self, body: bytes) -> Any:
        """The decoded item of `body` (`BadFrame` if it is not one), or `_DROPPED`
        if the daemon began to stop before it was decoded (see `stop_decoding`)."""
        if len(body) <= INLINE_DECODE_BYTES:
            return decode_item(body)
        if not self._decoding_stopped:
            with trio.CancelScope() as scope:
                self._decodes.add(scope)
                try:
                    # abandoned, not waited for, when the stop cancels it: the
                    # thread runs on to its end (bounded) and its result is dropped
                    return await trio.to_thread.run_sync(
                        reference_decode,
                        body,
                        limiter=self._decode_limiter,
                        abandon_on_cancel=True,
                    )
                finally:
                    self._decodes.discard(scope)
        log.info("decode_dropped", size=len(body), reason="stopping")
        return _DROPPED

    def stop_decoding(self) -> None:
        """contract §4 [2.3]: a stop never waits for a decode. A request still
        being decoded (on a thread) is dropped and its connection closed; so is
        every large body that arrives after this. Small bodies are still
        decoded (on the event loop, bounded), so reads keep their answer
        through the shutdown grace."""
        self._decoding_stopped = True
        for scope in self._decodes:
            scope.cancel()

    async def _dispatch(self, conn: Connection, item: Any) -> bool:
        """Handle one decoded item; False closes the connection."""
        try:
            req = parse_request(item)
        except ProtocolError as err:
            await conn.send(ErrorReply(err.request_id, err).to_wire())
            return conn.greeted
        if not conn.greeted:
            return await self._greet(conn, req)
        if conn.in_flight >= self._max_in_flight or conn.unsent > self._max_in_flight:
            await conn.send(ErrorReply(req.id, Overloaded("too many requests in flight")).to_wire())
            return True
        assert self.requests is not None
        if self.requests.cancel_scope.cancel_called:  # past the shutdown grace
            return False
        if req.method in self._inline:  # a handler that never waits: answered now
            conn.in_flight += 1
            await self._run(conn, req)
            # the other tasks run before this connection's next frame: a
            # pipelined flood of these is served no sooner than tasks would be
            await trio.lowlevel.checkpoint()
            return True
        try:
            self.requests.start_soon(self._run, conn, req)
        except RuntimeError:  # the daemon has finished serving requests: close
            return False
        conn.in_flight += 1
        return True

    async def _greet(self, conn: Connection, req: Request) -> bool:
        p = req.params
        if req.method != "hello":
            err: WarddError = ProtocolError(
                "the first request must be hello", {"supported": [PROTOCOL_VERSION]}
            )
        elif p.get("protocol") != PROTOCOL_VERSION or isinstance(p.get("protocol"), bool):
            err = ProtocolError("unsupported protocol version", {"supported": [PROTOCOL_VERSION]})
        elif not isinstance(p.get("client"), str):
            err = ProtocolError(
                "hello needs {protocol: 1, client: text}", {"supported": [PROTOCOL_VERSION]}
            )
        else:
            conn.greeted = True
            await conn.send(Response(req.id, self._hello()).to_wire())
            return True
        await conn.send(ErrorReply(req.id, err).to_wire())
        return False

    async def _run(self, conn: Connection, req: Request) -> None:
        try:
            result = await self._handle(conn, req)
        except WarddError as err:
            reply: dict[str, Any] = ErrorReply(req.id, err).to_wire()
        except Exception as exc:
            log.error("handler_failed", method=req.method, error=repr(exc), exc_info=True)
            reply = ErrorReply(req.id, Internal("internal error")).to_wire()
        else:
            reply = Response(req.id, result).to_wire()
        finally:
            conn.in_flight -= 1
        frame = await _encoded(reply, conn.max_frame)
        sent = conn.write_now(frame)
        if sent == len(frame):
            return
        # a computed reply is sent even while the daemon shuts down (bounded by
        # the write timeout); replies not yet sent are bounded too, so a client
        # that sends without reading is held back (a strictly sequential client
        # is never refused: it has at most one reply on its way while it sends
        # the next request)
        conn.unsent += 1
        try:
            with trio.CancelScope(shield=True):
                await conn.send_rest(frame, sent)
        finally:
            conn.unsent -= 1


#: contract §4 [2.3]: how long one reply may take to be written whole (the wait
#: for the replies queued ahead of it included) before its connection is closed.
WRITE_TIMEOUT_S = 5.0

# contract §4 [2.3]: decoding one frame costs the event loop at most a few
# milliseconds, whatever its shape. The work is linear in the body's length
# (map keys are text or bytes, so no dict goes quadratic), but its cost per
# byte depends on the shape: up to ~0.5 us per byte for a body of empty
# containers or one-byte chunks (measured, bench/micro.py "hostile"). So only
# bodies up to INLINE_DECODE_BYTES are decoded on the event loop (worst
# shape: ~2 ms, the fast path's and the reference's tries together); larger
# ones go to a thread, by the pure-Python reference decoder, which hands the
# GIL back every few milliseconds; not by cbor2's compiled path, which holds
# the GIL for the whole call (measured: a thread sleeping 1 ms woke 21.6 ms
# late, p50, beside 1 MiB decodes by cbor2, 5.7 ms late beside the
# reference). Requests are small (a signed invoke is ~300 bytes), so only
# bulky args take the thread.
INLINE_DECODE_BYTES = 4096
#: What `Server._decode` returns for a body dropped because the daemon stops.
_DROPPED: Any = object()


def _peer_uid(sock: trio.socket.SocketType) -> int:
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


def bind_unix(path: str) -> socket.socket:
    """Bind a listening socket at ``path``, 0600, replacing a stale socket
    file that has no listener (contract §3.6) but never a live one."""
    if os.path.lexists(path):
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            raise OSError(f"{path} exists and is not a socket; refusing to replace it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)
        except OSError:
            raise
        else:
            raise OSError(f"another process is listening on {path}")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(512)
    return sock
