"""The HTTP server the ``http`` act talks to in tests: a real one on 127.0.0.1.

It is the test's peer, not our client: stdlib ``http.server`` in a thread of
the test process (or, with ``python -m tests.daemon._http_peer``, a process of
its own that a test can SIGKILL), recording every request it received.

What it answers is the test's `Script`: a function of the request that
returns a `Reply`. A reply may first wait on a `threading.Event` (a server
slower than the call's ``timeout_s``, held until the test lets it go), may
trickle its bytes, may send some bytes of its own one by one and close (a
cut answer), or may close the connection without an answer.

`KeyLedger` is an API with idempotency keys and a receipt endpoint, as the
``http`` adapter's ``receipt_url`` expects one: ``POST`` records the effect
of a key once, ``GET /by-key/<key>`` answers 200 for a recorded key and 404
for another — and a 404 fences that key, so that a request for it that
arrives (or wakes up) later has no effect. That is the promise a 404 makes
to wardd (docs/contract.md §6).
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs


@attrs.frozen
class Received:
    """One request as the server read it (header names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@attrs.frozen
class Reply:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = attrs.field(factory=dict)
    hold: threading.Event | None = None  # wait for it before answering
    trickle: float = 0.0  # seconds between two header lines, sent forever
    hang_up: bool = False  # close without an answer
    raw: bytes | None = None  # these bytes, one write per byte, then the close (a cut answer)


Script = Callable[[Received], Reply]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        got = Received(
            self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
        )
        peer = self.server.peer
        with peer.lock:
            peer.requests.append(got)
        reply = peer.script(got)
        if reply.hold is not None:
            reply.hold.wait(60)
        if reply.hang_up:
            self.close_connection = True
            return
        if reply.trickle:
            self._trickle(reply.trickle)
            return
        if reply.raw is not None:
            self._cut(reply.raw)
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def _cut(self, raw: bytes) -> None:
        """``raw`` byte by byte (each its own write), then the close: an answer
        cut wherever ``raw`` ends, which the client may read in any pieces."""
        self.close_connection = True
        try:
            for i in range(len(raw)):
                self.wfile.write(raw[i : i + 1])
                self.wfile.flush()
        except OSError:
            pass  # the client went away first: the cut is only earlier

    def _trickle(self, pause: float) -> None:
        """A status line, then one header line per ``pause``: never the end of the headers."""
        self.close_connection = True
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self.wfile.flush()
            while not self.server.peer.closed.is_set():
                self.server.peer.closed.wait(pause)  # the pace of the trickle
                self.wfile.write(b"X-Trickle: 1\r\n")
                self.wfile.flush()
        except OSError:
            with self.server.peer.lock:
                self.server.peer.trickles_cut += 1

    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    peer: Peer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a killed daemon, an abort) is what tests do: not noise."""


class Peer:
    """A recording HTTP server on 127.0.0.1, in a thread; `close` ends it (use a fixture)."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda r: Reply(200, b"ok"))
        self.requests: list[Received] = []
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.trickles_cut = 0
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.peer = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http-peer", daemon=True
        )
        self._thread.start()

    def url(self, path: str = "/charges") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.closed.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


