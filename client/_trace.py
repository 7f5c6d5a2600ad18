"""The caller's trace context on a dispatch request (docs/client.md, "Traces").

When the calling program uses OpenTelemetry (``opentelemetry.trace`` is
already imported: this module never imports it), an ``invoke``,
``execute`` or ``call`` carries the current span's W3C context as the
optional ``traceparent`` and ``tracestate`` params, outside what is signed;
the daemon's dispatch span is then its child.
"""

from __future__ import annotations

import sys

from wardd.protocol import traceparent_problem, tracestate_problem

__all__ = ["current_trace"]


def current_trace() -> dict[str, str]:
    """The current span's ``traceparent`` (and ``tracestate``), or {} when
    there is none or OpenTelemetry is not in use in this process."""
    otel = sys.modules.get("opentelemetry.trace")
    if otel is None:
        return {}
    try:
        ctx = otel.get_current_span().get_span_context()
        if not ctx.is_valid:
            return {}
        parent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"
        state = ctx.trace_state.to_header()
    except Exception:  # noqa: BLE001 - a tracer's failure never stops a request
        return {}
    if traceparent_problem(parent) is not None:
        return {}
    out = {"traceparent": parent}
    if state and tracestate_problem(state) is None:
        out["tracestate"] = state
    return out
