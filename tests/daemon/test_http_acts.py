"""The ``http`` act through a real daemon, against a real HTTP server on 127.0.0.1 (contract §6).

Each test starts its own server (`tests.daemon._http_peer`: stdlib
``http.server`` in a thread, or a process of its own where it is killed),
which records what it received, and ends it in a fixture. The rules:

- 2xx → succeeded with ``{status, headers, body, truncated}``; the body is
  the args, the fence key is in ``Idempotency-Key`` (or its UUIDv5);
- a no-effect status → failed; 409, 500, a redirect → unknown; nothing is
  ever retried or followed;
- a server slower than ``timeout_s``, or trickling its answer, → unknown;
  a server killed in the middle of the request → unknown; connection
  refused → failed;
- ``abort`` closes the connection: unknown with ``aborted: true``;
- a SIGKILL of the daemon during a call, then a start: the receipt GET
  resolves it, ``executed`` or ``not_executed``;
- a response cut before its framing ended (the header block's blank line,
  Content-Length, the last chunk), after the server made the effect, is
  unknown for the call and for the receipt, whatever its status: a cut 404
  to the start's receipt leaves the attempt unknown and nothing runs twice;
- ``receipt = "replay"`` against an API that keeps its answers by key (as
  Stripe does): the request sent again with the same key settles an
  unknown attempt (a saved 200 → executed, a request that never landed is
  made once → executed, a saved 400 → not_executed, 409 → unknown), and a
  claim older than ``replay_window_s`` is unknown with nothing sent;
- a secret header reaches the server and nothing else.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._poll import wait_for
from tests.daemon._audit import Audit, all_reads, forms, pieces
from tests.daemon._http_peer import KeyLedger, Peer, Received, Reply, SavedByKey, Script
from tests.daemon.harness import Actor, Background, Env, code_of, key

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    """Servers a test starts; each is closed at the end, pass or fail."""
    started: list[Peer] = []
    yield started
    for p in started:
        p.close()


@pytest.fixture
def release() -> Iterator[list[threading.Event]]:
    """Events holding a server's answer; all set at the end, so no handler is left waiting."""
    events: list[threading.Event] = []
    yield events
    for e in events:
        e.set()


def http_act(url: str, **table: object) -> dict[str, object]:
    return {"adapter": "http", "url": url, **table}


def ledger_api(env: Env, peers: list[Peer], release: list[threading.Event]) -> KeyLedger:
    api = KeyLedger(env.root / "api-ledger.log")
    release.append(api.hold)
    peers.append(Peer(api))
    return api