class KeyLedger:
    """An API with idempotency keys and a receipt by key (see the module docstring).

    ``POST`` args ``b"<mode> [seconds]"``: ``ok`` records the effect and
    answers 201; ``fail`` answers 422 and records nothing; ``after-500``
    records it and answers 500; ``held`` waits on `hold` *after* recording
    it, ``held-before`` waits *before* (then records it unless the key was
    fenced meanwhile); ``slow-post`` and ``slow-pre`` take ``seconds`` to
    serve, before or after recording it (a slow API, as the soak's).
    Effects go to ``ledger`` as ``<key>\\t<mode>`` lines, like the other
    test acts' ledgers.
    """

    def __init__(self, ledger: Path, key_header: str = "idempotency-key") -> None:
        self.ledger = ledger
        self.key_header = key_header
        self.lock = threading.Lock()
        self.effects: dict[str, bytes] = {}
        self.fenced: set[str] = set()
        self.hold = threading.Event()
        self.in_flight = 0
        self.idle = threading.Condition(self.lock)

    def __call__(self, r: Received) -> Reply:
        if r.method == "GET":
            return self._receipt(urllib.parse.unquote(r.path.rsplit("/", 1)[-1]))
        key = r.headers.get(self.key_header, "")
        mode, _, rest = r.body.strip().partition(b" ")
        pause = float(rest or 0)
        if mode == b"fail":
            return Reply(422, b'{"error": "invalid"}')
        with self.lock:
            self.in_flight += 1
        try:
            if mode == b"held-before":
                self.hold.wait(60)
            if mode == b"slow-post":
                time.sleep(pause)  # the API's own slowness, not a synchronization
            if not self._record(key, mode):
                return Reply(409, b'{"error": "key fenced by a receipt"}')
            if mode == b"held":
                self.hold.wait(60)
            if mode == b"slow-pre":
                time.sleep(pause)
            if mode == b"after-500":
                return Reply(500, b"oops")
            return Reply(201, json.dumps({"key": key}).encode(), {"Content-Type": "text/json"})
        finally:
            with self.lock:
                self.in_flight -= 1
                self.idle.notify_all()

    def _record(self, key: str, mode: bytes) -> bool:
        with self.lock:
            if key in self.fenced:
                return False
            if key not in self.effects:
                self.effects[key] = mode
                with self.ledger.open("ab") as f:
                    f.write(key.encode() + b"\t" + mode + b"\n")
            return True

    def receipt_answer(self, key: str) -> int:
        """What ``GET /by-key/<key>`` answers (200 or 404, and a 404 fences the key)."""
        return self._receipt(key).status

    def _receipt(self, key: str) -> Reply:
        with self.lock:
            if key in self.effects:
                said = {"key": key, "mode": self.effects[key].decode()}
                return Reply(200, json.dumps(said).encode())
            self.fenced.add(key)  # a 404 is for ever: a late request for it has no effect
            return Reply(404, b"no such key")

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until no POST is being served (its effect, if any, is in the ledger)."""
        with self.idle:
            if not self.idle.wait_for(lambda: self.in_flight == 0, timeout):
                raise AssertionError("the API still serves a request")


class SavedByKey:
    """An API that keeps its answers by idempotency key, as Stripe does, with
    no lookup by key: the ``http`` adapter's ``receipt = "replay"`` sends the
    same request again to learn its fate.

    ``POST`` args ``b"<outcome> [<first> [<seconds>]]"``: ``ok`` makes the
    effect (the key appended to `effects`, and as a ``<key>\tok`` line to
    ``ledger`` when given, like the other test acts' ledgers) and answers
    200, ``bad`` makes none and answers 400; the answer is saved under the
    key. The same key again gets the saved answer and nothing is done; a key
    whose first request is still being served (or that `truth` fenced) gets
    409. ``<first>`` acts on a key's first request only:
    ``lost`` closes the connection before anything is done or saved (a
    request that never landed), ``dropped`` closes it once the answer is
    saved, unsent; ``held`` waits on `hold` with the answer saved,
    ``held-before`` waits on it before anything is done (the key in flight);
    ``slow`` takes ``<seconds>`` before anything is done (a slow API, as the
    soak's).
    """

    def __init__(self, key_header: str = "idempotency-key", ledger: Path | None = None) -> None:
        self.key_header = key_header
        self.ledger = ledger
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.saved: dict[str, Reply] = {}
        self.running: set[str] = set()
        self.fenced: set[str] = set()  # `truth` said not_executed: never acted on
        self.seen: dict[str, int] = {}  # requests per key
        self.effects: list[str] = []
        self.hold = threading.Event()

    def __call__(self, r: Received) -> Reply:
        key = r.headers.get(self.key_header, "")
        outcome, _, rest = r.body.partition(b" ")
        first, _, pause = rest.partition(b" ")
        with self.lock:
            self.seen[key] = self.seen.get(key, 0) + 1
            first = first if self.seen[key] == 1 else b""
            if key in self.saved:
                return self.saved[key]
            if key in self.running or key in self.fenced:
                return Reply(409, b'{"error": "the key is in use"}')
            if first == b"lost":
                return Reply(hang_up=True)
            self.running.add(key)
        try:
            if first == b"held-before":
                self.hold.wait(60)
            if first == b"slow":
                time.sleep(float(pause))  # the API's own slowness, not a synchronization
            reply = self._serve(key, outcome)
            if first == b"dropped":
                return Reply(hang_up=True)
            if first == b"held":
                self.hold.wait(60)
            return reply
        finally:
            with self.lock:
                self.running.discard(key)
                self.changed.notify_all()

    def _serve(self, key: str, outcome: bytes) -> Reply:
        with self.lock:
            if outcome == b"ok":
                self.effects.append(key)
                if self.ledger is not None:
                    with self.ledger.open("ab") as f:
                        f.write(key.encode() + b"\tok\n")
                said = json.dumps({"id": f"ch_{len(self.effects)}", "key": key}).encode()
                reply = Reply(200, said, {"Content-Type": "application/json"})
            else:
                reply = Reply(400, b'{"error": "amount must be positive"}')
            self.saved[key] = reply
            self.changed.notify_all()
            return reply

    def truth(self, key: str, timeout: float = 30.0) -> str:
        """Once the key's first request is no longer served: ``succeeded`` if it
        made its effect, else ``not_executed`` — and the key is then fenced (a
        request for it that arrives later is answered 409 and acts on nothing),
        as `KeyLedger`'s 404 fences one, so the answer stays true."""
        with self.changed:
            if not self.changed.wait_for(lambda: key not in self.running, timeout):
                raise AssertionError(f"the API still serves {key}")
            if key in self.effects:
                return "succeeded"
            self.fenced.add(key)
            return "not_executed"

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Until no request is being served."""
        with self.changed:
            if not self.changed.wait_for(lambda: not self.running, timeout):
                raise AssertionError("the API still serves a request")

    def wait_saved(self, n: int, timeout: float = 30.0) -> None:
        """Until ``n`` answers are saved."""
        with self.changed:
            if not self.changed.wait_for(lambda: len(self.saved) >= n, timeout):
                raise AssertionError(f"the API saved {len(self.saved)} answers, not {n}")


def _main() -> None:
    """A peer process: writes its port to --port-file, marks each request it
    reads with a file in --marks, then holds every answer until it is killed."""
    p = argparse.ArgumentParser()
    p.add_argument("--port-file", required=True)
    p.add_argument("--marks", required=True)
    args = p.parse_args()
    marks = Path(args.marks)
    never = threading.Event()

    def script(r: Received) -> Reply:
        (marks / f"request-{time.monotonic_ns()}").write_bytes(r.body)
        return Reply(hold=never)

    peer = Peer(script)
    tmp = Path(args.port_file + ".tmp")
    tmp.write_text(str(peer.port))
    os.replace(tmp, args.port_file)
    sys.stdout.flush()
    never.wait()


if __name__ == "__main__":
    _main()
