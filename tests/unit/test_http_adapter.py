"""The ``http`` adapter in this process, against a real HTTP server on 127.0.0.1 (contract §6).

The daemon-level rules are in tests/daemon/test_http_acts.py; here, the
table's checks and the parts a daemon test reaches only slowly: the body
bound and its redaction, the receipt's answers and what the claim records,
a secret rotated between calls, an abort that comes before the call, and
the adapter's stop.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._poll import wait_for
from tests.daemon._http_peer import Peer, Received, Reply
from wardd.adapters import (
    ActRequest,
    AdapterConfigError,
    DefiniteFailure,
    HttpAdapter,
    OutcomeUnknown,
    SentCall,
    build_adapter,
)
from wardd.adapters._http import KEY_NAMESPACE, _Flight, key_value, secret_forms
from wardd.daemon.core.attempts import resend_refusal
from wardd.daemon.core.records import Grant

MAX_FRAME = 1 << 20


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for p in started:
        p.close()


def adapter(**table: object) -> HttpAdapter:
    got = build_adapter("pay", {"adapter": "http", **table}, max_frame=MAX_FRAME)
    assert isinstance(got, HttpAdapter)
    return got


def request(op: str = "op", args: bytes = b"{}") -> ActRequest:
    return ActRequest(neuron="n1", op=op, attempt=1, act="pay", args=args)


class TestTable:
    def test_defaults(self):
        """POST, Idempotency-Key as the key, 30 s, the default no-effect list, the frame bound."""
        a = adapter(url="https://api.example.com/v1/charges?x=1")
        assert (a.target.host, a.target.port, a.target.target) == (
            "api.example.com",
            443,
            "/v1/charges?x=1",
        )
        assert (a.method, a.idempotency_header, a.idempotency_format) == (
            "POST",
            "Idempotency-Key",
            "key",
        )
        assert a.timeout_s == 30 and a.max_response_bytes == MAX_FRAME - 65536
        assert a.no_effect_statuses == {400, 401, 403, 404, 405, 415, 422}
        assert a.in_process and a.abortable and not a.receipt_supported

    def test_the_namespace_is_the_documented_one(self):
        """uuid5(NAMESPACE_URL, "wardd:idempotency-key"), as docs/configuration.md says."""
        assert uuid.uuid5(uuid.NAMESPACE_URL, "wardd:idempotency-key") == KEY_NAMESPACE
        assert key_value("n/o/1", "uuid5") == str(uuid.uuid5(KEY_NAMESPACE, "n/o/1"))
        assert key_value("n/o/1", "key") == "n/o/1"

    @pytest.mark.parametrize(
        "table, key",
        [
            ({}, "url"),
            ({"url": "ftp://h/"}, "url"),
            ({"url": "http:///x"}, "url"),
            ({"url": "http://u:p@h/x"}, "url"),
            ({"url": "http://h/x#f"}, "url"),
            ({"url": "http://h:99999/x"}, "url"),
            ({"url": "http://h/a b"}, "url"),
            ({"url": "http://h/", "method": "PO ST"}, "method"),
            ({"url": "http://h/", "headers": {"a:b": "v"}}, 'headers."a:b"'),
            ({"url": "http://h/", "headers": {"X": "a\nb"}}, 'headers."X"'),
            ({"url": "http://h/", "headers": {"X": "é€"}}, 'headers."X"'),
            ({"url": "http://h/", "headers": {"Content-Length": "1"}}, 'headers."Content-Length"'),
            ({"url": "http://h/", "headers": {"X": 1}}, 'headers."X"'),
            ({"url": "http://h/", "headers": {"X": {"path": "/a"}}}, 'headers."X".path'),
            ({"url": "http://h/", "headers": {"X": {"file": "rel"}}}, 'headers."X".file'),
            (
                {"url": "http://h/", "headers": {"IDEMPOTENCY-key": "v"}},
                'headers."IDEMPOTENCY-key"',
            ),
            ({"url": "http://h/", "headers": {"X": "1", "x": "2"}}, 'headers."x"'),
            ({"url": "http://h/", "idempotency_header": "a b"}, "idempotency_header"),
            ({"url": "http://h/", "idempotency_format": "uuid4"}, "idempotency_format"),
            ({"url": "http://h/", "timeout_s": -1}, "timeout_s"),
            ({"url": "http://h/", "timeout_s": True}, "timeout_s"),
            ({"url": "http://h/", "no_effect_statuses": [99]}, "no_effect_statuses[0]"),
            ({"url": "http://h/", "no_effect_statuses": [404, 201]}, "no_effect_statuses[1]"),
            ({"url": "http://h/", "no_effect_statuses": 404}, "no_effect_statuses"),
            ({"url": "http://h/", "receipt_url": "http://h/k"}, "receipt_url"),
            ({"url": "http://h/", "receipt_url": "http://{key}/k"}, "receipt_url"),
            ({"url": "http://h/", "receipt_url": "ftp://h/{key}"}, "receipt_url"),
            (
                {"url": "http://h/", "idempotency_header": "", "receipt_url": "http://h/{key}"},
                "receipt_url",
            ),
            ({"url": "http://h/", "receipt": "replay"}, "replay_window_s"),
            ({"url": "http://h/", "receipt": "replay", "replay_window_s": -1}, "replay_window_s"),
            ({"url": "http://h/", "receipt": "replay", "replay_window_s": True}, "replay_window_s"),
            ({"url": "http://h/", "replay_window_s": 60}, "replay_window_s"),
            ({"url": "http://h/", "receipt": "url"}, "receipt"),
            ({"url": "http://h/", "receipt": True}, "receipt"),
            (
                {
                    "url": "http://h/",
                    "receipt": "replay",
                    "replay_window_s": 60,
                    "receipt_url": "http://h/{key}",
                },
                "receipt",
            ),
            (
                {
                    "url": "http://h/",
                    "receipt": "replay",
                    "replay_window_s": 60,
                    "idempotency_header": "",
                },
                "receipt",
            ),
            ({"url": "http://h/", "max_response_bytes": MAX_FRAME}, "max_response_bytes"),
            ({"url": "http://h/", "max_arg_bytes": 0}, "max_arg_bytes"),
            ({"url": "http://h/", "bogus": 1}, "bogus"),
        ],
    )
    def test_refusals_name_the_key(self, table, key):
        with pytest.raises(AdapterConfigError) as ei:
            adapter(**table)
        assert ei.value.key == key

    def test_the_idempotency_header_may_be_set_when_none_is_sent(self):
        """With idempotency_header "", a header of that name is the operator's own."""
        a = adapter(url="http://h/", idempotency_header="", headers={"Idempotency-Key": "mine"})
        assert a.headers == (("Idempotency-Key", "mine"),)

    @pytest.mark.parametrize(
        "content, why",
        [(b"a" * 65537, "exceeds 64 KiB"), (b"a\nb", "NUL, CR or LF"), (b"a\0b", "NUL")],
    )
    def test_a_bad_secret_file_is_refused_without_its_content(self, tmp_path, content, why):
        f = tmp_path / "tok"
        f.write_bytes(content)
        with pytest.raises(AdapterConfigError) as ei:
            adapter(url="http://h/", headers={"A": {"file": str(f)}})
        assert ei.value.key == 'headers."A".file' and why in ei.value.reason
        assert "aaa" not in str(ei.value)


