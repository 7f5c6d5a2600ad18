"""The W3C trace context on a request: its checks (`wardd.protocol`), its place
outside the signature, the params of the dispatch methods, the client's
reading of the caller's span, and the tracer that does nothing by default."""

from __future__ import annotations

import sys

import pytest

from wardd.client import Neuron
from wardd.client._trace import current_trace
from wardd.daemon.config import TracingConfig
from wardd.daemon.dispatch.handlers import METHODS
from wardd.daemon.observe.tracers import make_tracer
from wardd.daemon.observe.tracing import NO_SPAN, NO_TRACER, stored_traceparent
from wardd.daemon.wire.params import check_params
from wardd.protocol import BadRequest, traceparent_problem, tracestate_problem, verify

GOOD = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


class TestTraceparent:
    @pytest.mark.parametrize(
        "value",
        [GOOD, GOOD[:-2] + "00", GOOD[:-2] + "03", "01" + GOOD[2:] + "-later-fields"],
    )
    def test_a_w3c_traceparent_is_accepted(self, value):
        """Version 00 exactly, any flags, and a later version's extra fields."""
        assert traceparent_problem(value) is None

    @pytest.mark.parametrize(
        "value",
        [
            GOOD.upper(),
            GOOD + "-x",  # version 00 has exactly four fields
            "ff" + GOOD[2:],
            "00-" + "0" * 32 + GOOD[35:],
            GOOD[:36] + "0" * 16 + "-01",
            GOOD[:-1],
            "",
            55,
            None,
            b"00-",
        ],
    )
    def test_anything_else_is_refused(self, value):
        """Upper case, a wrong length, version ff, an all-zero id, not text."""
        assert traceparent_problem(value) is not None

    def test_tracestate_is_printable_ascii_and_bounded(self):
        """W3C's list of members, kept to 512 characters of printable ASCII."""
        assert tracestate_problem("vendor=abc,other=x-y") is None
        assert tracestate_problem("a" * 513) is not None
        assert tracestate_problem("v=\n") is not None
        assert tracestate_problem(3) is not None


class TestOutsideTheSignature:
    def test_a_signature_holds_whatever_trace_context_is_added_or_changed(self):
        """``traceparent`` and ``tracestate`` are not signed: a tracer may set them."""
        n = Neuron.generate()
        params = {"op": "op-1", "expected_attempt": 1, "placement_generation": 1}
        signed = n.sign("invoke", params, "net")
        assert verify(n.id, signed["sig"], "net", "invoke", {**signed, "traceparent": GOOD})
        traced = {**signed, "traceparent": GOOD, "tracestate": "a=b"}
        assert verify(n.id, signed["sig"], "net", "invoke", traced)
        changed = {**signed, "expected_attempt": 2, "traceparent": GOOD}
        assert not verify(n.id, signed["sig"], "net", "invoke", changed)


class TestDispatchParams:
    SIGNED = {"neuron": "a" * 64, "sig": b"s" * 64}

    @pytest.mark.parametrize("method", ["invoke", "call", "execute"])
    def test_the_dispatch_methods_take_a_trace_context(self, method):
        """invoke, call and execute take an optional traceparent and tracestate;
        a malformed one is bad_request naming it."""
        spec = METHODS[method]
        required = {
            "invoke": {"op": "o", "expected_attempt": 1, "placement_generation": 1},
            "call": {"prog": "p", "op": "o", "act": "echo", "args": b""},
            "execute": {"token": b"t"},
        }[method]
        params = {**required, **(self.SIGNED if spec.signed else {})}
        check_params(spec.params, {**params, "traceparent": GOOD, "tracestate": "a=b"},
                     signed=spec.signed)  # fmt: skip
        with pytest.raises(BadRequest) as got:
            check_params(spec.params, {**params, "traceparent": "00-x"}, signed=spec.signed)
        assert got.value.data == {"param": "traceparent"}

    def test_other_methods_refuse_it_as_unknown(self):
        """Only a dispatch has a span to be the child of: prepare refuses the param."""
        spec = METHODS["prepare"]
        params = {"op": "o", "expected_attempt": 1, "placement_generation": 1, **self.SIGNED}
        with pytest.raises(BadRequest) as got:
            check_params(spec.params, {**params, "traceparent": GOOD}, signed=True)
        assert got.value.data == {"param": "traceparent"}


class TestClientContext:
    def test_nothing_is_sent_when_the_caller_does_not_trace(self, monkeypatch):
        """Without ``opentelemetry.trace`` imported by the caller: no param, no import."""
        monkeypatch.delitem(sys.modules, "opentelemetry.trace", raising=False)
        assert current_trace() == {}
        assert "opentelemetry.trace" not in sys.modules

    def test_the_current_span_is_sent(self):
        """Inside a span of the caller's: its traceparent and tracestate."""
        trace = pytest.importorskip("opentelemetry.trace")
        state = trace.TraceState([("vendor", "abc")])
        ctx = trace.SpanContext(
            0x4BF92F3577B34DA6A3CE929D0E0E4736,
            0x00F067AA0BA902B7,
            is_remote=False,
            trace_flags=trace.TraceFlags(1),
            trace_state=state,
        )
        assert current_trace() == {}  # no span is current
        with trace.use_span(trace.NonRecordingSpan(ctx)):
            assert current_trace() == {"traceparent": GOOD, "tracestate": "vendor=abc"}


class TestNoTracer:
    def test_tracing_off_is_the_tracer_that_does_nothing(self):
        """exporter none: no tracer object of OpenTelemetry's, no span, no context."""
        tracer = make_tracer(TracingConfig(), "0")
        assert tracer is NO_TRACER and not tracer.enabled
        assert tracer.incoming({"traceparent": GOOD}) is None
        assert NO_SPAN.traceparent is None

    def test_a_claim_record_keeps_the_span_or_nothing(self):
        """The dispatch span's traceparent is read back from a claim record, if kept."""
        assert stored_traceparent({"adapter": "cli", "record": None, "trace": GOOD}) == GOOD
        assert stored_traceparent({"adapter": "cli", "record": None}) is None
        assert stored_traceparent(None) is None

    def test_a_receipt_is_asked_with_the_span_its_claim_kept(self):
        """The receipt question carries the claim's traceparent, for a claim of
        the adapter that serves the act now; a hint-only one carries none."""
        from wardd.adapters import echo_adapter
        from wardd.daemon.dispatch.claims import receipt_question

        adapter = echo_adapter()
        stored = {"adapter": adapter.kind, "record": None, "trace": GOOD}
        assert receipt_question(adapter, True, stored).traceparent == GOOD
        other = {**stored, "adapter": "another"}
        assert receipt_question(adapter, True, other).traceparent is None
        assert receipt_question(adapter, False, None).traceparent is None
