"""Param checking (contract §4): type, enum and range checks before any lookup.

Each method has a spec of required and optional fields. A violation is
``bad_request`` naming the field; unknown fields are refused too, so a
misspelt ``expected_epoch`` can never silently drop a fence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from wardd.protocol import (
    ATTEMPT_LIST_STATES,
    OUTCOME_STATUSES,
    BadRequest,
    OpState,
    ProgState,
    is_id,
    is_neuron_id,
    is_uint,
)

__all__ = ["SIGNED", "UNSIGNED", "check_params"]


Check = Callable[[Any], str | None]  # None if fine, else what is wrong


def _uint(v: Any) -> str | None:
    if not is_uint(v):
        return "must be an unsigned integer"
    return None


def _limit(v: Any) -> str | None:
    if _uint(v) or not 1 <= v <= 1000:
        return "must be an integer from 1 to 1000"
    return None


def _id(v: Any) -> str | None:
    if not is_id(v):
        return "must be 1-128 characters of [A-Za-z0-9._:-]"
    return None


def _neuron(v: Any) -> str | None:
    if not is_neuron_id(v):
        return "must be 64 lowercase hex digits (an Ed25519 public key)"
    return None


def _bool(v: Any) -> str | None:
    return None if isinstance(v, bool) else "must be a boolean"


def _bytes(v: Any) -> str | None:
    return None if isinstance(v, bytes) else "must be a byte string"


def _text(v: Any) -> str | None:
    return None if isinstance(v, str) and len(v) <= 256 else "must be a text string"


def _map(v: Any) -> str | None:
    return None if isinstance(v, dict) else "must be a map"


def _descriptor(v: Any) -> str | None:
    from .descriptors import well_formed

    return None if well_formed(v) else "must be a well-formed v1 worker descriptor"


def _acts(v: Any) -> str | None:
    if not isinstance(v, list) or len(v) > 1024 or any(_id(a) for a in v):
        return "must be a list of act tags"
    return None


def _enum(*values: str) -> Check:
    def check(v: Any) -> str | None:
        return None if v in values and isinstance(v, str) else f"must be one of {', '.join(values)}"

    return check


def _outcome(v: Any) -> str | None:
    if not isinstance(v, dict) or not set(v) <= {"status", "value"} or "status" not in v:
        return "must be a map {status, value?}"
    return _enum(*OUTCOME_STATUSES)(v["status"])


Spec = tuple[Mapping[str, Check], Mapping[str, Check]]  # (required, optional)

_PREPARE: Spec = (
    {"op": _id, "expected_attempt": _uint, "placement_generation": _uint},
    {"expected_epoch": _uint},
)
_OP: Spec = ({"op": _id}, {})
_STEPS: Spec = ({"prog": _id, "reservation": _id, "steps": _uint}, {})

SIGNED: dict[str, Spec] = {
    "register_neuron": ({}, {}),
    "bind_placement": ({"expected_generation": _uint, "descriptor": _descriptor}, {}),
    "release_placement": ({"expected_generation": _uint}, {}),
    "advance_epoch": ({"expected_epoch": _uint}, {}),
    "set_grant": (
        {"prog": _id, "acts": _acts, "enabled": _bool, "expected_policy_version": _uint},
        {},
    ),
    "create_prog": ({"prog": _id, "step_limit": _uint}, {}),
    "set_prog_state": (
        {"prog": _id, "expected_state": _enum(*ProgState), "state": _enum(*ProgState)},
        {"expected_state_version": _uint},
    ),
    "submit": ({"prog": _id, "op": _id, "act": _id, "args": _bytes}, {}),
    "prepare": _PREPARE,
    "invoke": _PREPARE,
    "manual_take": ({"op": _id, "expected_attempt": _uint}, {"expected_epoch": _uint}),
    "reconcile": ({"op": _id, "attempt": _uint, "outcome": _outcome}, {}),
    "cancel": _OP,
    "consume": _OP,
    "rebind": ({"op": _id}, {"expected_epoch": _uint}),
    "reserve_steps": _STEPS,
    "settle_steps": _STEPS,
    "recover_reservations": ({"prog": _id}, {"before": _uint}),
    "check_receipts": ({}, {}),
    "abort": ({"op": _id, "attempt": _uint}, {}),
    "set_step_limit": (
        {"prog": _id, "step_limit": _uint, "expected_state_version": _uint},
        {},
    ),
}

_PAGE = {"after": _uint, "limit": _limit}
UNSIGNED: dict[str, Spec] = {
    "status": ({}, {}),
    "list_workers": ({}, {}),
    "execute": ({"token": _bytes}, {}),
    "get_neuron": ({"neuron": _neuron}, {}),
    "get_prog": ({"neuron": _neuron, "prog": _id}, {}),
    "get_operation": ({"neuron": _neuron, "op": _id}, {}),
    "list_operations": ({"neuron": _neuron}, {"state": _enum(*OpState), "prog": _id, **_PAGE}),
    "history": ({"neuron": _neuron, "op": _id}, _PAGE),
    "list_attempts": ({"state": _enum(*ATTEMPT_LIST_STATES)}, _PAGE),
}

_SIG_FIELDS: Mapping[str, Check] = {
    "neuron": _neuron,
    "sig": lambda v: None if isinstance(v, bytes) and len(v) == 64 else "must be 64 bytes",
}


def _no_floats(v: Any, depth: int = 0) -> bool:
    if isinstance(v, float):
        return False
    if isinstance(v, dict):
        return all(isinstance(k, str) and _no_floats(x, depth + 1) for k, x in v.items())
    if isinstance(v, list):
        return all(_no_floats(x, depth + 1) for x in v)
    return True


def check_params(method: str, params: Mapping[str, Any], *, signed: bool) -> None:
    """Raise :class:`BadRequest` unless ``params`` fits the method's spec."""
    required, optional = SIGNED[method] if signed else UNSIGNED[method]
    if signed:
        required = {**required, **_SIG_FIELDS}
        optional = {**optional, "network": _text}
        if not _no_floats(params):
            raise BadRequest("signed params use text keys only and no floats")
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
