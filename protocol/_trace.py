"""W3C trace context on a request (docs/protocol.md, "Trace context").

A dispatch request (``invoke``, ``execute``, ``call``) may carry the caller's
trace context in two optional params, ``traceparent`` and ``tracestate``, in
the W3C Trace Context text forms. They are outside what a neuron signs
(:data:`UNSIGNED`): a tracing proxy or library may add or rewrite them, and
they never change what the request does. A malformed one is refused
(``bad_request`` naming it), never guessed at.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["TRACE_FIELDS", "UNSIGNED", "traceparent_problem", "tracestate_problem"]

#: The trace context params (W3C Trace Context headers, lowercase).
TRACE_FIELDS: Final = ("traceparent", "tracestate")
#: The params a signature does not cover: the signature itself and the trace context.
UNSIGNED: Final = frozenset({"sig", *TRACE_FIELDS})

# version 00 is exactly 55 characters; a later version may append "-..." fields
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
TRACESTATE_MAX: Final = 512  # W3C: 32 list members; vendors truncate at 512 characters
_TRACESTATE_CHARS = frozenset(chr(c) for c in range(0x20, 0x7F))


def traceparent_problem(value: Any) -> str | None:
    """Why ``value`` is not a W3C ``traceparent`` (None: it is one)."""
    if not isinstance(value, str):
        return "must be text"
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return "must be a W3C traceparent: 00-<32 hex>-<16 hex>-<2 hex>"
    version, trace_id, span_id, _flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return "has an invalid version"
    if trace_id == "0" * 32 or span_id == "0" * 16:
        return "has an all-zero trace or span id"
    return None


def tracestate_problem(value: Any) -> str | None:
    """Why ``value`` is not a W3C ``tracestate`` we keep (None: it is one)."""
    if not isinstance(value, str):
        return "must be text"
    if len(value) > TRACESTATE_MAX:
        return f"must be at most {TRACESTATE_MAX} characters"
    if not _TRACESTATE_CHARS.issuperset(value):
        return "must be printable ASCII"
    return None