class TestCalls:
    def test_the_body_is_cut_at_max_response_bytes_and_a_secret_across_the_cut_is_redacted(
        self, peers, tmp_path
    ):
        """A body of 100 bytes with the secret straddling byte 64: 64 bytes kept,
        truncated, and no piece of the secret left at the end."""
        secret = b"Bearer-0123456789abcdef"
        (tmp_path / "tok").write_bytes(secret)
        body = b"x" * 60 + secret + b"y" * 17
        peer = Peer(lambda r: Reply(200, body))
        peers.append(peer)
        a = adapter(
            url=peer.url(),
            headers={"Authorization": {"file": str(tmp_path / "tok")}},
            max_response_bytes=64,
        )
        out = a.call(request())
        assert out["truncated"] is True and len(out["body"]) <= 64
        assert out["body"].startswith(b"x" * 60) and secret[:4] not in out["body"]
        assert peer.requests[0].headers["authorization"] == secret.decode()

    def test_a_token_echoed_without_its_scheme_is_redacted(self, peers, tmp_path):
        """The file holds ``Bearer <token>``; the server echoes ``<token>`` alone in a
        401's body, then in a 200's body and Location: it is in no error text, body
        or header kept."""
        token = "tok_0123456789abcdef"
        (tmp_path / "tok").write_text(f"Bearer {token}\n")

        def echo(r: Received) -> Reply:
            seen = r.headers["authorization"].split(" ", 1)[1].encode()
            if r.path == "/bad":
                return Reply(401, b'{"error":"invalid token ' + seen + b'"}')
            return Reply(200, b"ok " + seen, {"Location": "/t/" + seen.decode()})

        peer = Peer(echo)
        peers.append(peer)
        headers = {"Authorization": {"file": str(tmp_path / "tok")}}
        with pytest.raises(DefiniteFailure) as ei:
            adapter(url=peer.url("/bad"), headers=headers).call(request("a"))
        assert "invalid token [redacted]" in str(ei.value) and token not in str(ei.value)
        out = adapter(url=peer.url("/good"), headers=headers).call(request("b"))
        assert out["body"] == b"ok [redacted]" and out["headers"]["location"] == "/t/[redacted]"
        assert [r.headers["authorization"] for r in peer.requests] == [f"Bearer {token}"] * 2

    @pytest.mark.parametrize(
        "value, forms",
        [
            (b"Bearer 0123456789", [b"Bearer 0123456789", b"0123456789"]),
            (b"Basic  dXNlcjpwYXNz", [b"Basic  dXNlcjpwYXNz", b"dXNlcjpwYXNz"]),
            (b"Bearer 1234567", [b"Bearer 1234567"]),  # too short to stand alone
            (b"0123456789abcdef", [b"0123456789abcdef"]),  # no scheme
            (b"a:b 0123456789", [b"a:b 0123456789"]),  # "a:b" is no scheme
            (b"", []),
        ],
    )
    def test_the_secret_forms_redacted(self, value, forms):
        assert secret_forms(value) == forms

    def test_a_secret_rotated_between_calls_is_sent_and_an_unreadable_one_fails(
        self, peers, tmp_path
    ):
        """The file is read at every call: the new value goes out; once it is
        gone the call fails before anything is sent."""
        tok = tmp_path / "tok"
        tok.write_bytes(b"first\n")
        peer = Peer()
        peers.append(peer)
        a = adapter(url=peer.url(), headers={"Authorization": {"file": str(tok)}})
        a.call(request("a"))
        tok.write_bytes(b"second\n")
        a.call(request("b"))
        assert [r.headers["authorization"] for r in peer.requests] == ["first", "second"]
        tok.unlink()
        with pytest.raises(DefiniteFailure, match="nothing was sent"):
            a.call(request("c"))
        assert len(peer.requests) == 2

    def test_an_abort_before_the_call_sends_nothing_and_is_unknown(self, peers):
        peer = Peer()
        peers.append(peer)
        a = adapter(url=peer.url())
        a.abort("n1/op/1")
        with pytest.raises(OutcomeUnknown, match="before the request was sent"):
            a.call(request())
        assert peer.requests == [] and a.live == 0

    def test_after_kill_all_nothing_is_sent(self, peers):
        peer = Peer()
        peers.append(peer)
        a = adapter(url=peer.url())
        a.kill_all()
        with pytest.raises(DefiniteFailure, match="shut down"):
            a.call(request())
        assert peer.requests == []

    def test_a_kill_all_while_connecting_sends_nothing_and_fails(self):
        """kill_all while the call's connection is being made (the listener's
        accept queue is full, so the SYN waits for a retransmission): once the
        connection is up, nothing is sent and the call fails, not unknown."""
        listener = socket.create_server(("127.0.0.1", 0), backlog=0)
        filler = socket.create_connection(listener.getsockname())  # fills the accept queue
        a = adapter(url=f"http://127.0.0.1:{listener.getsockname()[1]}/pay")
        ended: list[BaseException] = []

        def call() -> None:
            try:
                a.call(request())
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                ended.append(exc)

        caller = threading.Thread(target=call)
        accepted: list[socket.socket] = []
        try:
            caller.start()
            wait_for(lambda: a.live != 0, 10, "the call to begin (then it is connecting)")
            assert a.live == 1
            a.kill_all()
            accepted.append(listener.accept()[0])  # the filler: room for the call's SYN
            listener.settimeout(30)
            conn, _ = listener.accept()
            accepted.append(conn)
            caller.join(30)
            assert not caller.is_alive()
            conn.settimeout(30)
            assert conn.recv(1024) == b""  # closed without a byte of the request
        finally:
            caller.join(30)
            for s in (*accepted, filler, listener):
                s.close()
        (exc,) = ended
        assert isinstance(exc, DefiniteFailure) and not isinstance(exc, OutcomeUnknown)
        assert "shut down; nothing was sent" in str(exc)

    def test_a_failed_tls_handshake_fails_and_sends_no_request(self, peers):
        """https:// to a server that speaks plain HTTP: the handshake fails, failed."""
        peer = Peer()
        peers.append(peer)
        a = adapter(url=peer.url().replace("http://", "https://"))
        with pytest.raises(DefiniteFailure, match="nothing was sent") as ei:
            a.call(request())
        assert "SSL" in str(ei.value)
        assert peer.requests == [] and a.live == 0

    def test_args_over_the_bound_fail_before_anything_is_sent(self, peers):
        peer = Peer()
        peers.append(peer)
        a = adapter(url=peer.url(), max_arg_bytes=4)
        with pytest.raises(DefiniteFailure):
            a.call(request(args=b"12345"))
        assert peer.requests == []


