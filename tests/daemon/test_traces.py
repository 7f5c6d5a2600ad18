"""Traces through a real daemon, exported to a real OTLP/HTTP receiver on 127.0.0.1.

The receiver is the test's `Peer` (stdlib ``http.server`` in a thread)
answering 200 to every export; the bodies are decoded as
``ExportTraceServiceRequest`` with ``opentelemetry-proto``. The rules
(docs/operations.md, "Traces"):

- a dispatch is one span ``execute_tool {act}``, kind INTERNAL, with the
  GenAI and ``wardd.*`` attributes, a ``claimed`` event, its outcome, and
  status ERROR for failed and unknown; a ``traceparent`` sent with the
  request (outside the signature) makes it the caller's child;
- the act gets the span's context: an ``http`` act's request header, a
  ``cli`` act's environment, a ``python`` act's ``ActRequest``;
- after a SIGKILL mid-call, the start's ``wardd.mark_unknown`` and the
  receipt's ``wardd.receipt`` spans are linked to the dispatch span the crash
  cut; a reconcile's ``wardd.reconcile`` too;
- no args, value or secret in any span; a collector that is down changes
  no dispatch.
"""

from __future__ import annotations

import json
import shlex
import socket
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra: pip install 'wardd[otel]'")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests._poll import wait_for
from tests.daemon._http_peer import KeyLedger, Peer, Reply
from tests.daemon.harness import NETWORK, Actor, Background, Env, key
from wardd.client import Session

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
CALLER = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SECRET = "s3cr3t-token-value-Zq"
ARGS = b"args-personal-data-Xy"

# a python act: notes the traceparent its ActRequest carries, appends its key
# to a ledger (its effect), and while the test holds it, waits to be killed
TOOLS = textwrap.dedent(
    """
    import os, time

    ROOT = {root!r}

    def act(request):
        with open(os.path.join(ROOT, "seen"), "a") as f:
            f.write(f"{{request.op}} {{request.traceparent}}\\n")
        with open(os.path.join(ROOT, "ledger"), "a") as f:
            f.write(request.idempotency_key + "\\n")
            f.flush()
            os.fsync(f.fileno())
        if os.path.exists(os.path.join(ROOT, "hold")):
            open(os.path.join(ROOT, "held"), "w").close()
            for _ in range(600):  # the test SIGKILLs the daemon meanwhile
                time.sleep(0.05)
        return {{"done": True}}

    def receipt(key):
        with open(os.path.join(ROOT, "ledger")) as f:
            return "executed" if key in f.read().split() else "not_executed"
    """
)


class Collector:
    """An OTLP/HTTP trace receiver: every export answered 200, every span decoded."""

    def __init__(self) -> None:
        self.peer = Peer(lambda r: Reply(200, b"", {"Content-Type": "application/x-protobuf"}))

    @property
    def endpoint(self) -> str:
        return self.peer.url("/v1/traces")

    def bodies(self) -> list[bytes]:
        with self.peer.lock:
            return [r.body for r in self.peer.requests if r.path == "/v1/traces"]

    def spans(self) -> list[tuple[dict[str, Any], Span]]:
        """Every span received, with its resource's attributes."""
        out = []
        for body in self.bodies():
            req = ExportTraceServiceRequest()
            req.ParseFromString(body)
            for rs in req.resource_spans:
                resource = attributes(rs.resource)
                for ss in rs.scope_spans:
                    out.extend((resource, s) for s in ss.spans)
        return out

    def named(self, name: str, timeout: float = 20.0) -> Span:
        """The one span called ``name``, once it has arrived."""
        found: list[Span] = []

        def arrived() -> bool:
            found[:] = [s for _r, s in self.spans() if s.name == name]
            return bool(found)

        wait_for(arrived, timeout, what=f"the span {name!r}")
        assert len(found) == 1, [s.name for _r, s in self.spans()]
        return found[0]

    def close(self) -> None:
        self.peer.close()


def attributes(item: Any) -> dict[str, Any]:
    out = {}
    for kv in item.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out


def ids_of(span: Span | Span.Link) -> str:
    """The trace and span ids of ``span`` as a traceparent writes them."""
    return f"00-{span.trace_id.hex()}-{span.span_id.hex()}"


