"""The scripted daemon side of the client's unit tests: hello's answer,
replies as frames, a core past its hello, and a trio memory stream whose
far end the test plays (``trio_pair``). Shared by the client's and wardctl's
unit tests."""

from __future__ import annotations

from typing import Any

import trio
import trio.testing

from wardd.client import ClientCore, TrioClient
from wardd.protocol import FrameDecoder, encode_frame

__all__ = [
    "HELLO",
    "NETWORK",
    "MemoryPeer",
    "answer_next",
    "answer_peer_hello",
    "decode_requests",
    "err",
    "frame",
    "ok",
    "ready_core",
    "trio_pair",
]

NETWORK = "local"
HELLO = {
    "protocol": 1,
    "daemon": "wardd test",
    "boot": "b" * 32,
    "network": NETWORK,
    "max_frame": 1 << 20,
}


def frame(obj: Any) -> bytes:
    return encode_frame(obj)


def ok(rid: int | None, result: Any) -> bytes:
    return frame({"id": rid, "result": result})


def err(rid: int | None, code: str, message: str = "no", data: dict | None = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return frame({"id": rid, "error": error})


def ready_core(**hello: Any) -> ClientCore:
    """A core whose hello has been answered."""
    core = ClientCore()
    rid, _ = core.hello_request()
    core.receive_data(ok(rid, dict(HELLO, **hello)))
    assert core.take(rid) is not None
    return core


def decode_requests(data: bytes) -> list[dict[str, Any]]:
    decoder = FrameDecoder()
    decoder.feed(data)
    items = []
    while True:
        item = decoder.next_item()
        if not isinstance(item, dict):
            return items
        items.append(item)


class MemoryPeer:
    """The daemon's side of a memory stream: read requests, write replies."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()

    async def request(self) -> dict[str, Any]:
        while True:
            item = self.decoder.next_item()
            if isinstance(item, dict):
                return item
            data = await self.stream.receive_some(65536)
            assert data, "client closed"
            self.decoder.feed(data)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)


async def trio_pair(nursery: trio.Nursery) -> tuple[TrioClient, MemoryPeer]:
    client_side, daemon_side = trio.testing.memory_stream_pair()
    peer = MemoryPeer(daemon_side)
    nursery.start_soon(answer_peer_hello, peer)
    client = await TrioClient.over_stream(client_side, nursery=nursery)
    return client, peer


async def answer_peer_hello(peer: MemoryPeer) -> None:
    req = await peer.request()
    await peer.send(ok(req["id"], HELLO))


async def answer_next(peer: MemoryPeer, answer: Any) -> None:
    req = await peer.request()
    await peer.send(ok(req["id"], answer))
