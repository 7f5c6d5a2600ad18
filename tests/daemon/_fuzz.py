"""The shared daemon of the wire's fuzz tests and the raw wire they speak.

``Target`` is one real daemon process (an actor with ops in several
states, and a snapshot of everything a refused request must leave alone);
``Wire`` one raw connection that decodes every frame the daemon sends
strictly. The fixtures ``target`` (one per test module) and ``unchanged``
are in tests/daemon/conftest.py; the tests are tests/daemon/test_fuzz_*.py.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator
from typing import Any

import cbor2

from tests.daemon.harness import Actor, Daemon, Env
from wardd.protocol import ErrorReply, ProtocolError, Response, decode_item, parse_reply

__all__ = ["HELLO_PARAMS", "MAX_FRAME", "Closed", "Target", "Wire", "deep", "end_wire", "framed"]

MAX_FRAME = 1 << 20


def framed(body: bytes) -> bytes:
    """``body`` behind its length prefix, as the wire carries it."""
    return struct.pack(">I", len(body)) + body


def deep(n: int, leaf: Any = 0, *, as_map: bool = False) -> Any:
    """``leaf`` inside ``n`` nested arrays (maps with ``as_map``)."""
    for _ in range(n):
        leaf = {"k": leaf} if as_map else [leaf]
    return leaf


class Closed(Exception):
    """The daemon closed the connection (EOF or reset)."""


class Wire:
    """One raw connection: frames out, strictly decoded frames in."""

    def __init__(self, path: str, *, timeout: float = 15.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.next_id = 1000

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_frame(self, body: bytes) -> None:
        self.send(framed(body))

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self.next_id += 1
        self.send_frame(cbor2.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return self.next_id

    def frame(self) -> Any:
        """The next frame from the daemon, decoded strictly; raises Closed at EOF."""
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                assert 1 <= n <= MAX_FRAME, f"the daemon sent a frame of length {n}"
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4 : 4 + n], self.buf[4 + n :]
                    return decode_item(body)  # the daemon never sends a bad frame
            try:
                chunk = self.sock.recv(1 << 16)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise Closed
            self.buf += chunk

    def reply(self) -> Response | ErrorReply:
        """The next reply, which must be a well-formed reply (contract §4)."""
        item = self.frame()
        try:
            return parse_reply(item)
        except ProtocolError as err:
            raise AssertionError(f"malformed reply from the daemon: {err}: {item!r:.300}") from None

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        rid = self.request(method, params)
        r = self.reply()
        assert r.id == rid
        if isinstance(r, ErrorReply):
            raise r.error
        return r.result

    def hello(self) -> Wire:
        self.send_frame(cbor2.dumps({"id": 0, "method": "hello", "params": HELLO_PARAMS}))
        r = self.reply()
        assert isinstance(r, Response) and r.result["protocol"] == 1, r
        return self

    def at_eof(self) -> bool:
        try:
            self.frame()
        except Closed:
            return True
        return False

    def close(self) -> None:
        self.sock.close()


HELLO_PARAMS = {"protocol": 1, "client": "fuzz"}


# -- one shared daemon ----------------------------------------------------------------------


class Target:
    """The shared daemon, an actor with ops in several states, and a snapshot."""

    def __init__(self) -> None:
        # the held token must not expire; and no pruner: its look (every
        # prune_interval_s) writes two batches of its own, which a batch that
        # straddles it would take for a write by a refused request
        self.env = Env(workers=2, token_ttl_s=10**6, retention_s=0)
        self.daemon = Daemon(self.env, shared=True)
        self.deaths: list[str] = []
        self.cases = 0
        try:
            self.actor = self._populate()
        except BaseException:
            self.daemon.cleanup()
            raise
        self.ops = ["fz-pending", "fz-retained", "fz-unknown", "fz-prepared"]
        self.wire: Wire | None = None

    def _populate(self) -> Actor:
        self.daemon.start()
        a = Actor(self.daemon, acts=("echo", "ledger", "boom"))
        a.submit("fz-pending", "echo", b"p")
        a.submit("fz-retained", "echo", b"r")
        a.invoke("fz-retained")
        a.submit("fz-unknown", "boom")
        a.invoke("fz-unknown")
        a.submit("fz-prepared", "ledger", b"t")
        self.token, _ = a.prepare("fz-prepared")  # held on a.client for the module's life
        return a

    @property
    def path(self) -> str:
        return str(self.env.socket)

    def alive(self) -> bool:
        return self.daemon.proc is not None and self.daemon.proc.poll() is None

    def answers(self) -> bool:
        try:
            with contextlib.closing(Wire(self.path, timeout=10).hello()) as w:
                return w.call("status")["boot"] == self.daemon.boot
        except (OSError, Closed, AssertionError):
            return False

    def ensure_alive(self) -> None:
        """Restart a dead (or dying) daemon so the next case starts clean; the death
        is recorded for the batch's check."""
        if self.alive() and (self.wire is not None or self.answers()):
            return
        assert self.daemon.proc is not None
        try:
            self.daemon.proc.wait(30)  # a dying daemon: let it finish exiting
        except Exception:  # noqa: BLE001 - a hung one is killed
            self.daemon.proc.kill()
            self.daemon.proc.wait()
        self.deaths.append(self.daemon.log_text()[-4000:])
        self.daemon.close_clients()
        self.daemon.start()
        self.actor.client = self.daemon.connect()
        self.actor.bind(0)  # a new boot inherits no placement
        self.wire = None

    @contextlib.contextmanager
    def case(self) -> Iterator[None]:
        """One fuzz case: a live daemon before; a failed case leaves no stale connection."""
        self.ensure_alive()
        self.cases += 1
        try:
            yield
        except BaseException:
            self.drop_wire()
            raise

    def greeted(self) -> Wire:
        """A greeted connection reused across cases until the daemon closes it."""
        if self.wire is None:
            self.wire = Wire(self.path).hello()
        return self.wire

    def drop_wire(self) -> None:
        if self.wire is not None:
            self.wire.close()
            self.wire = None

    def snapshot(self) -> dict[str, Any]:
        with contextlib.closing(Wire(self.path).hello()) as w:
            nid = self.actor.id
            st = w.call("status")
            snap: dict[str, Any] = {
                "boot": st["boot"],
                "operations": st["operations"],
                "unknown_attempts": st["unknown_attempts"],
                "writer_batches": st["writer"]["batches"],
                "neuron": w.call("get_neuron", {"neuron": nid}),
                "prog": w.call("get_prog", {"neuron": nid, "prog": self.actor.prog}),
                "attempts": {
                    s: w.call("list_attempts", {"state": s})["attempts"]
                    for s in ("unknown", "running", "prepared")
                },
            }
            for op in self.ops:
                snap[op] = w.call("get_operation", {"neuron": nid, "op": op})
                snap[op + ".history"] = w.call("history", {"neuron": nid, "op": op})
        return snap

    def cleanup(self) -> None:
        self.drop_wire()
        self.daemon.cleanup()


def end_wire(w: Wire) -> None:
    """Shut the connection down (which wakes a thread blocked on it), then close it."""
    with contextlib.suppress(OSError):
        w.sock.shutdown(socket.SHUT_RDWR)
    w.close()