def ids_in(traceparent: str) -> str:
    """The trace and span ids a traceparent names (it is sampled: the flags' bit 0)."""
    assert int(traceparent.rsplit("-", 1)[1], 16) & 1, traceparent
    return traceparent.rsplit("-", 1)[0]


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def peers() -> Iterator[list[Peer]]:
    started: list[Peer] = []
    yield started
    for p in started:
        p.close()


def traced_env(collector: Collector | str, tmp: Path, **acts: dict[str, Any]) -> Env:
    endpoint = collector if isinstance(collector, str) else collector.endpoint
    lib = tmp / "lib" / "tracedtools"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text(TOOLS.format(root=str(tmp)))
    seen = shlex.quote(str(tmp / "cli-seen"))
    return Env(
        tracing={"exporter": "otlp", "endpoint": endpoint, "service_name": "wardd-test"},
        acts={
            "py": {
                "adapter": "python",
                "callable": "tracedtools:act",
                "receipt": "tracedtools:receipt",
                "python_path": [str(tmp / "lib")],
            },
            "env": {
                "adapter": "cli",
                "argv": ["/bin/sh", "-c", f'echo "$TRACEPARENT" >> {seen}'],
                "env": {"API_TOKEN": {"file": str(secret_file(tmp))}},
            },
            **acts,
        },
    )


def secret_file(tmp: Path) -> Path:
    path = tmp / "token"
    if not path.exists():
        path.write_text(SECRET)
    return path


