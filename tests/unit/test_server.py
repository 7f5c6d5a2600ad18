"""The server's read loop in-process, over a real Unix socket (contract §4).

A decode that fails for a reason of the daemon's own — no thread can be
started for a large body at the process's task limit — cannot be caused by
client input, so it is caused here by making trio's thread start raise what
CPython raises then. It must end only that connection, with ``internal``;
the daemon and its other connections go on.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
import structlog
import trio

from wardd.daemon.wire.server import (
    INLINE_DECODE_BYTES,
    Connection,
    Server,
    bind_unix,
    encode_reply,
    shrink_to_frame,
)
from wardd.protocol import (
    NEED_DATA,
    PROTOCOL_VERSION,
    FrameDecoder,
    Request,
    decode_item,
    encode_frame,
    encode_item,
)

HELLO = {"id": 1, "method": "hello", "params": {"protocol": PROTOCOL_VERSION, "client": "t"}}


class Peer:
    """A client end: send request maps, read reply maps, see the close."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    async def send(self, item: dict[str, Any]) -> None:
        await self.stream.send_all(encode_frame(item))

    async def reply(self) -> Any:
        """The next reply, or None once the daemon closed the connection."""
        while (item := self.decoder.next_item()) is NEED_DATA:
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.decoder.feed(data)
        return item


async def echo(conn: Connection, req: Request) -> Any:
    return {"method": req.method}


def _server(handle: Any, **over: Any) -> Server:
    """A server for this uid with small limits; ``over`` replaces any of them."""
    limits: dict[str, Any] = {
        "hello": lambda: {"protocol": PROTOCOL_VERSION},
        "allowed_uids": {os.getuid()},
        "max_frame": 1 << 20,
        "max_connections": 8,
        "max_in_flight": 8,
        "on_close": lambda conn: None,
    }
    return Server(handle=handle, **(limits | over))


async def _greeted(path: str) -> Peer:
    """A peer connected to ``path`` whose hello was answered."""
    peer = Peer(await trio.open_unix_socket(path))
    await peer.send(HELLO)
    assert (await peer.reply())["result"] == {"protocol": PROTOCOL_VERSION}
    return peer


