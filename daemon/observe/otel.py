"""The OpenTelemetry tracer (``[tracing] exporter = "otlp"``; the ``otel`` extra).

The only module of the daemon that imports OpenTelemetry; :mod:`~wardd.daemon.observe.tracing`
imports it when tracing is on. Spans go to the SDK's
``BatchSpanProcessor``: ``span.end()`` appends to its bounded queue
(:data:`QUEUE_MAX` spans; when full, the oldest span is dropped) and its
own thread exports batches over OTLP/HTTP, each request bounded by
:data:`EXPORT_TIMEOUT_S`. The event loop, the writer and the workers never
wait for the collector: an unreachable one costs dropped spans, logged at
most once a minute (``trace_export_failed``), never a dispatch.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import structlog
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    TraceState,
)

from wardd.adapters import idempotency_key

from .tracing import NO_SPAN, AttemptTrace, DispatchSpan, Traced, TraceIn, Tracer

if TYPE_CHECKING:
    from ..config import TracingConfig
    from ..core.records import AttemptRef

__all__ = ["OtelTracer"]

log = structlog.get_logger("wardd.traces")

QUEUE_MAX: Final = 2048  # spans waiting for export; past it the oldest are dropped
BATCH_MAX: Final = 512
EXPORT_DELAY_MS: Final = 500  # a batch leaves at most this long after its first span
EXPORT_TIMEOUT_S: Final = 5.0  # one export request, retries included
STOP_WAIT_S: Final = 2.0  # the stop's last export, at most
LOG_EVERY_S: Final = 60.0  # an export failure is logged at most this often
_ERROR_OUTCOMES: Final = frozenset({"failed", "unknown"})
# a span that could not be made is said through the SDK's loggers: rate-limited alike
_dropped = logging.getLogger("opentelemetry.wardd").warning
_ERROR: Final = Status(StatusCode.ERROR)
_UNSET: Final = Status(StatusCode.UNSET)


class _RateLimited(logging.Handler):
    """The SDK's own warnings (an export that failed, a full queue) as one
    structlog line a minute at most, with how many were left unsaid."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._last = -LOG_EVERY_S
        self._quiet = 0

    def emit(self, record: logging.LogRecord) -> None:  # under the handler's lock
        t = time.monotonic()
        if t - self._last < LOG_EVERY_S:
            self._quiet += 1
            return
        self._last, quiet, self._quiet = t, self._quiet, 0
        # the SDK's message names the endpoint and the cause, never a span's content
        log.warning("trace_export_failed", detail=record.getMessage()[:300], unsaid=quiet)


def _quiet_sdk_logs() -> None:
    """The SDK's loggers go to :class:`_RateLimited` only (never to stderr as they come)."""
    sdk = logging.getLogger("opentelemetry")
    sdk.propagate = False
    if not any(isinstance(h, _RateLimited) for h in sdk.handlers):
        sdk.addHandler(_RateLimited())


def _link(traceparent: str | None) -> list[Link]:
    if traceparent is None:
        return []
    _version, trace_id, span_id, flags = traceparent.split("-")[:4]
    ctx = SpanContext(
        int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16))
    )
    return [Link(ctx)]


def _where(neuron: str, prog: str | None, op: str, attempt: int, act: str) -> dict[str, Any]:
    got: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": act,
        "gen_ai.tool.call.id": idempotency_key(neuron, op, attempt),
        "wardd.neuron": neuron,
        "wardd.op": op,
        "wardd.attempt": attempt,
    }
    if prog is not None:
        got["wardd.prog"] = prog
    return got


class _Span(DispatchSpan):
    """A dispatch span in the making, on its worker's thread: plain values
    until it ends, when it is handed to the export queue whole, as the SDK's
    ``ReadableSpan`` (a value: no lock, no context, no sampler on the way)."""

    def __init__(self, tracer: OtelTracer, d: Traced, parent: SpanContext | None) -> None:
        self._tracer = tracer
        self._parent = parent
        self._name = f"execute_tool {d.act}"
        t = d.trace
        self._start = time.time_ns() if t is None else t.start_ns
        self._attrs: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": d.act,
            "wardd.neuron": d.neuron,
        }
        self._events: tuple[Event, ...] = ()
        # W3C: a child keeps its parent's trace id and sampled flag, and its tracestate
        self._trace_id = parent.trace_id if parent is not None else _random_id(128)
        self._span_id = _random_id(64)
        self._flags = TraceFlags(parent.trace_flags & 1 if parent is not None else 1)
        self.traceparent = f"00-{self._trace_id:032x}-{self._span_id:016x}-{self._flags:02x}"
        self.tracestate = None if t is None else t.tracestate

    def claimed(self, ref: AttemptRef) -> None:
        self._attrs.update(_where(ref.neuron, ref.prog, ref.op, ref.attempt, ref.act))
        self._events = (Event("claimed", {}, time.time_ns()),)

    def ended(self, outcome: str | None, error_type: str | None = None) -> None:
        if not self._flags.sampled:
            return  # the caller's trace is not recorded: nor is this span
        try:
            self._end(outcome, error_type)
        except Exception as exc:  # noqa: BLE001 - a span never changes a dispatch
            _dropped("a dispatch span was dropped: %r", exc)

    def _end(self, outcome: str | None, error_type: str | None) -> None:
        attrs = self._attrs
        if outcome is not None:
            attrs["wardd.outcome"] = outcome
        if error_type is not None:
            attrs["error.type"] = error_type
        error = outcome in _ERROR_OUTCOMES or (outcome is None and error_type is not None)
        parent = self._parent
        state = parent.trace_state if parent is not None else None
        tracer = self._tracer
        tracer.export(
            ReadableSpan(
                self._name,
                context=SpanContext(self._trace_id, self._span_id, False, self._flags, state),
                parent=parent,
                resource=tracer.resource,
                instrumentation_scope=tracer.scope,
                attributes=attrs,
                events=self._events,
                kind=SpanKind.INTERNAL,
                status=_ERROR if error else _UNSET,
                start_time=self._start,
                end_time=time.time_ns(),
            )
        )