class TestReceipt:
    def receipt_peer(self, peers: list[Peer], status: int, body: bytes = b"v") -> Peer:
        peer = Peer(lambda r: Reply(status, body))
        peers.append(peer)
        return peer

    @pytest.mark.parametrize(
        "status, answer",
        [(200, "executed"), (404, "not_executed"), (500, "unknown"), (302, "unknown")],
    )
    def test_the_status_decides(self, peers, status, answer):
        peer = self.receipt_peer(peers, status)
        a = adapter(url=peer.url(), receipt_url=peer.url("/k/{key}?x=1"))
        got = a.receipt("n1/op/1", a.claim_info())
        assert got.answer == answer
        assert got.value == (b"v" if answer == "executed" else None)
        (r,) = peer.requests
        assert (r.method, r.path, r.body) == ("GET", "/k/n1%2Fop%2F1?x=1", b"")
        assert r.headers["idempotency-key"] == "n1/op/1"

    def test_an_unreachable_receipt_url_is_unknown(self):
        closed = socket.socket()
        try:
            closed.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{closed.getsockname()[1]}/k/{{key}}"
            a = adapter(url="http://h/", receipt_url=url)
            got = a.receipt("n1/op/1", a.claim_info())
        finally:
            closed.close()
        assert got.answer == "unknown" and "refused" in (got.detail or "")

    def test_the_claim_s_key_form_and_receipt_url_are_used(self, peers):
        """A claim made with uuid5 at one receipt URL is asked there, in uuid5,
        even once the act is reconfigured."""
        peer = self.receipt_peer(peers, 200)
        old = adapter(
            url=peer.url(), receipt_url=peer.url("/old/{key}"), idempotency_format="uuid5"
        )
        new = adapter(url=peer.url(), receipt_url=peer.url("/new/{key}"), idempotency_header="K")
        assert new.receipt("n1/op/1", old.claim_info()).answer == "executed"
        (r,) = peer.requests
        assert r.path == "/old/" + key_value("n1/op/1", "uuid5")
        assert r.headers["idempotency-key"] == key_value("n1/op/1", "uuid5")

    def test_a_claim_without_receipt_url_gets_no_not_executed(self, peers):
        peer = self.receipt_peer(peers, 404)
        before = adapter(url=peer.url())
        now = adapter(url=peer.url(), receipt_url=peer.url("/k/{key}"))
        got = now.receipt("n1/op/1", before.claim_info())
        assert got.answer == "unknown" and "without receipt_url" in (got.detail or "")

    def test_a_key_never_sent_gets_no_not_executed(self, peers):
        """A claim recorded with idempotency_header "" (a table from_table refuses
        now, but made before): the POST took effect, the server never saw a key,
        so its 404 for that key proves nothing and the answer stays unknown."""
        peer = Peer(lambda r: Reply(201 if r.method == "POST" else 404))
        peers.append(peer)
        keyless = HttpAdapter(
            tag="pay",
            target=adapter(url=peer.url("/pay")).target,
            max_arg_bytes=1024,
            max_response_bytes=1024,
            idempotency_header="",
            receipt_url=peer.url("/receipts/{key}"),
        )
        req = request()
        assert keyless.call(req)["status"] == 201
        got = keyless.receipt(req.idempotency_key, keyless.claim_info())
        assert got.answer == "unknown" and "sent no key" in (got.detail or "")
        now = adapter(url=peer.url("/pay"), receipt_url=peer.url("/receipts/{key}"))
        assert now.receipt(req.idempotency_key, keyless.claim_info()).answer == "unknown"
        assert [r.method for r in peer.requests] == ["POST", "GET", "GET"]
        assert "idempotency-key" not in peer.requests[0].headers

    def test_no_receipt_url_is_unknown_without_a_request(self):
        a = adapter(url="http://h/")
        assert a.receipt("n1/op/1", a.claim_info()).answer == "unknown"

    def test_a_never_claimed_attempt_is_not_executed_without_a_request(self, peers):
        """No claim (the daemon passes None): the call never began. The server,
        which would say 200, is not asked."""
        peer = self.receipt_peer(peers, 200)
        a = adapter(url=peer.url(), receipt_url=peer.url("/k/{key}"))
        got = a.receipt("n1/op/1", None)
        assert (got.answer, got.value) == ("not_executed", None)
        assert peer.requests == []