async def test_a_decode_failing_inside_the_daemon_ends_only_its_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The large frame's decode thread cannot start: that connection gets
    ``internal`` and is closed, ``decode_failed`` is logged; the server keeps
    serving the connection beside it and new ones."""
    closed: list[Connection] = []
    server = _server(echo, on_close=closed.append)
    path = str(tmp_path / "s")
    listener = trio.socket.from_stdlib_socket(bind_unix(path))

    async def no_thread(*args: Any, **kw: Any) -> Any:
        raise RuntimeError("can't start new thread")

    with listener, trio.fail_after(20):
        async with trio.open_nursery() as requests, trio.open_nursery() as conns:
            conns.start_soon(server.serve, listener, requests, conns)
            victim, beside = await _greeted(path), await _greeted(path)
            monkeypatch.setattr(trio.to_thread, "run_sync", no_thread)
            big = {"id": 2, "method": "ping", "params": {"blob": b"x" * INLINE_DECODE_BYTES}}
            with structlog.testing.capture_logs() as logs:
                await victim.send(big)
                answer = await victim.reply()
                assert await victim.reply() is None  # closed after the answer
            assert answer["id"] is None and answer["error"]["code"] == "internal"
            assert [x for x in logs if x["event"] == "decode_failed"] == [
                {
                    "event": "decode_failed",
                    "log_level": "error",
                    "conn": closed[0].id,
                    "error": "RuntimeError",
                }
            ]
            assert len(closed) == 1 and len(server.connections) == 1
            # the daemon goes on: the connection beside it and a new one are served
            await beside.send({"id": 3, "method": "ping", "params": {}})
            assert await beside.reply() == {"id": 3, "result": {"method": "ping"}}
            fresh = await _greeted(path)
            for peer in (victim, beside, fresh):
                await peer.stream.aclose()
            conns.cancel_scope.cancel()


async def test_an_inline_method_is_answered_in_the_read_loop_in_order(tmp_path: Path) -> None:
    """An ``inline`` method (status) is answered by the read loop itself: a
    pipelined burst of them, more than ``max_in_flight``, is answered whole
    and in order, none refused as overloaded, while a request of the same
    connection that waits (a task of its own) is still waiting; it is
    answered once it may go on."""
    go = trio.Event()

    async def handle(conn: Connection, req: Request) -> Any:
        if req.method == "slow":
            await go.wait()
        return {"method": req.method}

    server = _server(handle, max_in_flight=4, inline=frozenset({"status"}))
    path = str(tmp_path / "s")
    listener = trio.socket.from_stdlib_socket(bind_unix(path))
    with listener, trio.fail_after(20):
        async with trio.open_nursery() as requests, trio.open_nursery() as conns:
            conns.start_soon(server.serve, listener, requests, conns)
            peer = await _greeted(path)
            burst = [{"id": 2, "method": "slow", "params": {}}]
            burst += [{"id": i, "method": "status", "params": {}} for i in range(3, 23)]
            await peer.stream.send_all(b"".join(encode_frame(x) for x in burst))
            answers = [await peer.reply() for _ in range(20)]
            assert answers == [{"id": i, "result": {"method": "status"}} for i in range(3, 23)]
            go.set()
            assert await peer.reply() == {"id": 2, "result": {"method": "slow"}}
            await peer.stream.aclose()
            conns.cancel_scope.cancel()


def omission_of(value: Any) -> dict[str, Any]:
    encoded = encode_item(value, canonical=True)
    return {"omitted_bytes": len(encoded), "digest": hashlib.sha256(encoded).hexdigest()}


class TestShrinkToFrame:
    """contract §4: a reply too large for max_frame is shrunk to fit, whatever the
    shape of what made it large; what fits is sent as it is."""

    MAX_FRAME = 1 << 20

    def fits(self, item: dict[str, Any]) -> Any:
        frame = encode_reply(item, self.MAX_FRAME)
        assert len(frame) <= self.MAX_FRAME
        return decode_item(frame[4:])

    def test_a_list_of_small_parts_is_replaced_whole_by_its_length_and_digest(self) -> None:
        value = list(range(300000))
        reply = {"id": 7, "result": {"op": "o", "attempt": 1, "status": "succeeded"}}
        reply["result"]["result"] = value
        got = self.fits(reply)
        assert got["id"] == 7 and got["result"]["status"] == "succeeded"
        assert got["result"]["result"] == omission_of(value)

    def test_a_stored_value_is_replaced_whole_however_deep(self) -> None:
        """An act's value (under `value`, or a dispatch answer's `result`) over the
        bound is one {omitted_bytes, digest} of the whole value."""
        value: Any = [b"x" * 1000] * 1500
        for level in range(50):
            value = {"level": level, "inner": value}
        got = self.fits({"id": 1, "result": {"value": value, "args": b"a"}})["result"]
        assert got == {"value": omission_of(value), "args": b"a"}
        answer = {"op": "o", "attempt": 1, "status": "succeeded", "result": value}
        assert self.fits({"id": 2, "result": answer})["result"]["result"] == omission_of(value)

    def test_other_deep_parts_keep_their_small_parts(self) -> None:
        inner: Any = [b"x" * 1000] * 1500
        other: Any = inner
        for level in range(50):
            other = {"level": level, "inner": other}
        got = self.fits({"id": 1, "result": {"other": other, "args": b"a"}})["result"]
        assert got["args"] == b"a"
        for level in reversed(range(50)):
            assert got["other"]["level"] == level
            got = {"other": got["other"]["inner"]}
        assert got["other"] == omission_of(inner)

    def test_a_large_string_beside_small_ones_is_the_only_part_replaced(self) -> None:
        big = "é" * 600_000
        got = self.fits({"id": 2, "error": {"code": "x", "message": big, "data": {"k": "v"}}})
        assert got["error"] == {"code": "x", "message": omission_of(big), "data": {"k": "v"}}

    def test_two_copies_that_fit_alone_but_not_together_are_both_replaced(self) -> None:
        value = list(range(100_000))  # ~0.4 MB each: under half the frame, over a quarter
        op = {"attempts": [{"outcome": {"value": value}}] * 2, "result": {"value": value}}
        got = self.fits({"id": 3, "result": op})["result"]
        assert got["result"]["value"] == omission_of(value)
        assert [a["outcome"]["value"] for a in got["attempts"]] == [omission_of(value)] * 2

    def test_what_fits_is_untouched_and_the_reply_envelope_never_replaced(self) -> None:
        reply = {"id": 4, "result": {"value": list(range(1000))}}
        assert shrink_to_frame(reply, self.MAX_FRAME) == reply
        lists = {k: list(range(100000)) for k in "abc"}  # ~0.37 MB each, 1.1 MB together
        got = self.fits({"id": 5, "result": lists})
        assert got == {"id": 5, "result": {k: omission_of(v) for k, v in lists.items()}}