class TestOutcomes:
    def test_a_2xx_succeeds_with_status_headers_and_body_and_carries_the_key(
        self, make_daemon, peers
    ):
        """POST args as the body, the configured headers and Idempotency-Key =
        <neuron>/<op>/<attempt>; a 201 is succeeded with its status, content-type,
        location and body."""
        peer = Peer(
            lambda r: Reply(
                201,
                b'{"id": "ch_1"}',
                {"Content-Type": "application/json", "Location": "/charges/ch_1", "X-Other": "1"},
            )
        )
        peers.append(peer)
        env = Env(acts={"pay": http_act(peer.url(), headers={"Content-Type": "application/json"})})
        a = Actor(make_daemon(env), acts=("pay",))
        a.submit("c1", "pay", b'{"amount": 100}')
        r = a.invoke("c1")
        assert r["status"] == "succeeded"
        assert r["result"] == {
            "status": 201,
            "headers": {"content-type": "application/json", "location": "/charges/ch_1"},
            "body": b'{"id": "ch_1"}',
            "truncated": False,
        }
        (got,) = peer.requests
        assert (got.method, got.path, got.body) == ("POST", "/charges", b'{"amount": 100}')
        assert got.headers["idempotency-key"] == key(a, "c1") == f"{a.id}/c1/1"
        assert got.headers["content-type"] == "application/json"

    def test_the_uuid5_key_form_and_no_key_header(self, make_daemon, peers):
        """idempotency_format uuid5 sends uuid5(uuid5(NAMESPACE_URL,
        "wardd:idempotency-key"), key); idempotency_header "" sends none."""
        peer = Peer()
        peers.append(peer)
        env = Env(
            acts={
                "payu": http_act(peer.url("/u"), idempotency_format="uuid5"),
                "bare": http_act(peer.url("/b"), idempotency_header="", method="PUT"),
            }
        )
        a = Actor(make_daemon(env), acts=("payu", "bare"))
        a.submit("u1", "payu", b"x")
        a.submit("b1", "bare", b"y")
        assert a.invoke("u1")["status"] == "succeeded"
        assert a.invoke("b1")["status"] == "succeeded"
        u, b = peer.requests
        namespace = uuid.uuid5(uuid.NAMESPACE_URL, "wardd:idempotency-key")
        assert u.headers["idempotency-key"] == str(uuid.uuid5(namespace, key(a, "u1")))
        assert b.method == "PUT" and "idempotency-key" not in b.headers

    def test_a_no_effect_status_fails_and_is_sent_once(self, make_daemon, peers):
        """422 is in the default no_effect_statuses: failed, one request, and a retry is allowed."""
        peer = Peer(lambda r: Reply(422, b'{"error": "amount"}'))
        peers.append(peer)
        env = Env(acts={"pay": http_act(peer.url())})
        a = Actor(make_daemon(env), acts=("pay",))
        a.submit("f", "pay", b"{}")
        r = a.invoke("f")
        assert r["status"] == "failed" and "HTTP 422" in r["error"] and "amount" in r["error"]
        assert len(peer.requests) == 1
        assert a.state("f") == "pending"  # failed: a new attempt may run

    @pytest.mark.parametrize(
        "reply, said",
        [
            (Reply(500, b"oops"), "HTTP 500"),
            (Reply(409, b"busy"), "HTTP 409"),
            (Reply(302, b"", {"Location": "/elsewhere"}), "HTTP 302"),
            (Reply(404, b"gone"), "HTTP 404"),  # no_effect_statuses = [422] here
        ],
    )
    def test_other_statuses_are_unknown_never_retried_or_followed(
        self, make_daemon, peers, reply, said
    ):
        """500, 409, a redirect, a 404 left out of no_effect_statuses: unknown,
        and the server saw exactly one request (no retry, no redirect followed)."""
        peer = Peer(lambda r: reply)
        peers.append(peer)
        env = Env(acts={"pay": http_act(peer.url(), no_effect_statuses=[422])})
        a = Actor(make_daemon(env), acts=("pay",))
        a.submit("u", "pay", b"{}")
        r = a.invoke("u")
        assert r["status"] == "unknown" and said in r["error"]
        assert [x.path for x in peer.requests] == ["/charges"]
        att = a.op("u")["attempts"][0]
        assert att["state"] == "unknown" and att["evidence"]["claimed"] is True

    def test_connection_refused_fails(self, make_daemon):
        """A port where nothing listens (bound, not listening): failed, nothing was sent."""
        closed = socket.socket()
        try:
            closed.bind(("127.0.0.1", 0))
            port = closed.getsockname()[1]
            env = Env(acts={"pay": http_act(f"http://127.0.0.1:{port}/c")})
            a = Actor(make_daemon(env), acts=("pay",))
            a.submit("r", "pay", b"{}")
            r = a.invoke("r")
            assert r["status"] == "failed"
            assert "nothing was sent" in r["error"] and "refused" in r["error"]
        finally:
            closed.close()

    def test_a_server_slower_than_timeout_s_is_unknown(self, make_daemon, peers, release):
        """The server read the request and holds its answer: past timeout_s, unknown."""
        held = threading.Event()
        release.append(held)
        peer = Peer(lambda r: Reply(201, b"late", hold=held))
        peers.append(peer)
        env = Env(acts={"pay": http_act(peer.url(), timeout_s=0.5)})
        a = Actor(make_daemon(env), acts=("pay",))
        a.submit("s", "pay", b"{}")
        r = a.invoke("s")
        assert r["status"] == "unknown" and "timed out after 0.5 s" in r["error"]
        assert len(peer.requests) == 1  # it had the request: the effect may be under way

    def test_a_trickling_server_cannot_hold_the_call_past_timeout_s(self, make_daemon, peers):
        """A server that sends a header line every 50 ms, for ever: each read
        succeeds, yet the call ends unknown at timeout_s and the server sees
        its connection shut."""
        peer = Peer(lambda r: Reply(trickle=0.05))
        peers.append(peer)
        env = Env(acts={"pay": http_act(peer.url(), timeout_s=0.5)})
        a = Actor(make_daemon(env), acts=("pay",))
        a.submit("t", "pay", b"{}")
        r = a.invoke("t")
        assert r["status"] == "unknown" and "timed out" in r["error"]
        wait_for(lambda: peer.trickles_cut == 1, what="the server to see the connection shut")

    def test_a_server_killed_in_the_middle_of_the_request_is_unknown(self, make_daemon, tmp_path):
        """The server process read the request and is SIGKILLed before it answers: unknown."""
        marks = tmp_path / "marks"
        marks.mkdir()
        port_file = tmp_path / "port"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.daemon._http_peer",
                "--port-file",
                str(port_file),
                "--marks",
                str(marks),
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
        )
        try:
            wait_for(port_file.exists, what="the server process's port")
            url = f"http://127.0.0.1:{port_file.read_text()}/charges"
            env = Env(acts={"pay": http_act(url, timeout_s=60)})
            d = make_daemon(env)
            a = Actor(d, acts=("pay",))
            a.submit("k", "pay", b"body")
            call = Background(a.invoke, "k", 1, d.connect())
            wait_for(lambda: any(marks.iterdir()), what="the server to read the request")
            proc.send_signal(signal.SIGKILL)
            r = call.result()
            assert r["status"] == "unknown"
            assert "after the request began" in r["error"]
        finally:
            proc.kill()
            proc.wait()