# whole responses whose every proper prefix is a cut one (docs/contract.md §6)
WHOLE_404 = (
    b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 9\r\n\r\nnot found"
)
WHOLE_200_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"


class TestCutResponses:
    """A status answers only once the response ended as its framing says: the
    header block by its blank line, the body by Content-Length or the last
    chunk. Cut anywhere before that, after the server had the request, it is
    unknown: never failed, succeeded, executed or not_executed."""

    @staticmethod
    def cutting(peers: list[Peer]) -> tuple[Peer, list[bytes]]:
        """A server that answers each request with the bytes last put in the list, then closes."""
        raw = [b""]
        peer = Peer(lambda r: Reply(raw=raw[-1]))
        peers.append(peer)
        return peer, raw

    @pytest.mark.parametrize("whole", [WHOLE_404, WHOLE_200_CHUNKED], ids=["404", "200-chunked"])
    def test_every_prefix_of_a_response_is_unknown_for_the_call_and_the_receipt(self, peers, whole):
        peer, raw = self.cutting(peers)
        a = adapter(url=peer.url(), receipt_url=peer.url("/k/{key}"))
        for n in range(len(whole)):
            raw.append(whole[:n])
            with pytest.raises(OutcomeUnknown) as ei:
                a.call(request(f"c{n}"))
            assert not isinstance(ei.value, DefiniteFailure), whole[:n]
            got = a.receipt(f"n1/r{n}/1", a.claim_info())
            assert (got.answer, got.value) == ("unknown", None), whole[:n]
        assert len(peer.requests) == 2 * len(whole)  # each call reached the server

    def test_the_whole_responses_are_definite(self, peers):
        """The control: the same bytes, whole, are a failed call and a not_executed
        receipt (404), a succeeded call and an executed receipt (200 chunked)."""
        peer, raw = self.cutting(peers)
        a = adapter(url=peer.url(), receipt_url=peer.url("/k/{key}"))
        raw.append(WHOLE_404)
        with pytest.raises(DefiniteFailure, match="HTTP 404"):
            a.call(request("a"))
        assert a.receipt("n1/a/1", a.claim_info()).answer == "not_executed"
        raw.append(WHOLE_200_CHUNKED)
        assert a.call(request("b"))["body"] == b"hello"
        assert a.receipt("n1/b/1", a.claim_info()).value == b"hello"

    @pytest.mark.parametrize(
        "raw, why",
        [
            (b"HTTP/1.1 404 Not Found\r\n", "header block never ended"),
            (b"HTTP/1.1 404 Not Fo", "header block never ended"),
            (b"HTTP/1.1 404 Not Found\r\nContent-Ty", "header block never ended"),
            (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n", "header block never ended"),
            (b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot", "IncompleteRead"),
            (b"HTTP/1.1 404 Not Found\r\n\r\nnot found", "its end is only the close"),
            (WHOLE_200_CHUNKED[:-2], "before its last chunk and trailer"),
            # an interim response before the final one: http.client returns it as the answer
            (
                b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"
                b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                "interim 103",
            ),
        ],
    )
    def test_a_cut_response_says_why(self, peers, raw, why):
        """The call's error names the cut and the status it had."""
        peer = Peer(lambda r: Reply(raw=raw))
        peers.append(peer)
        with pytest.raises(OutcomeUnknown, match=why) as ei:
            adapter(url=peer.url()).call(request())
        assert type(ei.value) is OutcomeUnknown

    @pytest.mark.parametrize(
        "method, raw, status",
        [
            ("POST", b"HTTP/1.1 204 No Content\r\n\r\n", 204),
            ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n", 200),
        ],
    )
    def test_a_response_without_a_body_by_definition_ends_with_its_head(
        self, peers, method, raw, status
    ):
        """204 and an answer to HEAD have no body, whatever Content-Length says."""
        peer = Peer(lambda r: Reply(raw=raw))
        peers.append(peer)
        out = adapter(url=peer.url(), method=method).call(request())
        assert (out["status"], out["body"]) == (status, b"")

    def test_a_body_longer_than_kept_is_still_read_to_its_end(self, peers):
        """A 200 with Content-Length 100 and max_response_bytes 16: whole, it is
        succeeded and truncated; cut at 80 bytes, it is unknown."""
        head = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"
        peer, raw = self.cutting(peers)
        a = adapter(url=peer.url(), max_response_bytes=16)
        raw.append(head + b"b" * 100)
        out = a.call(request("a"))
        assert out["body"] == b"b" * 16 and out["truncated"] is True
        raw.append(head + b"b" * 80)
        with pytest.raises(OutcomeUnknown):
            a.call(request("b"))


class TestReplay:
    """``receipt = "replay"``: the claim records the request but its body (a
    secret header as its file's path), and the receipt sends it again with
    the op's args while the window lasts."""

    @staticmethod
    def replaying(peers: list[Peer], reply: Reply, tmp_path: Path, **table: object):
        peer = Peer(lambda r: reply)
        peers.append(peer)
        (tmp_path / "tok").write_text("Bearer tok_0123456789abcdef\n")
        a = adapter(
            url=peer.url(),
            method="PUT",
            headers={"X-Plain": "p", "Authorization": {"file": str(tmp_path / "tok")}},
            idempotency_format="uuid5",
            **{"receipt": "replay", "replay_window_s": 3600, **table},
        )
        return peer, a

    def test_the_claim_records_the_request_without_the_secret(self, peers, tmp_path):
        peer, a = self.replaying(peers, Reply(200), tmp_path)
        info = a.claim_info()
        assert info["receipt"] == "replay" and info["replay_window_s"] == 3600
        assert info["method"] == "PUT" and info["url"] == peer.url()
        assert info["headers"] == [
            ["X-Plain", "p"],
            ["Authorization", {"file": str(tmp_path / "tok")}],
        ]
        assert "tok_0123456789abcdef" not in repr(info)
        assert a.receipt_supported and a.receipt_resends

    @pytest.mark.parametrize(
        "reply, answer",
        [
            (Reply(201, b"saved"), "executed"),
            (Reply(422), "not_executed"),
            # the replay's own credentials refused: about the replay, not the call
            (Reply(401), "unknown"),
            (Reply(403), "unknown"),
            (Reply(409), "unknown"),
            (Reply(425), "unknown"),
            (Reply(429), "unknown"),
            (Reply(503), "unknown"),
            (Reply(raw=b"HTTP/1.1 422 Unprocessable\r\n"), "unknown"),
            (Reply(hang_up=True), "unknown"),
        ],
    )
    def test_the_identical_request_is_sent_and_its_answer_decides(
        self, peers, tmp_path, reply, answer
    ):
        peer, a = self.replaying(peers, reply, tmp_path)
        sent = SentCall(b'{"amount": 5}', time.time())
        got = a.receipt("n1/op/1", a.claim_info(), sent)
        assert got.answer == answer, got
        if answer == "executed":
            assert got.value == {"status": 201, "headers": {}, "body": b"saved", "truncated": False}
        (r,) = peer.requests
        assert (r.method, r.path, r.body) == ("PUT", "/charges", b'{"amount": 5}')
        assert r.headers["idempotency-key"] == key_value("n1/op/1", "uuid5")
        assert r.headers["authorization"] == "Bearer tok_0123456789abcdef"
        assert r.headers["x-plain"] == "p"

    def test_the_secret_is_read_again_and_an_unreadable_one_sends_nothing(self, peers, tmp_path):
        peer, a = self.replaying(peers, Reply(200), tmp_path)
        info = a.claim_info()
        (tmp_path / "tok").write_text("Bearer rotated_0123456789\n")
        assert a.receipt("n1/op/1", info, SentCall(b"x", time.time())).answer == "executed"
        assert peer.requests[0].headers["authorization"] == "Bearer rotated_0123456789"
        (tmp_path / "tok").unlink()
        got = a.receipt("n1/op/2", info, SentCall(b"x", time.time()))
        assert got.answer == "unknown" and "nothing was sent" in (got.detail or "")
        assert len(peer.requests) == 1

    @pytest.mark.parametrize("age, recorded, now_window", [(61, 3600, 60), (61, 60, 3600)])
    def test_past_the_smaller_window_nothing_is_sent(
        self, peers, tmp_path, age, recorded, now_window
    ):
        """The claim's window and the act's current one: the smaller decides."""
        peer, before = self.replaying(peers, Reply(200), tmp_path, replay_window_s=recorded)
        now = adapter(url=peer.url(), receipt="replay", replay_window_s=now_window)
        got = now.receipt("n1/op/1", before.claim_info(), SentCall(b"x", time.time() - age))
        assert got.answer == "unknown" and "past the replay window of 60 s" in (got.detail or "")
        assert peer.requests == []
        fresh = SentCall(b"x", time.time() - 30)
        assert now.receipt("n1/op/1", before.claim_info(), fresh).answer == "executed"

    def test_without_a_record_of_the_request_nothing_is_sent(self, peers, tmp_path):
        """A claim made before the act replayed (or a record unreadable), or no
        args handed over: unknown; never claimed: not_executed; nothing sent."""
        peer, a = self.replaying(peers, Reply(200), tmp_path)
        sent = SentCall(b"x", time.time())
        plain = adapter(url=peer.url()).claim_info()
        assert 'receipt = "replay"' in (a.receipt("n1/op/1", plain, sent).detail or "")
        broken = {**a.claim_info(), "headers": [["X", 1]]}
        assert a.receipt("n1/op/1", broken, sent).answer == "unknown"
        assert a.receipt("n1/op/1", a.claim_info(), None).answer == "unknown"
        assert a.receipt("n1/op/1", None, None).answer == "not_executed"
        assert peer.requests == []


def test_the_default_config_shows_every_http_key():
    """`wardd default-config` (DEFAULT_TOML) names every key the adapter takes."""
    from wardd.adapters._http import _KEYS
    from wardd.daemon.config import DEFAULT_TOML

    http_part = DEFAULT_TOML[DEFAULT_TOML.index('adapter = "http"') - 40 :]
    for k in _KEYS:
        if k != "max_arg_bytes":
            assert f"# {k} = " in http_part, k


def test_the_configuration_doc_shows_every_http_key():
    from wardd.adapters._http import _KEYS

    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    section = doc[doc.index("### `http`") : doc.index("### Plug-in adapters")]
    for k in set(_KEYS) - {"adapter", "max_arg_bytes"}:  # those two: every act's
        assert f"`{k}`" in section, k


def test_a_call_cut_past_its_deadline_reads_as_timed_out_before_the_watchdog_runs():
    """Under load the socket's own timeout can end a read before the watchdog
    thread marks the flight timed out; past the deadline the error still says
    timed out after timeout_s, and the outcome is unknown."""
    a = adapter(url="http://127.0.0.1:9/", timeout_s=0.5)
    late = _Flight("k", deadline=time.monotonic() - 0.01)
    assert late.overdue and not late.timed_out
    err = a._cut_short(late, "timed out", [])
    assert type(err) is OutcomeUnknown
    assert "timed out after 0.5 s; connection closed" in str(err)
    early = _Flight("k", deadline=time.monotonic() + 60)
    err = a._cut_short(early, "connection reset", [])
    assert "the exchange failed after the request began" in str(err)


class TestResendRefusal:
    """The daemon sends a replay only while the op could still run its act
    (`core.resend_refusal`): the replay may make the effect now."""

    @pytest.mark.parametrize(
        "cancelled, grant, exhausted, state, why",
        [
            (False, Grant(frozenset({"pay"}), True), False, "active", None),
            (True, Grant(frozenset({"pay"}), True), False, "active", "cancelled"),
            (False, None, False, "active", "revoked"),
            (False, Grant(frozenset({"pay"}), False), False, "active", "revoked"),
            (False, Grant(frozenset({"echo"}), True), False, "active", "revoked"),
            (False, Grant(frozenset({"pay"}), True), True, "active", "budget_exhausted"),
            (False, Grant(frozenset({"pay"}), True), False, "paused", "prog_inactive"),
        ],
    )
    def test_the_first_reason_that_applies(self, cancelled, grant, exhausted, state, why):
        assert resend_refusal(cancelled, grant, exhausted, state, "pay") == why
