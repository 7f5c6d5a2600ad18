"""Param checking (contract §4): type, enum and range checks before any lookup.

Each method has a spec of required and optional fields, written in its
entry of the method table (:mod:`~wardd.daemon.dispatch.handlers`) with the checks defined here.
A violation is ``bad_request`` naming the field; unknown fields are refused
too, so a misspelt ``expected_epoch`` can never silently drop a fence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wardd.protocol import (
    OUTCOME_STATUSES,
    BadRequest,
    is_id,
    is_neuron_id,
    is_uint,
    traceparent_problem,
    tracestate_problem,
)

__all__ = [
    "NO_PARAMS",
    "PAGE",
    "TRACE",
    "Check",
    "Spec",
    "act_list",
    "boolean",
    "byte_string",
    "check_params",
    "descriptor",
    "ident",
    "limit",
    "neuron_id",
    "one_of",
    "outcome",
    "text",
    "uint",
]


Check = Callable[[Any], str | None]  # None if fine, else what is wrong


def uint(v: Any) -> str | None:
    if not is_uint(v):
        return "must be an unsigned integer"
    return None


def limit(v: Any) -> str | None:
    if uint(v) or not 1 <= v <= 1000:
        return "must be an integer from 1 to 1000"
    return None


def ident(v: Any) -> str | None:
    if not is_id(v):
        return "must be 1-128 characters of [A-Za-z0-9._:-]"
    return None


def neuron_id(v: Any) -> str | None:
    if not is_neuron_id(v):
        return "must be 64 lowercase hex digits (an Ed25519 public key)"
    return None


def boolean(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be a boolean"


def byte_string(v: Any) -> str | None:
    return None if isinstance(v, bytes) else "must be a byte string"


def text(v: Any) -> str | None:
    return None if isinstance(v, str) and len(v) <= 256 else "must be a text string"


def descriptor(v: Any) -> str | None:
    from ..dispatch.descriptors import well_formed

    return None if well_formed(v) else "must be a well-formed v1 worker descriptor"


def act_list(v: Any) -> str | None:
    if not isinstance(v, list) or len(v) > 1024 or any(ident(a) for a in v):
        return "must be a list of act tags"
    return None


def one_of(*values: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in values and isinstance(v, str) else f"must be one of {', '.join(values)}"

    return check


def outcome(v: Any) -> str | None:
    if not isinstance(v, dict) or not set(v) <= {"status", "value"} or "status" not in v:
        return "must be a map {status, value?}"
    return one_of(*OUTCOME_STATUSES)(v["status"])


Spec = tuple[Mapping[str, Check], Mapping[str, Check]]  # (required, optional)

#: The params of a method that takes none of its own.
NO_PARAMS: Spec = ({}, {})

#: The paging params of a paged read (contract §4).
PAGE: Mapping[str, Check] = {"after": uint, "limit": limit}

_SIG_FIELDS: Mapping[str, Check] = {
    "neuron": neuron_id,
    "sig": lambda v: None if isinstance(v, bytes) and len(v) == 64 else "must be 64 bytes",
}

#: The optional W3C trace context of a dispatch request, outside what is
#: signed (docs/protocol.md, "Trace context"): invoke, execute and call.
TRACE: Mapping[str, Check] = {
    "traceparent": traceparent_problem,
    "tracestate": tracestate_problem,
}


def _no_floats(v: Any, depth: int = 0) -> bool:
    if isinstance(v, float):
        return False
    if isinstance(v, dict):
        return all(isinstance(k, str) and _no_floats(x, depth + 1) for k, x in v.items())
    if isinstance(v, list):
        return all(_no_floats(x, depth + 1) for x in v)
    return True


# values that are neither floats nor containers: nothing to walk
_FLAT = frozenset({str, bytes, int, bool, type(None)})
_NOT_SIGNABLE = "signed params use text keys only and no floats"
# a signed spec's fields with neuron, sig and network added, by spec (specs are
# the method table's constants; each is kept beside its merge so that its id is never reused)
_SIGNED_SPECS: dict[int, tuple[Spec, Spec]] = {}


def _signed_spec(spec: Spec) -> Spec:
    hit = _SIGNED_SPECS.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    required, optional = spec
    merged: Spec = ({**required, **_SIG_FIELDS}, {**optional, "network": text})
    if len(_SIGNED_SPECS) >= 1024:
        _SIGNED_SPECS.clear()
    _SIGNED_SPECS[id(spec)] = (spec, merged)
    return merged


def check_params(spec: Spec, params: Mapping[str, Any], *, signed: bool) -> None:
    """Raise :class:`BadRequest` unless ``params`` fits the method's ``spec``
    (a signed method's params also carry ``neuron``, ``sig`` and ``network``).

    A signed request's text keys and no floats, anywhere, are checked before
    anything else (the signing input must be canonical); then unknown
    params, in the order they came; then each field of ``spec``, in order."""
    if signed:
        required, optional = _signed_spec(spec)
        unknown = None
        for key, value in params.items():  # one walk: floats and key types, unknown names
            if not (isinstance(key, str) and (type(value) in _FLAT or _no_floats(value))):
                raise BadRequest(_NOT_SIGNABLE)
            if unknown is None and key not in required and key not in optional:
                unknown = key
        if unknown is not None:
            shown = unknown[:64]
            raise BadRequest(f"unknown param {shown!r}", {"param": shown})
    else:
        required, optional = spec
        for key in params:
            if not isinstance(key, str):
                raise BadRequest("param names must be text")
            if key not in required and key not in optional:
                shown = key[:64]
                raise BadRequest(f"unknown param {shown!r}", {"param": shown})
    for key, check in required.items():
        if key not in params:
            raise BadRequest(f"missing param {key!r}", {"param": key})
        problem = check(params[key])
        if problem:
            raise BadRequest(f"param {key!r} {problem}", {"param": key})
    for key, check in optional.items():
        if key in params:
            problem = check(params[key])
            if problem:
                raise BadRequest(f"param {key!r} {problem}", {"param": key})