class TestAbort:
    def test_abort_closes_the_connection_and_records_unknown_aborted(
        self, make_daemon, peers, release
    ):
        """A call held by the server: abort answers unknown once durable, the
        evidence says aborted: true, and the call's own invoke got the same."""
        held = threading.Event()
        release.append(held)
        peer = Peer(lambda r: Reply(201, b"late", hold=held))
        peers.append(peer)
        env = Env(acts={"pay": http_act(peer.url(), timeout_s=600)})
        d = make_daemon(env)
        a = Actor(d, acts=("pay",))
        a.submit("h", "pay", b"{}")
        call = Background(a.invoke, "h", 1, d.connect())
        wait_for(lambda: len(peer.requests) == 1, what="the request to arrive")
        res = a.call("abort", {"op": "h", "attempt": 1})
        assert res == {"op": "h", "attempt": 1, "status": "unknown", "aborted": True}
        att = a.op("h")["attempts"][0]
        assert att["state"] == "unknown" and att["evidence"]["aborted"] is True
        own = call.result()
        assert own["status"] == "unknown" and "aborted by the operator" in own["error"]
        assert "connection closed by the abort" in own["error"]


class TestReceipts:
    @staticmethod
    def daemon_with_api(make_daemon, peers, release, **table):
        """A daemon whose act ``pay`` calls a `KeyLedger` API with its receipt URL."""
        env = Env()
        api = ledger_api(env, peers, release)
        (peer,) = peers
        env.acts["pay"] = http_act(peer.url(), receipt_url=peer.url("/by-key/{key}"), **table)
        env.write_config()
        d = make_daemon(env)
        return api, peer, d, Actor(d, acts=("pay",))

    @staticmethod
    def crash_during(d, a, op: str, mode: bytes, arrived) -> None:
        """Invoke ``op``, wait until the API is at ``arrived``, SIGKILL, start again."""
        a.submit(op, "pay", mode)
        Background(a.invoke, op, 1, d.connect())
        arrived()
        d.kill()
        d.start()
        a.client = d.connect()

    def test_a_500_after_the_effect_is_resolved_executed_by_check_receipts(
        self, make_daemon, peers, release
    ):
        """unknown after a 500; check_receipts GETs receipt_url with the key
        percent-encoded and the key header: 200 → succeeded, the body as value."""
        api, peer, _, a = self.daemon_with_api(make_daemon, peers, release)
        a.submit("p", "pay", b"after-500")
        assert a.invoke("p")["status"] == "unknown"
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 1}
        get = peer.requests[-1]
        assert get.method == "GET"
        assert get.path == "/by-key/" + urllib.parse.quote(key(a, "p"), safe="")
        assert get.headers["idempotency-key"] == key(a, "p")
        out = a.op("p")["attempts"][0]["outcome"]
        assert out["status"] == "succeeded" and out["source"] == "receipt"
        assert b"after-500" in out["value"]
        assert list(api.effects) == [key(a, "p")]
        assert len([r for r in peer.requests if r.method == "POST"]) == 1  # never re-sent

    def test_sigkill_during_a_call_then_the_start_receipt_says_executed(
        self, make_daemon, peers, release
    ):
        """The API recorded the effect and holds its answer; the daemon is
        SIGKILLed; at the next start (before READY) the receipt resolves the
        attempt succeeded, source receipt (asked with the uuid5 key form)."""
        api, peer, d, a = self.daemon_with_api(
            make_daemon, peers, release, idempotency_format="uuid5"
        )
        recorded = lambda: wait_for(lambda: len(api.effects) == 1, what="the effect")  # noqa: E731
        self.crash_during(d, a, "x", b"held", recorded)
        att = a.op("x")["attempts"][0]
        assert att["state"] == "succeeded" and att["outcome"]["source"] == "receipt"
        assert att["evidence"]["claimed"] is True
        namespace = uuid.uuid5(uuid.NAMESPACE_URL, "wardd:idempotency-key")
        assert peer.requests[-1].path == f"/by-key/{uuid.uuid5(namespace, key(a, 'x'))}"
        assert a.state("x") == "retained"

    def test_sigkill_during_a_call_then_the_start_receipt_says_not_executed(
        self, make_daemon, peers, release
    ):
        """The API read the request and holds it before any effect; the daemon
        is SIGKILLed; the start's receipt gets 404 (which fences the key at the
        API): not_executed, and the request let go afterwards has no effect."""
        api, peer, d, a = self.daemon_with_api(make_daemon, peers, release)
        arrived = lambda: wait_for(lambda: len(peer.requests) == 1, what="the request")  # noqa: E731
        self.crash_during(d, a, "y", b"held-before", arrived)
        att = a.op("y")["attempts"][0]
        assert att["state"] == "not_executed" and att["outcome"]["source"] == "receipt"
        assert a.state("y") == "pending"
        api.hold.set()
        api.wait_idle()
        assert api.effects == {} and not api.ledger.exists()


