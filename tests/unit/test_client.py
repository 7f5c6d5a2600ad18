"""wardd.client without a daemon: keys, signing, the sans-IO core, both clients, Session.

The clients are driven against tiny scripted peers (a thread on a real Unix
socket for `Client`, a trio memory stream for `TrioClient`); the tests in
tests/daemon/ drive them against a real daemon process.
"""

from __future__ import annotations

import contextlib
import copy
import os
import pickle
import socket
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
)

from wardd.client import (
    NO_VALUE,
    AsyncClient,
    Client,
    ClientCore,
    ConnectionClosed,
    DaemonUnreachable,
    FrameTooLarge,
    KeyFileError,
    Neuron,
    NotSent,
    RemoteProtocolError,
    Session,
    TrioClient,
    TrioSession,
    result_of,
)
from wardd.protocol import (
    ERRORS,
    BadFrame,
    EpochMismatch,
    FrameDecoder,
    ProtocolError,
    TokenVoid,
    UnknownOperation,
    WarddError,
    encode_frame,
    neuron_id,
    verify,
)

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


# ------------------------------------------------------------------------------------
# Neuron keys


def secret_forms(path: Path) -> list[str]:
    """Every spelling of a key file's secret that must never be shown."""
    data = path.read_bytes()
    key = Neuron.load(path)._key
    seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
    forms = [seed.hex(), seed.hex().upper(), repr(seed), data.decode("latin-1").strip()]
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    forms.append(pem.splitlines()[1])
    return forms