def _random_id(bits: int) -> int:
    """A random non-zero id (W3C: an all-zero id is invalid), as the SDK makes them."""
    while True:
        got = random.getrandbits(bits)
        if got:
            return got


def _parent(t: TraceIn | None) -> SpanContext | None:
    """The caller's span from a checked ``traceparent`` (``_params``), or None."""
    if t is None or t.traceparent is None:
        return None
    _version, trace_id, span_id, flags = t.traceparent.split("-")[:4]
    state = TraceState.from_header([t.tracestate]) if t.tracestate else None
    return SpanContext(int(trace_id, 16), int(span_id, 16), True, TraceFlags(int(flags, 16)), state)


class OtelTracer(Tracer):
    """Spans through the OpenTelemetry SDK, exported over OTLP/HTTP (protobuf)."""

    enabled = True

    def __init__(self, config: TracingConfig, version: str) -> None:
        _quiet_sdk_logs()
        resource = Resource.create(
            {"service.name": config.service_name, "service.version": version}
        )
        exporter = OTLPSpanExporter(endpoint=config.endpoint, timeout=EXPORT_TIMEOUT_S)
        self._processor = BatchSpanProcessor(
            exporter,
            max_queue_size=QUEUE_MAX,
            schedule_delay_millis=EXPORT_DELAY_MS,
            max_export_batch_size=BATCH_MAX,
            export_timeout_millis=int(EXPORT_TIMEOUT_S * 1000),
        )
        self.resource = resource
        self.scope = InstrumentationScope("wardd", version)

    def incoming(self, params: Mapping[str, Any]) -> TraceIn:
        return TraceIn(params.get("traceparent"), params.get("tracestate"), time.time_ns())

    def dispatch(self, d: Traced) -> DispatchSpan:
        try:
            return _Span(self, d, _parent(d.trace))
        except Exception as exc:  # noqa: BLE001 - a span never changes a dispatch
            _dropped("a dispatch span could not be started: %r", exc)
            return NO_SPAN

    def export(self, span: ReadableSpan) -> None:
        """Queue a finished span (bounded; the oldest is dropped when full)."""
        self._processor.on_end(span)

    def recovered(self, name: str, at: AttemptTrace, facts: Mapping[str, str | bool]) -> None:
        """A recovery step as a span of a trace of its own (a start, a receipt
        and a reconcile have no caller), linked to the attempt's dispatch span."""
        try:
            self._recovered(name, at, facts)
        except Exception as exc:  # noqa: BLE001 - a span never changes a recovery
            _dropped("a recovery span was dropped: %r", exc)

    def _recovered(self, name: str, at: AttemptTrace, facts: Mapping[str, str | bool]) -> None:
        now = time.time_ns()
        ctx = SpanContext(_random_id(128), _random_id(64), False, TraceFlags(1))
        error = facts.get("wardd.outcome") == "unknown"
        self.export(
            ReadableSpan(
                f"wardd.{name} {at.act}",
                context=ctx,
                resource=self.resource,
                instrumentation_scope=self.scope,
                attributes={**_where(at.neuron, at.prog, at.op, at.attempt, at.act), **facts},
                links=_link(at.traceparent),
                kind=SpanKind.INTERNAL,
                status=_ERROR if error else _UNSET,
                start_time=now,
                end_time=now,
            )
        )

    def shutdown(self) -> None:
        """Export what is queued, waiting :data:`STOP_WAIT_S` at most (a
        collector that does not answer never holds the stop)."""
        t = threading.Thread(target=self._processor.shutdown, name="wardd-traces-stop", daemon=True)
        t.start()
        t.join(STOP_WAIT_S)