# responses cut before their framing ended, named by the op that gets them
CUTS = {
    "status-line": b"HTTP/1.1 404 Not Found\r\n",
    "status-cut": b"HTTP/1.1 404 Not Fo",
    "header-cut": b"HTTP/1.1 404 Not Found\r\nContent-Ty",
    "no-blank-line": b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n",
    "short-body": b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot",
    "no-last-chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
}


def cut_by_op(api: KeyLedger, *, calls: bool, receipts: bool) -> Script:
    """The `KeyLedger` API, whose answers to the calls and/or the receipt GETs
    are cut as `CUTS` names them by the op (``r-<cut>`` for a receipt's op);
    a call still has its effect first."""

    def script(r: Received) -> Reply:
        said = api(r)
        if r.method == "GET":
            op = urllib.parse.unquote(r.path.rsplit("/", 1)[-1]).split("/")[1]
            return Reply(raw=CUTS[op.removeprefix("r-")]) if receipts else said
        op = r.headers["idempotency-key"].split("/")[1]
        return Reply(raw=CUTS[op]) if calls and op in CUTS else said

    return script


class TestCutResponses:
    @staticmethod
    def daemon_with_cuts(make_daemon, peers, release, *, calls: bool, receipts: bool):
        env = Env()
        api = KeyLedger(env.root / "api-ledger.log")
        release.append(api.hold)
        peer = Peer(cut_by_op(api, calls=calls, receipts=receipts))
        peers.append(peer)
        env.acts["pay"] = http_act(peer.url(), receipt_url=peer.url("/by-key/{key}"))
        env.write_config()
        d = make_daemon(env)
        return api, peer, d, Actor(d, acts=("pay",))

    def test_a_call_answered_by_a_cut_response_after_its_effect_is_unknown(
        self, make_daemon, peers, release
    ):
        """The API makes the effect, then answers 404 (a no-effect status) or 200,
        cut before its framing ended: never failed or succeeded, but unknown,
        and the op is blocked, not pending."""
        api, peer, _, a = self.daemon_with_cuts(
            make_daemon, peers, release, calls=True, receipts=False
        )
        for op in CUTS:
            a.submit(op, "pay", b"ok")
            r = a.invoke(op)
            assert r["status"] == "unknown", (op, r)
            assert "after the request began" in r["error"], (op, r)
            assert a.state(op) == "unknown"
            assert a.op(op)["attempts"][0]["evidence"]["claimed"] is True
        assert sorted(api.effects) == sorted(key(a, op) for op in CUTS)
        assert len(peer.requests) == len(CUTS)

    def test_a_receipt_answered_by_a_cut_response_leaves_the_attempt_unknown(
        self, make_daemon, peers, release
    ):
        """Unknown attempts (a 500 after the effect); check_receipts' GETs are
        answered 404 or 200 cut: nothing is resolved, the attempts stay unknown."""
        api, peer, _, a = self.daemon_with_cuts(
            make_daemon, peers, release, calls=False, receipts=True
        )
        ops = [f"r-{cut}" for cut in CUTS]
        for op in ops:
            a.submit(op, "pay", b"after-500")
            assert a.invoke(op)["status"] == "unknown"
        assert a.call("check_receipts", {}) == {"checked": len(ops), "resolved": 0}
        for op in ops:
            att = a.op(op)["attempts"][0]
            assert att["state"] == "unknown" and "outcome" not in att, (op, att)
        assert [r.method for r in peer.requests] == ["POST"] * len(ops) + ["GET"] * len(ops)

    def test_sigkill_during_a_call_then_a_cut_404_to_the_start_receipt_runs_nothing_twice(
        self, make_daemon, peers, release
    ):
        """The API makes the effect and holds its answer; the daemon is SIGKILLed;
        the start's receipt GET is answered ``HTTP/1.1 404 Not Found\\r\\n`` and
        the close. The attempt stays unknown (not not_executed), the op blocked:
        no attempt 2 can run, and the API made one effect."""
        api, peer, d, a = self.daemon_with_cuts(
            make_daemon, peers, release, calls=False, receipts=True
        )
        op = "r-status-line"
        recorded = lambda: wait_for(lambda: len(api.effects) == 1, what="the effect")  # noqa: E731
        TestReceipts.crash_during(d, a, op, b"held", recorded)
        assert [r.method for r in peer.requests] == ["POST", "GET"]  # the start asked
        att = a.op(op)["attempts"][0]
        assert att["state"] == "unknown" and "outcome" not in att
        assert "header block never ended" in att["evidence"]["receipt_detail"]
        assert a.state(op) == "unknown"
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 0}
        a.bind()  # this boot's placement: the refusal is the op's own
        assert code_of(a.invoke, op, 2).code == "attempt_unknown"
        api.hold.set()
        api.wait_idle()
        assert api.ledger.read_bytes().count(b"\n") == 1
        assert [r.method for r in peer.requests] == ["POST", "GET", "GET"]