class TestNeuronKeys:
    def test_save_writes_pem_mode_0600_even_with_an_open_umask(self, tmp_path: Path) -> None:
        """`save` writes PKCS#8 PEM readable by the owner only, whatever the umask."""
        path = tmp_path / "sub" / "neuron.key"
        old = os.umask(0)
        try:
            neuron = Neuron.generate()
            neuron.save(path)
        finally:
            os.umask(old)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert path.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
        assert Neuron.load(path).id == neuron.id

    def test_save_refuses_to_overwrite_unless_asked(self, tmp_path: Path) -> None:
        """An existing key file is kept unless `overwrite=True`, which replaces it at 0600."""
        path = tmp_path / "neuron.key"
        first, second = Neuron.generate(), Neuron.generate()
        first.save(path)
        with pytest.raises(FileExistsError):
            second.save(path)
        assert Neuron.load(path).id == first.id
        os.chmod(path, 0o644)
        second.save(path, overwrite=True)
        assert Neuron.load(path).id == second.id
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in tmp_path.iterdir()] == ["neuron.key"]

    def test_save_does_not_follow_a_symlink(self, tmp_path: Path) -> None:
        """A symlink where the key should go is an existing file, not a way to write elsewhere."""
        target = tmp_path / "elsewhere"
        (tmp_path / "neuron.key").symlink_to(target)
        with pytest.raises(FileExistsError):
            Neuron.generate().save(tmp_path / "neuron.key")
        assert not target.exists()

    def test_load_accepts_a_raw_32_byte_seed(self, tmp_path: Path) -> None:
        """A file of exactly 32 bytes is the raw Ed25519 seed."""
        key = Ed25519PrivateKey.generate()
        seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        (tmp_path / "k").write_bytes(seed)
        assert Neuron.load(tmp_path / "k").id == neuron_id(key)

    @pytest.mark.parametrize("spell", [str.lower, str.upper, lambda h: f"  {h}\n"])
    def test_load_accepts_64_hex_digits(self, tmp_path: Path, spell: Callable[[str], str]) -> None:
        """64 hex digits (any case, surrounding whitespace) are the seed in hex."""
        key = Ed25519PrivateKey.generate()
        seed = key.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        (tmp_path / "k").write_text(spell(seed.hex()))
        assert Neuron.load(tmp_path / "k").id == neuron_id(key)

    def test_load_accepts_a_foreign_pkcs8_pem(self, tmp_path: Path) -> None:
        """PEM written by another tool (cryptography here) loads to the same neuron."""
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        (tmp_path / "k").write_bytes(pem)
        assert Neuron.load(tmp_path / "k").id == neuron_id(key)

    def test_load_refuses_an_encrypted_pem(self, tmp_path: Path) -> None:
        """An encrypted key is refused with a message saying so."""
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(b"pw"))
        (tmp_path / "k").write_bytes(pem)
        with pytest.raises(KeyFileError, match="encrypted"):
            Neuron.load(tmp_path / "k")

    def test_load_refuses_a_key_of_another_algorithm(self, tmp_path: Path) -> None:
        """A PEM holding an EC key is not a neuron key."""
        key = ec.generate_private_key(ec.SECP256R1())
        pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        (tmp_path / "k").write_bytes(pem)
        with pytest.raises(KeyFileError, match="not an Ed25519 key"):
            Neuron.load(tmp_path / "k")

    @pytest.mark.parametrize(
        "content",
        [b"", b"short", b"z" * 64, b"ab" * 33, b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END"],
    )
    def test_load_refuses_garbage_without_echoing_it(self, tmp_path: Path, content: bytes) -> None:
        """Anything else is a KeyFileError naming the path, never the content."""
        path = tmp_path / "k"
        path.write_bytes(content)
        with pytest.raises(KeyFileError) as info:
            Neuron.load(path)
        assert str(path) in str(info.value)
        if len(content) > 4:
            assert content.decode() not in str(info.value)

    def test_load_of_a_missing_file_names_it(self, tmp_path: Path) -> None:
        """A missing key file is a KeyFileError naming the path."""
        with pytest.raises(KeyFileError, match="cannot read key file .*missing"):
            Neuron.load(tmp_path / "missing")

    def test_id_is_lowercase_hex_of_the_raw_public_key(self) -> None:
        """contract §2: neuron = lowercase hex of the 32-byte Ed25519 public key."""
        key = Ed25519PrivateKey.generate()
        neuron = Neuron.from_private_key(key)
        assert neuron.id == neuron_id(key)
        assert len(neuron.id) == 64 and neuron.id == neuron.id.lower()
        assert neuron.public_key == bytes.fromhex(neuron.id)

    def test_no_key_material_in_repr_str_or_errors(self, tmp_path: Path) -> None:
        """repr/str show only the public id; pickling and copying are refused."""
        path = tmp_path / "k"
        neuron = Neuron.generate()
        neuron.save(path)
        shown = [repr(neuron), str(neuron), f"{neuron}", repr([neuron])]
        for exc_type, action in [
            (TypeError, lambda: pickle.dumps(neuron)),
            (TypeError, lambda: copy.copy(neuron)),
            (TypeError, lambda: copy.deepcopy(neuron)),
        ]:
            with pytest.raises(exc_type) as info:
                action()
            shown.append(str(info.value))
        for text in shown:
            for secret in secret_forms(path):
                assert secret not in text
        assert neuron.id in repr(neuron)
        assert not hasattr(neuron, "__dict__")


class TestNeuronSigning:
    def test_signature_verifies_with_the_protocol(self) -> None:
        """`sign` adds neuron and sig; wardd.protocol.verify accepts it for that network."""
        neuron = Neuron.generate()
        params = {"prog": "p", "op": "o", "act": "echo", "args": b"\x00\xff"}
        signed = neuron.sign("submit", params, NETWORK)
        assert signed["neuron"] == neuron.id and len(signed["sig"]) == 64
        assert params == {"prog": "p", "op": "o", "act": "echo", "args": b"\x00\xff"}
        assert verify(neuron.id, signed["sig"], NETWORK, "submit", signed)
        assert not verify(neuron.id, signed["sig"], "other", "submit", signed)
        assert not verify(neuron.id, signed["sig"], NETWORK, "prepare", signed)
        assert not verify(neuron.id, signed["sig"], NETWORK, "submit", dict(signed, op="x"))

    def test_a_stale_sig_and_neuron_are_replaced(self) -> None:
        """Re-signing signed params (or forging another neuron) gives this neuron's signature."""
        a, b = Neuron.generate(), Neuron.generate()
        signed = b.sign("cancel", a.sign("cancel", {"op": "o"}, NETWORK), NETWORK)
        assert signed["neuron"] == b.id
        assert verify(b.id, signed["sig"], NETWORK, "cancel", signed)


# ------------------------------------------------------------------------------------
# the sans-IO core


class TestClientCore:
    def test_a_failure_is_said_as_it_happened_to_a_waiter_and_as_past_to_a_new_request(
        self,
    ) -> None:
        """A request awaiting its answer hears why the connection ended; a later one
        hears that it failed earlier (and is not sent)."""
        core = ready_core()
        core.request("status", {})
        core.receive_data(b"")
        with pytest.raises(ConnectionClosed) as ended:
            core.next_reply()
        assert str(ended.value) == "the daemon closed the connection before answering"
        with pytest.raises(ConnectionClosed, match="^the daemon closed the connection before"):
            core.raise_if_failed(in_flight=True)
        with pytest.raises(NotSent, match="^the request was not sent: the connection failed"):
            core.request("status", {})

    def test_hello_comes_first_and_fixes_the_connection(self) -> None:
        """contract §4: hello first; its reply gives network, boot and max_frame."""
        core = ClientCore(client_name="tester")
        with pytest.raises(RuntimeError):
            core.request("status")
        rid, data = core.hello_request()
        (sent,) = decode_requests(data)
        assert sent == {"id": rid, "method": "hello", "params": {"protocol": 1, "client": "tester"}}
        with pytest.raises(RuntimeError):
            core.hello_request()
        core.receive_data(ok(rid, dict(HELLO, max_frame=200_000)))
        assert core.take(rid) is not None
        assert core.hello_result is not None
        assert (core.hello_result.network, core.hello_result.max_frame) == (NETWORK, 200_000)
        assert core.hello_result.boot == "b" * 32

    def test_requests_over_the_daemons_max_frame_are_not_sent(self) -> None:
        """A request that does not fit in max_frame raises FrameTooLarge and allocates nothing."""
        core = ready_core(max_frame=131072)
        with pytest.raises(FrameTooLarge):
            core.request("submit", {"args": b"x" * 131072})
        assert core.pending == frozenset()
        rid, _ = core.request("status")
        assert rid == 2

    def test_out_of_order_pipelined_replies_reach_their_requests(self) -> None:
        """contract §4: replies carry the request id and may come out of order."""
        core = ready_core()
        ids = [core.request("status")[0] for _ in range(3)]
        stream = ok(ids[2], "third") + err(ids[0], "unknown_operation") + ok(ids[1], "second")
        assert core.take(ids[1]) is None
        for byte in stream:  # any chunking
            core.receive_data(bytes([byte]))
        assert result_of(core.take(ids[1])) == "second"
        assert result_of(core.take(ids[2])) == "third"
        with pytest.raises(UnknownOperation):
            result_of(core.take(ids[0]))
        assert core.pending == frozenset()

    def test_next_reply_hands_out_replies_in_arrival_order(self) -> None:
        """The multiplexing reader sees replies as they come, whatever their ids."""
        core = ready_core()
        a, _ = core.request("status")
        b, _ = core.request("status")
        core.receive_data(ok(b, 2) + ok(a, 1))
        first, second = core.next_reply(), core.next_reply()
        assert first is not None and second is not None
        assert [(first.id, result_of(first)), (second.id, result_of(second))] == [(b, 2), (a, 1)]
        assert core.next_reply() is None

    @pytest.mark.parametrize("code", sorted(ERRORS))
    def test_every_error_code_raises_its_class(self, code: str) -> None:
        """An error reply raises the WarddError subclass of its code (the one table)."""
        core = ready_core()
        rid, _ = core.request("status")
        core.receive_data(err(rid, code, "refused", {"reason": "revoked"}))
        with pytest.raises(ERRORS[code][0]) as info:
            result_of(core.take(rid))
        assert info.value.code == code
        assert info.value.message == "refused"
        assert info.value.data == {"reason": "revoked"}

    def test_token_void_keeps_its_reason_and_unknown_codes_keep_their_code(self) -> None:
        """data.reason survives; a code the table lacks is still a WarddError with that code."""
        core = ready_core()
        a, _ = core.request("execute", {"token": b"t" * 32})
        b, _ = core.request("status")
        core.receive_data(err(a, "token_void", "voided", {"reason": "epoch_changed"}))
        core.receive_data(err(b, "brand_new_code", "from the future"))
        with pytest.raises(TokenVoid) as info:
            result_of(core.take(a))
        assert info.value.data == {"reason": "epoch_changed"}
        with pytest.raises(WarddError) as unknown:
            result_of(core.take(b))
        assert unknown.value.code == "brand_new_code"

    def test_a_reply_to_nothing_breaks_the_connection(self) -> None:
        """A reply for an id never sent is a RemoteProtocolError; the core stays failed."""
        core = ready_core()
        rid, _ = core.request("status")
        core.receive_data(ok(rid + 7, "?"))
        with pytest.raises(RemoteProtocolError):
            core.take(rid)
        assert core.failed
        with pytest.raises(ConnectionClosed):
            core.request("status")

    def test_a_duplicate_reply_breaks_the_connection(self) -> None:
        """Two replies to one id are a RemoteProtocolError."""
        core = ready_core()
        rid, _ = core.request("status")
        other, _ = core.request("status")
        core.receive_data(ok(rid, 1) + ok(rid, 1))
        assert result_of(core.take(rid)) == 1
        with pytest.raises(RemoteProtocolError):
            core.take(other)

    def test_malformed_replies_are_remote_protocol_errors(self) -> None:
        """A well-formed frame holding a non-reply is the daemon's protocol violation."""
        core = ready_core()
        rid, _ = core.request("status")
        core.receive_data(frame({"id": rid, "result": 1, "error": {}}))
        with pytest.raises(RemoteProtocolError):
            core.take(rid)

    def test_a_bad_frame_from_the_daemon_is_a_remote_protocol_error(self) -> None:
        """A frame whose body is not one CBOR item (trailing bytes) breaks the connection."""
        core = ready_core()
        rid, _ = core.request("status")
        body = b"\x01\x02"
        core.receive_data(len(body).to_bytes(4, "big") + body)
        with pytest.raises(RemoteProtocolError):
            core.take(rid)

    def test_a_connection_level_error_fails_every_request(self) -> None:
        """contract §4: bad_frame with id null concerns the connection; later uses raise it too."""
        core = ready_core()
        a, _ = core.request("status")
        b, _ = core.request("status")
        core.receive_data(err(None, "bad_frame", "garbled"))
        with pytest.raises(BadFrame):
            core.take(a)
        with pytest.raises(BadFrame):
            core.take(b)
        with pytest.raises(BadFrame):
            core.request("status")

    def test_end_of_file_raises_connection_closed(self) -> None:
        """EOF before a reply (or in the middle of one) is ConnectionClosed, never a hang."""
        core = ready_core()
        rid, _ = core.request("status")
        core.receive_data(ok(rid, "x")[:5])
        core.receive_data(b"")
        with pytest.raises(ConnectionClosed, match="middle of a frame"):
            core.take(rid)

    def test_replies_buffered_before_eof_are_still_delivered(self) -> None:
        """Whole replies that arrived before EOF are not lost."""
        core = ready_core()
        rid, _ = core.request("status")
        core.receive_data(ok(rid, "x"))
        core.receive_data(b"")
        assert result_of(core.take(rid)) == "x"

    def test_an_abandoned_requests_reply_is_dropped(self) -> None:
        """A request given up on still gets its reply from the daemon; it is dropped silently."""
        core = ready_core()
        a, _ = core.request("invoke")
        b, _ = core.request("status")
        core.abandon(a)
        core.receive_data(ok(a, "late") + ok(b, "ok"))
        reply = core.next_reply()
        assert reply is not None and reply.id == b
        assert core.next_reply() is None
        with pytest.raises(KeyError):
            core.take(a)

    def test_a_refused_hello_raises_and_fails_the_connection(self) -> None:
        """contract §4: another protocol version gets protocol_error and the connection closes."""
        core = ClientCore()
        rid, _ = core.hello_request()
        core.receive_data(err(rid, "protocol_error", "unsupported", {"supported": [1]}))
        reply = core.take(rid)
        assert reply is not None
        with pytest.raises(ProtocolError):
            result_of(reply)
        assert core.failed

    def test_a_hello_reply_for_another_protocol_is_refused(self) -> None:
        """The client checks the daemon's hello: another protocol is a RemoteProtocolError."""
        core = ClientCore()
        rid, _ = core.hello_request()
        core.receive_data(ok(rid, dict(HELLO, protocol=2)))
        with pytest.raises(RemoteProtocolError):
            core.take(rid)


# ------------------------------------------------------------------------------------
# the blocking client against a scripted peer


Script = Callable[[socket.socket, FrameDecoder], None]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a path short enough for a Unix socket."""
    with tempfile.TemporaryDirectory(prefix="wc-", dir="/tmp") as d:
        yield Path(d)


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

        with Client(peer(script), timeout=0.05) as client:
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


# ------------------------------------------------------------------------------------
# the trio client against a scripted peer


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

    async def hello() -> None:
        req = await peer.request()
        await peer.send(ok(req["id"], HELLO))

    nursery.start_soon(hello)
    client = await TrioClient.over_stream(client_side, nursery=nursery)
    return client, peer


async def answer_peer_hello(peer: MemoryPeer) -> None:
    req = await peer.request()
    await peer.send(ok(req["id"], HELLO))


async def answer_next(peer: MemoryPeer, answer: Any) -> None:
    req = await peer.request()
    await peer.send(ok(req["id"], answer))


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


# ------------------------------------------------------------------------------------
# Session: the plans of signed operations


#: A write's smallest well-formed result (contract §4), for a FakeClient answer of ``{}``.
SMALLEST_RESULT: dict[str, dict[str, Any]] = {
    "invoke": {"op": "o", "attempt": 1, "status": "succeeded"},
    "execute": {"op": "o", "attempt": 1, "status": "succeeded"},
    "prepare": {"token": b"t", "attempt": {"attempt": 1}},
    "manual_take": {"attempt": {"attempt": 1, "state": "unknown"}},
    "set_prog_state": {"prog": "p", "state": "active"},
    "cancel": {"op": "o", "state": "cancelled"},
    "rebind": {"op": "o", "epoch": 3},
}


class FakeClient:
    """Answers calls from a dict of method → result (or a callable of params);
    ``{}`` answers a write with its smallest well-formed result."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = {
            method: SMALLEST_RESULT.get(method, answer) if answer == {} else answer
            for method, answer in answers.items()
        }
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.pending: list[tuple[str, dict[str, Any] | None]] = []
        self.hello_result = ready_core().hello_result

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        params = dict(params or {})
        self.calls.append((method, params))
        answer = self.answers[method]
        return answer(params) if callable(answer) else answer

    def send(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.pending.append((method, params))
        return len(self.pending) - 1

    def recv(self, rid: int) -> Any:
        return self.call(*self.pending[rid])

    def signed_calls(self) -> list[tuple[str, dict[str, Any]]]:
        return [(m, p) for m, p in self.calls if "sig" in p]


ROOT = {
    "neuron": "n",
    "epoch": 3,
    "policy_version": 7,
    "placement_generation": 5,
    "placement": None,
    "grants": {"p": {"acts": ["echo", "tool.run"], "enabled": True}},
}
DESCRIPTOR = {"v": 1, "executor": {"worker": "w1"}}
PROG = {"prog": "p", "state": "paused", "state_version": 4, "reservation_seq": 12}


def assert_signed_by(neuron: Neuron, method: str, params: dict[str, Any]) -> None:
    assert params["neuron"] == neuron.id
    assert verify(neuron.id, params["sig"], NETWORK, method, params)


class TestSession:
    def test_bind_uses_the_workers_current_descriptor_and_generation(self) -> None:
        """bind reads list_workers and get_neuron, then signs bind_placement with both."""
        neuron = Neuron.generate()
        fake = FakeClient(
            {
                "list_workers": {
                    "workers": [
                        {"worker": "w0", "descriptor": {"v": 1}},
                        {"worker": "w1", "descriptor": DESCRIPTOR},
                    ]
                },
                "get_neuron": ROOT,
                "bind_placement": {"placement_generation": 6},
            }
        )
        session = Session(fake, neuron)  # type: ignore[arg-type]
        assert session.bind("w1").to_wire() == {"placement_generation": 6}
        ((method, params),) = fake.signed_calls()
        assert method == "bind_placement"
        assert params["descriptor"] == DESCRIPTOR and params["expected_generation"] == 5
        assert_signed_by(neuron, method, params)
        assert ("get_neuron", {"neuron": neuron.id}) in fake.calls

    def test_bind_to_an_unhosted_worker_says_which_exist(self) -> None:
        """A worker the daemon does not host is refused before anything is signed."""
        fake = FakeClient({"list_workers": {"workers": [{"worker": "w0", "descriptor": {}}]}})
        with pytest.raises(Exception, match="w9.*w0"):
            Session(fake, Neuron.generate()).bind("w9")  # type: ignore[arg-type]
        assert fake.signed_calls() == []

    @pytest.mark.parametrize("method", ["invoke", "prepare"])
    def test_attempts_always_send_expected_epoch(self, method: str) -> None:
        """contract §4: the bundled clients always send expected_epoch (read from get_neuron)."""
        neuron = Neuron.generate()
        fake = FakeClient(
            {
                "get_neuron": ROOT,
                "get_operation": {"op": "o", "attempts": [{"attempt": 1}, {"attempt": 2}]},
                method: {},
            }
        )
        getattr(Session(fake, neuron), method)("o")  # type: ignore[arg-type]
        ((sent, params),) = fake.signed_calls()
        assert sent == method
        assert {
            k: params[k]
            for k in ("op", "expected_attempt", "placement_generation", "expected_epoch")
        } == {"op": "o", "expected_attempt": 3, "placement_generation": 5, "expected_epoch": 3}
        assert_signed_by(neuron, method, params)

    def test_a_pinned_epoch_is_sent_without_reading_it(self) -> None:
        """Session(epoch=N) fences with N, even if the daemon's epoch has moved on."""
        fake = FakeClient({"get_neuron": ROOT, "manual_take": {}, "rebind": {}})
        session = Session(fake, Neuron.generate(), epoch=2)  # type: ignore[arg-type]
        session.manual_take("o", expected_attempt=1)
        session.rebind("o")
        sent = fake.signed_calls()
        assert [p["expected_epoch"] for _, p in sent] == [2, 2]
        assert "placement_generation" not in sent[0][1]
        assert not any(m == "get_neuron" for m, _ in fake.calls)

    def test_grant_reads_the_policy_version_and_can_keep_the_acts(self) -> None:
        """grant sends expected_policy_version from get_neuron; acts=None keeps the current set."""
        fake = FakeClient({"get_neuron": ROOT, "set_grant": {"policy_version": 8, "voided": 0}})
        session = Session(fake, Neuron.generate())  # type: ignore[arg-type]
        session.grant("p", ["b", "a", "a"])
        session.grant("p", None, enabled=False)
        (_, first), (_, second) = fake.signed_calls()
        assert first["acts"] == ["a", "b"] and first["enabled"] is True
        assert first["expected_policy_version"] == 7
        assert second["acts"] == ["echo", "tool.run"] and second["enabled"] is False

    def test_set_prog_state_always_sends_expected_state_version(self) -> None:
        """contract §3.4: the bundled clients always send it, read from get_prog unless given."""
        neuron = Neuron.generate()
        fake = FakeClient({"get_prog": PROG, "set_prog_state": {}})
        session = Session(fake, neuron)  # type: ignore[arg-type]
        session.set_prog_state("p", "active")
        session.set_prog_state("p", "active", expected_state="active")
        reads = len(fake.calls)
        session.set_prog_state("p", "retired", expected_state="active", expected_state_version=9)
        assert len(fake.calls) == reads + 1  # both given: nothing read first
        sent = fake.signed_calls()
        assert [p["expected_state_version"] for _, p in sent] == [4, 4, 9]
        assert [p["expected_state"] for _, p in sent] == ["paused", "active", "active"]
        assert ("get_prog", {"neuron": neuron.id, "prog": "p"}) in fake.calls
        for method, params in sent:
            assert_signed_by(neuron, method, params)

    def test_recover_reservations_always_sends_before(self) -> None:
        """contract §3.4: `before` is always sent; by default the prog's reservation_seq."""
        neuron = Neuron.generate()
        fake = FakeClient({"get_prog": PROG, "recover_reservations": {"released": 1}})
        session = Session(fake, neuron)  # type: ignore[arg-type]
        assert session.recover_reservations("p").released == 1
        session.recover_reservations("p", before=2)
        sent = fake.signed_calls()
        assert [p["before"] for _, p in sent] == [12, 2]
        assert [m for m, _ in fake.calls].count("get_prog") == 1
        assert_signed_by(neuron, *sent[0])

    def test_reconcile_distinguishes_no_value_from_null(self) -> None:
        """NO_VALUE omits outcome.value; None sends a null value."""
        fake = FakeClient({"reconcile": {"op": "o", "attempt": 1, "status": "failed"}})
        session = Session(fake, Neuron.generate())  # type: ignore[arg-type]
        session.reconcile("o", 1, "failed")
        session.reconcile("o", 1, "succeeded", None)
        session.reconcile("o", 1, "succeeded", NO_VALUE)
        outcomes = [p["outcome"] for _, p in fake.signed_calls()]
        assert outcomes == [
            {"status": "failed"},
            {"status": "succeeded", "value": None},
            {"status": "succeeded"},
        ]

    def test_paged_reads_follow_next(self) -> None:
        """list_operations returns every page, passing each page's next as after."""
        items = [{"op": name, "state": "unknown"} for name in "abc"]
        pages = {None: {"operations": items[:2], "next": "b"}, "b": {"operations": items[2:]}}
        fake = FakeClient({"list_operations": lambda p: pages[p.get("after")]})
        session = Session(fake, Neuron.generate())  # type: ignore[arg-type]
        assert [o.op for o in session.list_operations(state="unknown")] == ["a", "b", "c"]
        assert [p.get("after") for _, p in fake.calls] == [None, "b"]
        assert all(p["state"] == "unknown" and "sig" not in p for _, p in fake.calls)

    def test_a_paged_read_that_breaks_the_paging_rules_is_a_protocol_error(self) -> None:
        """A repeated `next` cursor or a page that is not a map is a
        RemoteProtocolError naming the method, never an endless loop or a crash."""
        session = Session(  # type: ignore[arg-type]
            FakeClient({"list_operations": lambda p: {"operations": [1], "next": "a"}}),
            Neuron.generate(),
        )
        with pytest.raises(RemoteProtocolError, match="list_operations: .*cursor came twice"):
            session.list_operations()
        session = Session(  # type: ignore[arg-type]
            FakeClient({"list_attempts": lambda p: ["not", "a", "map"]}), Neuron.generate()
        )
        with pytest.raises(RemoteProtocolError, match="list_attempts: a page is not a map"):
            session.list_attempts("unknown")

    def test_an_explicit_network_is_sent_and_signed(self) -> None:
        """Session(network=...) signs for that network and names it in params."""
        neuron = Neuron.generate()
        fake = FakeClient({"cancel": {}})
        Session(fake, neuron, network="lab").cancel("o")  # type: ignore[arg-type]
        ((_, params),) = fake.signed_calls()
        assert params["network"] == "lab"
        assert verify(neuron.id, params["sig"], "lab", "cancel", params)

    async def test_trio_session_runs_the_same_plans(self, nursery: trio.Nursery) -> None:
        """TrioSession signs the same requests over a TrioClient."""
        client, peer = await trio_pair(nursery)
        neuron = Neuron.generate()
        session = TrioSession(client, neuron)
        seen: list[dict[str, Any]] = []

        async def daemon() -> None:
            for answer in (ROOT, {"epoch": 4}):
                req = await peer.request()
                seen.append(req)
                await peer.send(ok(req["id"], answer))

        nursery.start_soon(daemon)
        assert (await session.advance_epoch()).epoch == 4
        assert [r["method"] for r in seen] == ["get_neuron", "advance_epoch"]
        params = seen[1]["params"]
        assert params["expected_epoch"] == 3
        assert_signed_by(neuron, "advance_epoch", params)
        await client.aclose()

    async def test_trio_session_sends_the_prog_fences(self, nursery: trio.Nursery) -> None:
        """TrioSession also always sends expected_state_version and before (from get_prog)."""
        client, peer = await trio_pair(nursery)
        neuron = Neuron.generate()
        session = TrioSession(client, neuron)
        seen: list[dict[str, Any]] = []

        async def daemon() -> None:
            changed = {"prog": "p", "state": "active", "state_version": 5}
            for answer in (PROG, changed, PROG, {"released": 0}):
                req = await peer.request()
                seen.append(req)
                await peer.send(ok(req["id"], answer))

        nursery.start_soon(daemon)
        await session.set_prog_state("p", "active")
        await session.recover_reservations("p")
        assert [r["method"] for r in seen] == [
            "get_prog",
            "set_prog_state",
            "get_prog",
            "recover_reservations",
        ]
        state, recover = seen[1]["params"], seen[3]["params"]
        assert (state["expected_state"], state["expected_state_version"]) == ("paused", 4)
        assert recover["before"] == 12
        assert_signed_by(neuron, "set_prog_state", state)
        assert_signed_by(neuron, "recover_reservations", recover)
        await client.aclose()


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
