"""What one client may cost the daemon on the wire, with real processes (contract §4 [2.3]).

Histories that once broke it:

- a stop waited for request decoding: two 1 MiB frames of colliding map
  keys were decoded on threads that could not be cancelled, and SIGTERM
  took 276.8 s to exit (systemd's TimeoutStopSec is 45 s);
- a slow reader got a reply cut mid-frame on a connection that stayed
  open, so every later reply on it was misframed.
"""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tests._poll import wait_for
from tests.daemon.harness import Actor, Daemon, boot_row
from wardd.protocol import ProtocolError, decode_item, parse_reply

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from _hostile import colliding_keys, indefinite_text_chunks  # noqa: E402

pytestmark = pytest.mark.timeout(240)

#: A generous bound on a stop with nothing to wait for (the shutdown grace is
#: not involved: no call is running). Not a speed assertion: the history it
#: pins took minutes.
STOP_DEADLINE_S = 60.0


def stop_promptly(d: Daemon) -> int:
    """SIGTERM, then the exit status, within `STOP_DEADLINE_S`."""
    d.proc.send_signal(signal.SIGTERM)
    try:
        return d.proc.wait(STOP_DEADLINE_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"no exit {STOP_DEADLINE_S:.0f} s after SIGTERM")


def raw_connection(d: Daemon, *, rcvbuf: int | None = None, timeout: float = 30.0) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(timeout)
    s.connect(str(d.env.socket))
    return s


def framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def read_to_eof(s: socket.socket) -> tuple[bytes, bool]:
    """Everything the daemon sends until it closes (True) or stays silent for
    the socket's timeout (False: the connection was left open)."""
    data = bytearray()
    while True:
        try:
            chunk = s.recv(1 << 16)
        except (ConnectionResetError, BrokenPipeError):
            return bytes(data), True
        except TimeoutError:
            return bytes(data), False
        if not chunk:
            return bytes(data), True
        data += chunk


def whole_frames(data: bytes) -> tuple[list[Any], int]:
    """The replies in `data`, each a whole frame holding a well-formed reply,
    and how many bytes are left after the last whole frame (a cut frame)."""
    replies = []
    pos = 0
    while len(data) - pos >= 4:
        (n,) = struct.unpack_from(">I", data, pos)
        assert 1 <= n <= 1 << 20, f"a frame length of {n} at byte {pos}: misframed"
        if len(data) - pos - 4 < n:
            break
        body = data[pos + 4 : pos + 4 + n]
        try:
            replies.append(parse_reply(decode_item(body)))
        except Exception as exc:  # noqa: BLE001 - the assertion says which frame
            raise AssertionError(f"the frame at byte {pos} is not a reply: {exc!r}") from None
        pos += 4 + n
    return replies, len(data) - pos


class TestAStopNeverWaitsForDecoding:
    def test_a_stop_is_prompt_and_clean_beside_frames_of_colliding_keys(
        self, make_daemon: Any
    ) -> None:
        """Two 1 MiB frames of colliding map keys, then SIGTERM: the daemon exits
        0 with its clean mark well within the deadline (it once took 276.8 s),
        and both connections are closed, with nothing but whole frames on them."""
        d = make_daemon()
        boot = d.boot
        conns = [raw_connection(d) for _ in range(2)]
        try:
            body = colliding_keys(1 << 20)
            for s in conns:
                s.sendall(framed(body))
            assert stop_promptly(d) == 0
            assert boot_row(d.env, boot)[0] == 1  # the clean-stop mark
            for s in conns:
                data, closed = read_to_eof(s)
                assert closed
                replies, cut = whole_frames(data)
                assert cut == 0
                assert all(r.error.code == "bad_frame" for r in replies)
        finally:
            for s in conns:
                s.close()

    def test_a_request_still_being_decoded_when_the_stop_begins_is_dropped(
        self, make_daemon: Any
    ) -> None:
        """An 8 MiB frame (max_frame raised to allow it) whose decoding takes
        seconds on a thread, then SIGTERM at once: the request is dropped
        (``decode_dropped``), its connection closed without a reply, and the
        daemon exits 0 with its clean mark without waiting for the decode."""
        size = 8 << 20
        d = make_daemon(max_frame=size)
        boot = d.boot
        s = raw_connection(d)
        try:
            s.sendall(framed(indefinite_text_chunks(size)))
            assert stop_promptly(d) == 0
            assert boot_row(d.env, boot)[0] == 1  # the clean-stop mark
            assert '"decode_dropped"' in d.log_text()
            data, closed = read_to_eof(s)
            assert closed and data == b""
        finally:
            s.close()


class TestASlowReaderNeverGetsACutFrameOnAnOpenConnection:
    def test_a_reply_not_written_whole_in_time_closes_the_connection(
        self, make_daemon: Any
    ) -> None:
        """A client pipelines 40 reads with ~60 KB replies on a small receive
        buffer and reads nothing until the daemon gives up on it: the daemon
        closes the connection (status.connections drops), and every frame it
        sent is whole but possibly the last, after which nothing follows."""
        d = make_daemon()
        a = Actor(d, acts=("echo",))
        a.submit("big", "echo", b"x" * 60_000)
        watcher = d.connect()
        s = raw_connection(d, rcvbuf=4096, timeout=15.0)
        try:
            s.sendall(
                framed(
                    cbor2.dumps(
                        {"id": 0, "method": "hello", "params": {"protocol": 1, "client": "slow"}}
                    )
                )
            )
            hello, _ = whole_frames(_read_frame(s))
            assert hello[0].id == 0
            open_before = watcher.call("status", {})["connections"]
            ids = list(range(1, 41))
            params = {"neuron": a.id, "op": "big"}
            s.sendall(
                b"".join(
                    framed(cbor2.dumps({"id": i, "method": "get_operation", "params": params}))
                    for i in ids
                )
            )
            # the real event: the daemon closes our connection (a bounded wait;
            # a daemon that never does is caught by the assertions below)
            try:
                wait_for(
                    lambda: watcher.call("status", {})["connections"] < open_before,
                    timeout=60,
                    what="the slow connection to be closed",
                )
            except AssertionError:
                pass
            data, closed = read_to_eof(s)
            # every frame is whole and a reply of ours: bytes sent after a cut
            # frame would misframe the rest; a cut frame can only be the last
            # bytes before the close
            replies, _cut = whole_frames(data)
            assert closed, "the connection stayed open"
            assert {r.id for r in replies} <= set(ids)
            assert all(r.result["op"] == "big" for r in replies)
            assert len(replies) < len(ids)  # the point of the history: some could not be sent
            assert '"reply_timeout"' in d.log_text()
        finally:
            s.close()


def _read_frame(s: socket.socket) -> bytes:
    """One whole frame's bytes (the hello reply)."""
    data = b""
    # not a poll (tests/_poll.py): it reads the socket's stream, chunk by chunk
    deadline = time.monotonic() + 30
    while len(data) < 4 or len(data) < 4 + struct.unpack_from(">I", data)[0]:
        assert time.monotonic() < deadline, "no hello reply"
        chunk = s.recv(1 << 16)
        if not chunk:
            raise ProtocolError("closed before the hello reply")
        data += chunk
    return data