class TestReplay:
    @staticmethod
    def daemon_with_api(make_daemon, peers, release, tmp_path, **table):
        """A daemon whose act ``pay`` calls a `SavedByKey` API with ``receipt = "replay"``
        and a secret Authorization header."""
        api = SavedByKey()
        release.append(api.hold)
        peer = Peer(api)
        peers.append(peer)
        secret = ("Bearer " + secrets.token_urlsafe(24)).encode()
        (tmp_path / "pay.auth").write_bytes(secret + b"\n")
        headers = {
            "Content-Type": "application/json",
            "Authorization": {"file": str(tmp_path / "pay.auth")},
        }
        table = {"receipt": "replay", "replay_window_s": 86400, "headers": headers, **table}
        env = Env(acts={"pay": http_act(peer.url(), **table)})
        d = make_daemon(env)
        return api, peer, d, Actor(d, acts=("pay",)), secret

    def test_a_request_that_landed_is_executed_by_the_identical_replay_at_start(
        self, make_daemon, peers, release, tmp_path
    ):
        """The API saved its 200 and holds the answer; SIGKILL; the start sends the
        identical request (method, path, body, key, headers, the secret read again
        from its file) and gets the saved 200: succeeded by receipt, the response
        as value; the API saw the key twice and acted once. The secret is in no
        database file."""
        api, peer, d, a, secret = self.daemon_with_api(make_daemon, peers, release, tmp_path)
        saved = lambda: api.wait_saved(1)  # noqa: E731
        TestReceipts.crash_during(d, a, "c1", b"ok held", saved)
        att = a.op("c1")["attempts"][0]
        assert att["state"] == "succeeded" and att["outcome"]["source"] == "receipt"
        value = att["outcome"]["value"]
        assert value["status"] == 200 and value["truncated"] is False
        assert json.loads(value["body"]) == {"id": "ch_1", "key": key(a, "c1")}
        first, again = peer.requests
        assert (again.method, again.path, again.body) == (first.method, first.path, first.body)
        for name in ("idempotency-key", "content-type", "authorization", "user-agent"):
            assert again.headers[name] == first.headers[name], name
        assert first.headers["authorization"].encode() == secret
        assert api.seen == {key(a, "c1"): 2} and api.effects == [key(a, "c1")]
        assert a.state("c1") == "retained"
        files = [p.read_bytes() for p in d.env.database.parent.iterdir() if p.is_file()]
        assert not any(secret in f or secret.split()[1] in f for f in files)

    def test_a_request_that_never_landed_is_made_once_by_the_replay(
        self, make_daemon, peers, release, tmp_path
    ):
        """The API closed the connection before doing anything: unknown; the
        replay (check_receipts) makes the charge: executed, one effect."""
        api, peer, _, a, _ = self.daemon_with_api(make_daemon, peers, release, tmp_path)
        a.submit("c2", "pay", b"ok lost")
        assert a.invoke("c2")["status"] == "unknown" and api.effects == []
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 1}
        out = a.op("c2")["attempts"][0]["outcome"]
        assert out["status"] == "succeeded" and out["source"] == "receipt"
        assert api.effects == [key(a, "c2")] and api.seen == {key(a, "c2"): 2}

    def test_a_saved_400_is_not_executed(self, make_daemon, peers, release, tmp_path):
        """The API saved a 400 and closed before sending it: unknown; the replay
        gets the saved 400 (a no-effect status): not_executed, the op pending."""
        api, _, _, a, _ = self.daemon_with_api(make_daemon, peers, release, tmp_path)
        a.submit("c3", "pay", b"bad dropped")
        assert a.invoke("c3")["status"] == "unknown"
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 1}
        att = a.op("c3")["attempts"][0]
        assert att["state"] == "not_executed" and att["outcome"]["source"] == "receipt"
        assert a.state("c3") == "pending" and api.effects == []

    def test_a_409_for_a_key_in_flight_leaves_the_attempt_unknown_until_it_is_saved(
        self, make_daemon, peers, release, tmp_path
    ):
        """SIGKILL while the API still serves the first request (before any effect);
        the start's replay gets 409: unknown, with the hint. Once the API has
        finished, check_receipts' replay gets the saved 200: executed, one effect."""
        api, _, d, a, _ = self.daemon_with_api(make_daemon, peers, release, tmp_path)
        arrived = lambda: wait_for(lambda: api.seen, what="the request")  # noqa: E731
        TestReceipts.crash_during(d, a, "c4", b"ok held-before", arrived)
        att = a.op("c4")["attempts"][0]
        assert att["state"] == "unknown"
        assert "HTTP 409" in att["evidence"]["receipt_detail"]
        api.hold.set()
        api.wait_saved(1)
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 1}
        assert a.op("c4")["attempts"][0]["state"] == "succeeded"
        assert api.effects == [key(a, "c4")] and api.seen == {key(a, "c4"): 3}

    def test_a_claim_older_than_the_window_is_unknown_and_nothing_is_sent(
        self, make_daemon, peers, release, tmp_path
    ):
        """replay_window_s = 0.001: by check_receipts the claim is older; the
        receipt sends nothing and the attempt stays unknown, saying why."""
        api, peer, _, a, _ = self.daemon_with_api(
            make_daemon, peers, release, tmp_path, replay_window_s=0.001
        )
        a.submit("c5", "pay", b"ok lost")
        assert a.invoke("c5")["status"] == "unknown"
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 0}
        att = a.op("c5")["attempts"][0]
        assert att["state"] == "unknown"
        assert "past the replay window of 0.001 s" in att["evidence"]["receipt_detail"]
        assert len(peer.requests) == 1 and api.effects == []

    @pytest.mark.parametrize("stop", ["cancel", "revoke", "pause"])
    def test_an_op_that_could_not_run_now_is_never_sent_again(
        self, make_daemon, peers, release, tmp_path, stop
    ):
        """A request that never landed; then the op is cancelled, the grant
        revoked, or the prog paused: the replay would make the charge now, so
        check_receipts sends nothing and the attempt stays unknown, saying why."""
        api, peer, _, a, _ = self.daemon_with_api(make_daemon, peers, release, tmp_path)
        a.submit("c6", "pay", b"ok lost")
        assert a.invoke("c6")["status"] == "unknown"
        if stop == "cancel":
            a.call("cancel", {"op": "c6"})
        elif stop == "revoke":
            a.grant(["echo"])
        else:
            a.call("set_prog_state", a.prog_state_params("active", "paused"))
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 0}
        att = a.op("c6")["attempts"][0]
        assert att["state"] == "unknown"
        assert (
            "was not sent again: the op could not run its act now"
            in (att["evidence"]["receipt_detail"])
        )
        assert len(peer.requests) == 1 and api.effects == []


