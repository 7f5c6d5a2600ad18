"""Traces: the daemon's side of them, free of OpenTelemetry (docs/operations.md, "Traces").

The daemon tells a :class:`Tracer` what happens to a dispatch and to an
unknown attempt; the tracer makes spans of it. :data:`NO_TRACER`, the
default (``[tracing] exporter = "none"``), does nothing and imports
nothing. ``exporter = "otlp"`` builds the OpenTelemetry tracer of
:mod:`~wardd.daemon.observe.otel` (the ``otel`` extra), the only module that imports the SDK;
:func:`~wardd.daemon.observe.tracers.make_tracer` chooses between them.

What a span may carry is fixed here and there: where the attempt is (neuron,
prog, op, attempt, act, its fence key), its outcome, a receipt's answer
and the source of a resolution. Never the args, a value, an error text or
anything from the configuration's secrets.

Values cross threads: a dispatch's :class:`TraceIn` travels in its frozen
:class:`~wardd.daemon.dispatch.dispatches.Dispatch`; its :class:`DispatchSpan` lives on the worker
thread that serves it, from the worker's first look at it to its outcome.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import attrs

if TYPE_CHECKING:
    from ..core.records import AttemptRef

__all__ = [
    "CLAIM_KEY",
    "NO_SPAN",
    "NO_TRACER",
    "AttemptTrace",
    "DispatchSpan",
    "TraceIn",
    "Traced",
    "Tracer",
    "stored_traceparent",
]

#: The key of the claim record that keeps the dispatch span's traceparent.
CLAIM_KEY = "trace"


@attrs.frozen
class TraceIn:
    """A dispatch's trace context as it arrived: the caller's W3C ``traceparent``
    and ``tracestate`` (None: none sent) and the arrival time (the span's start)."""

    traceparent: str | None
    tracestate: str | None
    start_ns: int


@attrs.frozen
class AttemptTrace:
    """An attempt as a recovery span tells it, with its dispatch span's
    ``traceparent`` from its claim record (None: it was never claimed, or
    was claimed with tracing off)."""

    neuron: str
    prog: str
    op: str
    attempt: int
    act: str
    traceparent: str | None


class Traced(Protocol):
    """What a dispatch span is made from: a
    :class:`~wardd.daemon.dispatch.dispatches.Dispatch` (named here by its
    shape, so that tracing needs nothing of the dispatch's modules)."""

    @property
    def neuron(self) -> str: ...

    @property
    def act(self) -> str: ...

    @property
    def trace(self) -> TraceIn | None: ...


def stored_traceparent(claim_info: Any) -> str | None:
    """The dispatch span's traceparent kept in a claim record (``_claims``), if any."""
    if isinstance(claim_info, Mapping):
        got = claim_info.get(CLAIM_KEY)
        if isinstance(got, str):
            return got
    return None


class DispatchSpan:
    """One dispatch's span, on the worker thread that serves it. This base
    does nothing: the span of a dispatch when tracing is off."""

    #: the span's W3C context, handed to the act and kept in the claim (None: no span)
    traceparent: str | None = None
    tracestate: str | None = None

    def claimed(self, ref: AttemptRef) -> None:
        """The claim is committed: the attempt is known, the ``claimed`` event is now."""

    def ended(self, outcome: str | None, error_type: str | None = None) -> None:
        """The dispatch ended: its outcome (``succeeded``, ``failed``, ``unknown``,
        ``voided``; None: none), or the error code it was refused with."""


NO_SPAN = DispatchSpan()


class Tracer:
    """What the daemon tells about dispatches and recoveries. This base does
    nothing and costs nothing: the tracer when tracing is off."""

    enabled = False

    def incoming(self, params: Mapping[str, Any]) -> TraceIn | None:
        """A dispatch request's trace context (on the event loop); None when off."""
        return None

    def dispatch(self, d: Traced) -> DispatchSpan:
        """The span of ``d``, started now on its worker's thread."""
        return NO_SPAN

    def recovered(self, name: str, at: AttemptTrace, facts: Mapping[str, str | bool]) -> None:
        """A recovery step of an attempt: ``mark_unknown``, ``receipt`` or
        ``reconcile``; a span ``wardd.{name} {act}`` linked to its dispatch span."""

    def shutdown(self) -> None:
        """Flush what is queued (bounded) and stop exporting."""


NO_TRACER = Tracer()
