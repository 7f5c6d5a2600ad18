"""Frames written by hand against one shared real daemon (contract §4): the
bounds of a frame's length and depth, map keys whose hashes collide, and
the frames that once killed the daemon. The fuzzed frames are in
test_fuzz_wire.py (the same shared daemon: tests/daemon/_fuzz.py)."""

from __future__ import annotations

import contextlib
import math
import struct
import sys
from pathlib import Path
from typing import Any

import cbor2
import pytest

from tests.daemon._fuzz import MAX_FRAME, Closed, Target, Wire, deep
from wardd.protocol import MAX_DEPTH, ErrorReply

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from _hostile import colliding_keys  # noqa: E402


class TestFrameBounds:
    """Declared lengths and nesting at the edges of contract §4."""

    @pytest.mark.parametrize("length", [0, MAX_FRAME + 1, 2**31, 2**32 - 1])
    def test_a_length_outside_bounds_is_refused_on_the_header_alone(self, unchanged, length):
        """bad_frame without the daemon waiting for (or buffering) the body."""
        w = Wire(unchanged.path).hello()
        w.send(struct.pack(">I", length))
        r = w.reply()
        assert isinstance(r, ErrorReply) and r.error.code == "bad_frame" and r.id is None
        assert w.at_eof()
        w.close()

    def test_a_body_of_exactly_max_frame_is_read_and_answered(self, unchanged):
        """The largest legal frame is a request like any other (here: an unknown param)."""
        w = Wire(unchanged.path).hello()
        pad = b"\x00" * (MAX_FRAME - 64)
        item = {"id": 9, "method": "status", "params": {"pad": pad}}
        body = cbor2.dumps(item)
        body = cbor2.dumps({**item, "params": {"pad": pad + b"\x00" * (MAX_FRAME - len(body))}})
        assert len(body) == MAX_FRAME
        w.send_frame(body)
        r = w.reply()
        assert isinstance(r, ErrorReply) and (r.id, r.error.code) == (9, "bad_request")
        assert w.call("status")["boot"] == unchanged.daemon.boot
        w.close()

    @pytest.mark.parametrize("as_map", [False, True])
    def test_depth_64_is_a_request_error_and_65_a_bad_frame(self, unchanged, as_map):
        """The top-level item is at depth 1: 64 nested containers are fine, 65 are not."""
        w = Wire(unchanged.path).hello()
        w.send_frame(cbor2.dumps(deep(MAX_DEPTH, as_map=as_map)))
        r = w.reply()
        assert isinstance(r, ErrorReply) and r.error.code == "protocol_error"
        w.send_frame(cbor2.dumps(deep(MAX_DEPTH + 1, as_map=as_map)))
        r = w.reply()
        assert isinstance(r, ErrorReply) and r.error.code == "bad_frame"
        assert w.at_eof()
        w.close()


class TestHashFlood:
    """contract §4 [2.3]: a map key is text or bytes. Keys with predictable
    hashes (integers, the tuples array keys become) let a 64 KiB frame of
    colliding keys cost the event loop half a second (the daemon was then
    unavailable to every client, and its watchdog would have killed it)."""

    @pytest.mark.parametrize("size", [4096, 65536, MAX_FRAME], ids=["4k", "64k", "max"])
    def test_a_frame_of_colliding_keys_is_a_bad_frame(self, unchanged, size):
        """A map of array keys sharing one hash, whatever its size (decoded on the
        event loop or on a thread): bad_frame with id null, closed; others are served."""
        body = colliding_keys(size)
        assert len(body) <= size
        with contextlib.closing(Wire(unchanged.path).hello()) as w:
            w.send_frame(body)
            r = w.reply()
            assert isinstance(r, ErrorReply) and (r.id, r.error.code) == (None, "bad_frame")
            assert "map key" in r.error.message
            assert w.at_eof()
        with contextlib.closing(Wire(unchanged.path).hello()) as other:
            assert other.call("status")["boot"] == unchanged.daemon.boot

    @pytest.mark.parametrize(
        "params",
        [{1: 0}, {"a": {2**61 - 1: 0}}, {(1, 2): 0}, {1.5: 0}, {None: 0}],
        ids=["int", "nested int", "array", "float", "null"],
    )
    def test_a_request_with_a_key_that_is_not_text_or_bytes_is_a_bad_frame(self, unchanged, params):
        """The same answer a duplicate key gets, before any dict is built."""
        with contextlib.closing(Wire(unchanged.path).hello()) as w:
            w.send_frame(cbor2.dumps({"id": 3, "method": "status", "params": params}))
            r = w.reply()
            assert isinstance(r, ErrorReply) and (r.id, r.error.code) == (None, "bad_frame")
            assert w.at_eof()

    def test_byte_string_keys_are_keys_like_text(self, unchanged):
        """Bytes keys are well-formed (their hash is keyed too): a request error,
        not a bad frame, and the connection stays open."""
        with contextlib.closing(Wire(unchanged.path).hello()) as w:
            w.send_frame(cbor2.dumps({"id": 4, "method": "status", "params": {b"k": 0}}))
            r = w.reply()
            assert isinstance(r, ErrorReply) and (r.id, r.error.code) == (4, "bad_request")
            assert w.call("status")["boot"] == unchanged.daemon.boot


class TestRegressions:
    """Daemon bugs this file found (fixed in e9d5b84): a param key the daemon echoed in
    ``bad_request.data.param`` and could not encode back made ``Connection.send`` raise
    out of the request nursery, and the daemon exited 1."""

    def test_a_param_key_holding_a_nan_map_key_does_not_kill_the_daemon(self, target):
        """A frame must never stop the daemon (contract §4); since [2.3] this one
        is a bad frame (a key that is not text or bytes)."""
        self._send_and_check(target, {cbor2.frozendict({math.nan: 1}): 1}, "bad_frame")

    def test_a_deeply_nested_param_key_does_not_kill_the_daemon(self, target):
        """A frame must never stop the daemon (contract §4); since [2.3] this one
        is a bad frame (a key that is not text or bytes)."""
        key: Any = 0
        for _ in range(MAX_DEPTH - 2):
            key = (key,)
        self._send_and_check(target, {key: 1}, "bad_frame")

    def test_an_error_message_stays_text_when_the_echo_is_too_large(self, target):
        """Every error reply has a text message, whatever the request held."""
        target.ensure_alive()
        w = Wire(target.path).hello()
        w.send_frame(cbor2.dumps({"id": 1, "method": "status", "params": {b"\x00" * 300_000: 1}}))
        r = w.reply()  # parse_reply refuses a non-text message
        assert isinstance(r, ErrorReply) and r.error.code == "bad_request"
        w.close()

    @staticmethod
    def _send_and_check(t: Target, params: dict[Any, Any], code: str = "bad_request") -> None:
        t.ensure_alive()
        w = Wire(t.path).hello()
        w.send_frame(cbor2.dumps({"id": 1, "method": "status", "params": params}))
        try:
            r = w.reply()
        except Closed:
            r = None
        w.close()
        died = not t.alive()
        if died:
            t.ensure_alive()  # the next tests get a daemon again
            t.deaths.clear()
        assert not died, "the daemon died"
        assert isinstance(r, ErrorReply) and r.error.code == code