class TestSecrets:
    def test_a_secret_header_reaches_the_server_and_nothing_else(
        self, make_daemon, peers, release, tmp_path
    ):
        """Authorization = {file = ...}: the server gets it; the server echoes it
        in bodies, a Location header and an error; it is found nowhere in the
        results, the DB, the WAL, the logs or any read, in any form."""
        secret = ("Bearer " + secrets.token_urlsafe(30)).encode()
        secret_file = tmp_path / "pay-token"
        secret_file.write_bytes(secret + b"\n")
        held = threading.Event()
        release.append(held)

        def echo(r):
            auth = r.headers.get("authorization", "").encode()
            if r.body == b"fail":
                return Reply(500, b"denied for " + auth)
            if r.body == b"hold":
                return Reply(201, auth, hold=held)
            return Reply(201, b"you sent " + auth, {"Location": "/c?t=" + auth.decode()})

        peer = Peer(echo)
        peers.append(peer)
        env = Env(
            acts={
                "pay": http_act(
                    peer.url(),
                    headers={"Authorization": {"file": str(secret_file)}, "X-Plain": "p"},
                    receipt_url=peer.url("/by-key/{key}"),
                )
            }
        )
        d = make_daemon(env)
        a = Actor(d, acts=("pay",))
        a.call("create_prog", {"prog": "other", "step_limit": 10})  # all_reads reads it
        audit = Audit()
        a.submit("ok", "pay", b"ok")
        ok = audit.add("invoke", a.invoke("ok"))
        assert ok["status"] == "succeeded" and b"[redacted]" in ok["result"]["body"]
        assert "[redacted]" in ok["result"]["headers"]["location"]
        a.submit("bad", "pay", b"fail")
        bad = audit.add("invoke", a.invoke("bad"))
        assert bad["status"] == "unknown" and "[redacted]" in bad["error"]
        # a crash during a call, then the start's receipt (it sends the header too)
        a.submit("crash", "pay", b"hold")
        Background(a.invoke, "crash", 1, d.connect())
        wait_for(lambda: len(peer.requests) == 3, what="the held request")
        d.kill()
        d.start()
        a.client = d.connect()
        assert peer.requests[-1].method == "GET"
        assert all(r.headers["authorization"].encode() == secret for r in peer.requests)
        all_reads(a.client, a, audit)
        audit.add("status", a.read("status"))
        haystacks = [(p.name, p.read_bytes()) for p in env.database.parent.iterdir()]
        assert any(name.endswith("-wal") for name, _ in haystacks)
        assert d.terminate() == 0
        haystacks += [(p.name, p.read_bytes()) for p in env.database.parent.iterdir()]
        haystacks += [(log.name, log.read_bytes()) for log in d.logs]
        haystacks += audit.seen
        needles = [*forms(secret), *pieces(secret)]
        leaks = [where for where, hay in haystacks if any(n in hay for n in needles)]
        assert leaks == []


