"""wardd.client's sans-IO core (``ClientCore``), driven with bytes: requests
out, replies in, failures said to every waiter."""

from __future__ import annotations

import pytest

from tests.unit._client_peer import HELLO, NETWORK, decode_requests, err, frame, ok, ready_core
from wardd.client import (
    ClientCore,
    ConnectionClosed,
    FrameTooLarge,
    NotSent,
    RemoteProtocolError,
    result_of,
)
from wardd.protocol import ERRORS, BadFrame, ProtocolError, TokenVoid, UnknownOperation, WarddError


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