def signed_with_trace(a: Actor, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` signed, then the caller's trace context added: outside the signature."""
    signed = a.neuron.sign(method, params, NETWORK)
    signed["traceparent"] = CALLER
    signed["tracestate"] = "vendor=abc"
    return signed


class TestDispatchSpans:
    def test_succeeded_failed_and_unknown_attempts_are_spans_with_their_attributes(
        self, make_daemon, collector, tmp_path
    ):
        """One ``execute_tool {act}`` span per dispatch (invoke, execute, call), with
        the attempt's attributes, a claimed event, its outcome and status; the
        caller's traceparent, unsigned, makes the span its child."""
        d = make_daemon(traced_env(collector, tmp_path))
        a = Actor(d, acts=("echo", "nofx", "boom", "env"))
        a.submit("ok", "echo", ARGS)
        got = a.client.call("invoke", signed_with_trace(a, "invoke", a.prepare_params("ok")))
        assert got["status"] == "succeeded"
        a.submit("no", "nofx", ARGS)
        assert a.invoke("no")["status"] == "failed"
        a.submit("un", "boom", ARGS)
        token, _ = a.prepare("un")
        assert a.execute(token)["status"] == "unknown"
        params = {"prog": a.prog, "op": "cl", "act": "env", "args": ARGS}
        assert a.call("call", params)["status"] == "succeeded"

        ok = collector.named("execute_tool echo")
        no = collector.named("execute_tool nofx")
        un = collector.named("execute_tool boom")
        cl = collector.named("execute_tool env")
        for span, op, outcome in ((ok, "ok", "succeeded"), (no, "no", "failed"),
                                  (un, "un", "unknown"), (cl, "cl", "succeeded")):  # fmt: skip
            assert span.kind == Span.SPAN_KIND_INTERNAL
            assert attributes(span) == {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": span.name.split(" ", 1)[1],
                "gen_ai.tool.call.id": key(a, op),
                "wardd.neuron": a.id,
                "wardd.prog": a.prog,
                "wardd.op": op,
                "wardd.attempt": 1,
                "wardd.outcome": outcome,
            }
            assert [e.name for e in span.events] == ["claimed"]
            assert span.start_time_unix_nano <= span.events[0].time_unix_nano
            assert span.events[0].time_unix_nano <= span.end_time_unix_nano
            error = outcome in ("failed", "unknown")
            code = Status.STATUS_CODE_ERROR if error else Status.STATUS_CODE_UNSET
            assert span.status.code == code
        # the caller's context in, unsigned: the invoke's span is its child
        assert ok.trace_id.hex() == CALLER_TRACE
        assert ok.parent_span_id.hex() == CALLER_SPAN
        assert ok.trace_state == "vendor=abc"
        assert not no.parent_span_id  # no context sent: a trace of its own
        resource = collector.spans()[0][0]
        assert resource["service.name"] == "wardd-test"
        # out to a cli act: its environment's TRACEPARENT is the dispatch span
        assert [ids_in(t) for t in (tmp_path / "cli-seen").read_text().split()] == [ids_of(cl)]
        # no args, value or secret in any export
        for body in collector.bodies():
            assert ARGS not in body
            assert SECRET.encode() not in body

    def test_the_client_sends_the_span_its_caller_is_in(self, make_daemon, collector, tmp_path):
        """A `Session` called inside an OpenTelemetry span sends its context:
        the dispatch span is that span's child."""
        from opentelemetry import trace

        d = make_daemon(traced_env(collector, tmp_path))
        a = Actor(d)
        a.submit("c1")
        caller = trace.SpanContext(
            int(CALLER_TRACE, 16), int(CALLER_SPAN, 16), False, trace.TraceFlags(1)
        )
        with trace.use_span(trace.NonRecordingSpan(caller)):
            assert Session(a.client, a.neuron).invoke("c1").status == "succeeded"
        span = collector.named("execute_tool echo")
        assert (span.trace_id.hex(), span.parent_span_id.hex()) == (CALLER_TRACE, CALLER_SPAN)

    def test_an_http_act_sends_the_dispatch_span_as_its_traceparent(
        self, make_daemon, collector, peers, tmp_path
    ):
        """The ``traceparent`` header the act's server received names the dispatch span."""
        api = Peer(lambda r: Reply(201, b"created"))
        peers.append(api)
        d = make_daemon(traced_env(collector, tmp_path, web={"adapter": "http", "url": api.url()}))
        a = Actor(d, acts=("web",))
        a.submit("h1", "web", ARGS)
        assert a.invoke("h1")["status"] == "succeeded"
        span = collector.named("execute_tool web")
        assert ids_in(api.requests[0].headers["traceparent"]) == ids_of(span)
        assert b"created" not in b"".join(collector.bodies())  # the value stays out

    def test_an_http_receipt_sends_the_span_of_the_call_it_asks_about(
        self, make_daemon, collector, peers, tmp_path
    ):
        """An unknown ``http`` attempt (a 500 after its effect): the receipt's GET
        carries the traceparent its POST carried, and its ``wardd.receipt`` span
        links to that dispatch span."""
        api = KeyLedger(tmp_path / "api-ledger.log")
        peer = Peer(api)
        peers.append(peer)
        web = {"adapter": "http", "url": peer.url(), "receipt_url": peer.url("/by-key/{key}")}
        d = make_daemon(traced_env(collector, tmp_path, web=web))
        a = Actor(d, acts=("web",))
        a.submit("r1", "web", b"after-500")
        assert a.invoke("r1")["status"] == "unknown"
        assert a.call("check_receipts", {}) == {"checked": 1, "resolved": 1}
        post, get = peer.requests
        assert (post.method, get.method) == ("POST", "GET")
        dispatch = collector.named("execute_tool web")
        assert ids_in(post.headers["traceparent"]) == ids_in(get.headers["traceparent"])
        assert ids_in(get.headers["traceparent"]) == ids_of(dispatch)
        receipt = collector.named("wardd.receipt web")
        assert [ids_of(link) for link in receipt.links] == [ids_of(dispatch)]

    def test_an_mcp_act_carries_the_dispatch_span_in_meta(self, make_daemon, collector, tmp_path):
        """An ``mcp`` act's tools/call has the span's traceparent in ``params._meta``,
        beside the fence key (the peer of tests/daemon/test_mcp_acts.py, over stdio)."""
        peer = Path(__file__).resolve().parent / "_mcp_peer.py"
        record = tmp_path / "record.jsonl"
        (tmp_path / "marks").mkdir()
        argv = [sys.executable, str(peer), "--record", str(record),
                "--ledger", str(tmp_path / "ledger-mcp"),
                "--marks", str(tmp_path / "marks")]  # fmt: skip
        gh = {"adapter": "mcp", "command": argv, "tool": "create"}
        d = make_daemon(traced_env(collector, tmp_path, gh=gh))
        a = Actor(d, acts=("gh",))
        a.submit("m1", "gh", b'{"title": "first"}')
        assert a.invoke("m1")["status"] == "succeeded"
        span = collector.named("execute_tool gh")
        (call,) = [json.loads(line) for line in record.read_text().splitlines()]
        meta = call["params"]["_meta"]
        assert meta["wardd/idempotency_key"] == key(a, "m1")
        assert ids_in(meta["traceparent"]) == ids_of(span)

    def test_a_malformed_traceparent_is_refused_and_changes_nothing(
        self, make_daemon, collector, tmp_path
    ):
        """A traceparent that is not W3C's is ``bad_request`` naming it; nothing runs."""
        d = make_daemon(traced_env(collector, tmp_path))
        a = Actor(d, acts=("echo",))
        a.submit("bad")
        signed = a.neuron.sign("invoke", a.prepare_params("bad"), NETWORK)
        signed["traceparent"] = "00-" + "0" * 32 + "-" + CALLER_SPAN + "-01"
        with pytest.raises(Exception) as got:
            a.client.call("invoke", signed)
        assert getattr(got.value, "code", None) == "bad_request"
        assert got.value.data == {"param": "traceparent"}
        assert a.state("bad") == "pending"


class TestUnknownAttempts:
    def test_a_crash_mid_call_then_a_receipt_link_their_spans_to_the_cut_dispatch(
        self, make_daemon, collector, tmp_path
    ):
        """SIGKILL while a python act runs (its effect done): at the start, the
        ``wardd.mark_unknown`` span, then the receipt's ``wardd.receipt``
        (executed), both linked to the dispatch span the act was given."""
        d = make_daemon(traced_env(collector, tmp_path))
        a = Actor(d, acts=("py",))
        a.submit("p1", "py", ARGS)
        (tmp_path / "hold").touch()
        call = Background(a.invoke, "p1", 1, d.connect())
        wait_for((tmp_path / "held").exists, what="the act to be held")
        d.kill()
        call.done.wait(10)
        (tmp_path / "hold").unlink()
        d.start()
        a.client = d.connect()
        wait_for(lambda: a.read("status")["receipts_pending"] == 0, what="the receipt")
        assert a.op("p1")["attempts"][0]["outcome"]["source"] == "receipt"

        op, given = (tmp_path / "seen").read_text().split()
        assert op == "p1"
        marked = collector.named("wardd.mark_unknown py")
        receipt = collector.named("wardd.receipt py")
        for span in (marked, receipt):
            assert [ids_of(link) for link in span.links] == [ids_in(given)]
            assert attributes(span)["gen_ai.tool.call.id"] == key(a, "p1")
            assert attributes(span)["wardd.prog"] == a.prog
        assert attributes(marked)["wardd.outcome"] == "unknown"
        assert attributes(marked)["wardd.claimed"] is True
        assert marked.status.code == Status.STATUS_CODE_ERROR
        facts = attributes(receipt)
        assert (facts["wardd.answer"], facts["wardd.source"]) == ("executed", "receipt")
        assert facts["wardd.outcome"] == "succeeded"
        # the dispatch span itself was cut by the crash: never exported
        assert not [s for _r, s in collector.spans() if s.name == "execute_tool py"]

    def test_a_reconcile_of_an_unknown_attempt_links_its_span_to_the_dispatch(
        self, make_daemon, collector, tmp_path
    ):
        """An operator's reconcile emits ``wardd.reconcile {act}`` with its answer."""
        d = make_daemon(traced_env(collector, tmp_path))
        a = Actor(d, acts=("boom",))
        a.submit("b1", "boom", ARGS)
        assert a.invoke("b1")["status"] == "unknown"
        a.call("reconcile", {"op": "b1", "attempt": 1, "outcome": {"status": "not_executed"}})
        dispatch = collector.named("execute_tool boom")
        span = collector.named("wardd.reconcile boom")
        assert [link.span_id for link in span.links] == [dispatch.span_id]
        facts = attributes(span)
        assert (facts["wardd.answer"], facts["wardd.source"]) == ("not_executed", "reconcile")


class TestCollectorDown:
    def test_dispatch_goes_on_and_the_failure_is_logged_once(self, make_daemon, tmp_path):
        """No collector listening: every invoke answers, and the export failure is
        logged (rate-limited: one line however many spans are lost)."""
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        d = make_daemon(traced_env(f"http://127.0.0.1:{port}/v1/traces", tmp_path))
        a = Actor(d, acts=("echo",))
        for i in range(20):
            a.submit(f"e{i}", "echo", ARGS)
            assert a.invoke(f"e{i}")["status"] == "succeeded"
        wait_for(lambda: "trace_export_failed" in d.log_text(), what="the export failure logged")
        for i in range(20, 40):
            a.submit(f"e{i}", "echo", ARGS)
            assert a.invoke(f"e{i}")["status"] == "succeeded"
        assert d.log_text().count("trace_export_failed") == 1