class TestConfig:
    @pytest.mark.parametrize(
        "table, where, why",
        [
            ({"url": "ftp://h/x"}, 'acts."pay.charge".url', "http:// or https://"),
            ({"url": "http://h/x", "headers": {"Bad Name": "v"}}, "headers", "header name"),
            (
                {"url": "http://h/x", "headers": {"idempotency-key": "v"}},
                'acts."pay.charge".headers."idempotency-key"',
                "the idempotency header",
            ),
            (
                {"url": "http://h/x", "no_effect_statuses": [400, 600]},
                'acts."pay.charge".no_effect_statuses[1]',
                "300 to 599",
            ),
            (
                {"url": "http://h/x", "no_effect_statuses": [103]},
                'acts."pay.charge".no_effect_statuses[0]',
                "300 to 599",
            ),
            ({"url": "http://h/x", "timeout_s": 0}, 'acts."pay.charge".timeout_s', "positive"),
            (
                {"url": "http://h/x", "receipt_url": "http://h/by-key"},
                'acts."pay.charge".receipt_url',
                "{key}",
            ),
            (
                {
                    "url": "http://h/x",
                    "receipt": "replay",
                    "replay_window_s": 60,
                    "receipt_url": "http://h/{key}",
                },
                'acts."pay.charge".receipt',
                "exclude each other",
            ),
            (
                {"url": "http://h/x", "receipt": "replay"},
                'acts."pay.charge".replay_window_s',
                'required with receipt = "replay"',
            ),
            (
                {"url": "http://h/x", "replay_window_s": 60},
                'acts."pay.charge".replay_window_s',
                'only with receipt = "replay"',
            ),
            ({"url": "http://h/x", "receipt": "lookup"}, 'acts."pay.charge".receipt', '"replay"'),
            (
                {"url": "http://h/x", "receipt": "replay", "replay_window_s": 0},
                'acts."pay.charge".replay_window_s',
                "positive",
            ),
            (
                {"url": "http://h/x", "headers": {"Authorization": {"file": "/nonexistent/tok"}}},
                'acts."pay.charge".headers."Authorization".file',
                "cannot read the secret file /nonexistent/tok",
            ),
        ],
    )
    def test_check_config_refuses_in_one_line_with_the_dotted_key(
        self, tmp_path, table, where, why
    ):
        env = Env(acts={"pay.charge": {"adapter": "http", **table}})
        out = subprocess.run(
            [sys.executable, "-m", "wardd.daemon.cli", "check-config", str(env.config)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 78, out
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and where in lines[0] and why in lines[0], lines

    def test_a_secret_file_content_never_appears_in_a_config_error(self, tmp_path):
        """A secret file with a newline inside is refused without showing it."""
        secret_file = tmp_path / "tok"
        secret_file.write_bytes(b"Bearer s3cr3t-value\nmore\n")
        env = Env(acts={"pay": http_act("http://h/x", headers={"A": {"file": str(secret_file)}})})
        out = subprocess.run(
            [sys.executable, "-m", "wardd.daemon.cli", "check-config", str(env.config)],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ},
        )
        assert out.returncode == 78 and 'acts.pay.headers."A".file' in out.stderr
        assert "s3cr3t" not in out.stderr + out.stdout
