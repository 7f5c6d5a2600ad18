"""Connections that misbehave against one shared real daemon (contract §3.1,
§3.7, §4): slow senders (a byte at a time), many idle connections and a
pipelined burst neither stall other clients nor change the outcome of a
request the daemon admitted; a request's effect does not depend on its
connection staying open (tests/daemon/_fuzz.py holds the shared daemon)."""

from __future__ import annotations

import contextlib
import random
import socket
import struct

import cbor2

from tests._poll import wait_for
from tests.daemon._fuzz import HELLO_PARAMS, Closed, Wire, end_wire, framed
from tests.daemon.harness import NETWORK
from wardd.protocol import Response


class TestSlowHalfClosedIdle:
    def test_byte_at_a_time_senders_interleaved_with_fast_clients(self, unchanged):
        """Twenty connections each sending hello+status one byte per round: all answered,
        and a fast client is answered between every round."""
        t = unchanged
        slow = [Wire(t.path) for _ in range(20)]
        stream = framed(cbor2.dumps({"id": 0, "method": "hello", "params": HELLO_PARAMS}))
        stream += framed(cbor2.dumps({"id": 1, "method": "status", "params": {}}))
        fast = Wire(t.path).hello()
        for i in range(len(stream)):
            for w in slow:
                w.send(stream[i : i + 1])
            if i % 8 == 0:
                assert fast.call("list_workers")["workers"]
        for w in slow:
            assert isinstance(w.reply(), Response)
            r = w.reply()
            assert isinstance(r, Response) and r.id == 1 and r.result["boot"] == t.daemon.boot
            w.close()
        fast.close()

    def test_thousand_idle_connections_do_not_stop_status(self, unchanged):
        """1,000 idle sockets (greeted, ungreeted, mid-header, mid-body) cost nothing."""
        t = unchanged
        base = Wire(t.path).hello()
        before = base.call("status")["connections"]
        idle = []
        for i in range(1000):
            w = Wire(t.path)
            if i % 4 == 1:
                w.hello()
            elif i % 4 == 2:
                w.send(b"\x00\x00")  # half a header
            elif i % 4 == 3:
                w.send(struct.pack(">I", 100) + b"\xa3")  # a body that never completes
            idle.append(w)
        # accepted at the daemon's own pace
        wait_for(
            lambda: base.call("status")["connections"] >= 1000 + 1,
            20,
            "the idle connections to be accepted",
        )
        with contextlib.closing(Wire(t.path).hello()) as fresh:
            assert fresh.call("get_neuron", {"neuron": t.actor.id})["neuron"] == t.actor.id
        for w in idle:
            w.close()
        wait_for(
            lambda: base.call("status")["connections"] <= before,
            20,
            "the idle connections to be released",
        )
        base.close()

    def test_a_flood_of_pipelined_requests_is_answered_or_overloaded(self, unchanged, start_thread):
        """2,000 requests in one write: each gets one reply by id (a result or
        ``overloaded`` past max_in_flight), and the connection stays usable."""
        t = unchanged
        w = Wire(t.path).hello()
        ids = list(range(1, 2001))
        burst = b"".join(
            framed(cbor2.dumps({"id": i, "method": "get_neuron", "params": {"neuron": t.actor.id}}))
            for i in ids
        )

        def send() -> None:
            with contextlib.suppress(OSError):  # the test failed and ended the connection
                w.send(burst)

        # the daemon may stop reading until we read (backpressure); a failure
        # must not leave the sender blocked: shutdown wakes its sendall
        sender = start_thread(send, stop=lambda: end_wire(w))
        seen: dict[int, str] = {}
        while len(seen) < len(ids):
            r = w.reply()
            assert r.id not in seen, f"two replies to id {r.id}"
            seen[r.id] = "ok" if isinstance(r, Response) else r.error.code
        sender.join(15)
        assert set(seen) == set(ids) and set(seen.values()) <= {"ok", "overloaded"}
        assert w.call("status")["boot"] == t.daemon.boot
        w.close()

    def test_half_closed_mid_frame_applies_nothing(self, unchanged):
        """A signed write cut short by EOF is never admitted."""
        t = unchanged
        signed = t.actor.neuron.sign(
            "submit", {"prog": t.actor.prog, "op": "never", "act": "echo", "args": b""}, NETWORK
        )
        body = cbor2.dumps({"id": 3, "method": "submit", "params": signed})
        w = Wire(t.path).hello()
        w.send(framed(body)[:-1])
        w.sock.shutdown(socket.SHUT_WR)
        assert w.at_eof()
        w.close()
        with contextlib.closing(Wire(t.path).hello()) as r:
            rid = r.request("get_operation", {"neuron": t.actor.id, "op": "never"})
            reply = r.reply()
            assert reply.id == rid and reply.error.code == "unknown_operation"


def _half_close(w: Wire) -> None:
    """Close our sending side, then read until the daemon closes (the reply
    may or may not come before the close)."""
    w.sock.shutdown(socket.SHUT_WR)
    while True:
        try:
            w.reply()
        except Closed:
            break
    w.close()


def test_a_write_sent_before_a_half_close_is_applied_exactly_once(target):
    """contract §3.1: a request's effect does not depend on its connection staying open."""
    t = target
    t.ensure_alive()
    op = f"half-{random.randrange(1 << 30)}"
    signed = t.actor.neuron.sign(
        "submit", {"prog": t.actor.prog, "op": op, "act": "echo", "args": b"h"}, NETWORK
    )
    w = Wire(t.path).hello()
    w.send_frame(cbor2.dumps({"id": 3, "method": "submit", "params": signed}))
    _half_close(w)

    def applied() -> bool:
        try:
            t.actor.history(op)
        except Exception:  # noqa: BLE001 - unknown_operation until it is applied
            return False
        return True

    wait_for(applied, 20, "the admitted submit to be applied")
    hist = t.actor.history(op)
    assert [r["kind"] for r in hist] == ["submitted"]
    t.ops.append(op)  # now part of the snapshot


def test_a_prepare_on_a_half_closed_connection_drops_its_token(target):
    """contract §3.2.2/§3.6: the prepared attempt is voided with reason token_dropped."""
    t = target
    t.ensure_alive()
    op = f"drop-{random.randrange(1 << 30)}"
    t.actor.submit(op, "ledger", b"d")
    signed = t.actor.neuron.sign("prepare", t.actor.prepare_params(op), NETWORK)
    w = Wire(t.path).hello()
    w.send_frame(cbor2.dumps({"id": 4, "method": "prepare", "params": signed}))
    _half_close(w)

    def voided() -> bool:
        atts = t.actor.op(op)["attempts"]
        return bool(atts) and atts[0]["state"] == "void"

    wait_for(voided, 20, "the dropped token's attempt to be void")
    atts = t.actor.op(op)["attempts"]
    assert atts[0]["reason"] == "token_dropped" and atts[0]["claimed"] is False
    assert f"{t.actor.id}/{op}/1" not in "".join(t.env.ledger_lines())
    t.ops.append(op)
