"""Decisions about the neuron root (contract §3.1, §4): registration,
placement, epoch, grants and prog states.

Placement, epoch, grant and prog-state writes run while the handler holds
the neuron's ward guard exclusively; each voids, in the same decision, the
prepared attempts it makes stale, so a token prepared before it can never
be claimed after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from wardd.protocol import (
    BadTransition,
    EpochMismatch,
    GenerationMismatch,
    OpenOperations,
    PolicyMismatch,
    ProgConflict,
    ProgState,
    StateMismatch,
)

from .attempts import void_prepared
from .changes import AppendEvent, Change, Decision, NewNeuron, NewProg, SetNeuron, SetProg
from .lookup import require_enabled_grant, require_neuron, require_prog
from .records import Neuron, Prog, ProgView

__all__ = [
    "PROG_TRANSITIONS",
    "advance_epoch",
    "bind_placement",
    "create_prog",
    "fence_state_version",
    "register_neuron",
    "set_grant",
    "set_prog_state",
]

P = ProgState
#: contract §3.1: the prog state machine.
PROG_TRANSITIONS: Final = frozenset(
    {
        (P.ACTIVE, P.PAUSED),
        (P.PAUSED, P.ACTIVE),
        (P.ACTIVE, P.RETIRED),
        (P.PAUSED, P.RETIRED),
        (P.RETIRED, P.ARCHIVED),
    }
)


def register_neuron(existing: Neuron | None, neuron: str, next_id: int) -> Decision:
    if existing is not None:
        return Decision((), {"neuron": neuron, "epoch": existing.epoch, "already": True})
    changes = (NewNeuron(next_id, neuron), AppendEvent("registered", next_id))
    return Decision(changes, {"neuron": neuron, "epoch": 1})


def bind_placement(
    view: ProgView,
    expected: int,
    descriptor: Mapping[str, Any] | None,
    digest: str | None,
) -> Decision:
    """bind (descriptor given) or release (None): CAS on the generation,
    then void the neuron's prepared attempts (``placement_changed``)."""
    n = require_neuron(view.neuron)
    if expected != n.placement_generation:
        raise GenerationMismatch(
            "expected_generation is not the current one",
            {"placement_generation": n.placement_generation},
        )
    gen = expected + 1
    changes: list[Change] = [
        SetNeuron(
            n.id,
            {"placement_generation": gen, "placement": descriptor, "placement_digest": digest},
        )
    ]
    voids, voided = void_prepared(view.prepared, "placement_changed")
    changes += voids
    data: dict[str, Any] = {"placement_generation": gen, "voided": voided}
    if descriptor is not None:
        data.update(
            digest=digest,
            worker=descriptor["executor"]["worker"],
            boot=descriptor["executor"]["boot"],
        )
    kind = "placement_bound" if descriptor is not None else "placement_released"
    changes.append(AppendEvent(kind, n.id, data=data))
    return Decision(tuple(changes), {"placement_generation": gen, "voided": voided})


def advance_epoch(view: ProgView, expected: int) -> Decision:
    n = require_neuron(view.neuron)
    if expected != n.epoch:
        raise EpochMismatch("expected_epoch is not the current epoch", {"epoch": n.epoch})
    epoch = expected + 1
    changes: list[Change] = [SetNeuron(n.id, {"epoch": epoch})]
    voids, voided = void_prepared(view.prepared, "epoch_changed")
    changes += voids
    changes.append(AppendEvent("epoch_advanced", n.id, data={"epoch": epoch, "voided": voided}))
    return Decision(tuple(changes), {"epoch": epoch, "voided": voided})


def set_grant(view: ProgView, acts: list[str], enabled: bool, expected: int) -> Decision:
    """A new grant for the prog (contract §3.1): the prepared attempts of
    acts it no longer allows are voided (``revoked``)."""
    n, p = require_prog(view)
    if expected != n.policy_version:
        raise PolicyMismatch(
            "expected_policy_version is not the current one",
            {"policy_version": n.policy_version},
        )
    pv = expected + 1
    granted = sorted(set(acts))
    changes: list[Change] = [
        SetNeuron(n.id, {"policy_version": pv}),
        SetProg(p.id, {"grant_acts": granted, "grant_enabled": enabled}),
    ]
    stale = tuple((op, a) for op, a in view.prepared if not (enabled and acts and op.act in acts))
    voids, voided = void_prepared(stale, "revoked")
    changes += voids
    changes.append(
        AppendEvent(
            "grant_set",
            n.id,
            data={
                "prog": view.name,
                "acts": granted,
                "enabled": enabled,
                "policy_version": pv,
                "voided": voided,
            },
        )
    )
    return Decision(tuple(changes), {"policy_version": pv, "voided": voided})


def create_prog(view: ProgView, step_limit: int, next_id: int) -> Decision:
    n = require_neuron(view.neuron)
    if view.prog is not None:
        if view.prog.step_limit != step_limit:
            raise ProgConflict("a prog with this id and other content exists")
        return Decision((), {"prog": view.name, "already": True})
    changes = (
        NewProg(next_id, n.id, view.name, step_limit),
        AppendEvent("prog_created", n.id, data={"prog": view.name, "step_limit": step_limit}),
    )
    return Decision(changes, {"prog": view.name})


def _prog_state_data(p: Prog) -> dict[str, Any]:
    return {"state": p.state.value, "state_version": p.state_version}


def fence_state_version(p: Prog, expected: int) -> None:
    """A state change's fence (contract §3.1, §3.8): ``state_mismatch`` with
    the prog's state and version when ``expected`` is not its version."""
    if expected != p.state_version:
        raise StateMismatch(
            f"the prog's state_version is {p.state_version}, not {expected}",
            _prog_state_data(p),
        )


def set_prog_state(
    view: ProgView, expected: ProgState, state: ProgState, expected_version: int | None
) -> Decision:
    """contract §3.4 order: ownership, grant, the state CAS, then (when given)
    ``expected_state_version`` (both ``state_mismatch``), the transition
    (``bad_transition``), then the archive check (``open_operations``)."""
    n, p = require_prog(view)
    require_enabled_grant(p)
    if p.state != expected:
        raise StateMismatch(f"the prog is {p.state}", _prog_state_data(p))
    if expected_version is not None:
        fence_state_version(p, expected_version)
    if (expected, state) not in PROG_TRANSITIONS:
        raise BadTransition(f"{expected} -> {state} is not a prog transition")
    if state == P.ARCHIVED and (view.open_ops or view.open_attempts):
        raise OpenOperations(
            "the prog has open operations or in-doubt attempts",
            {"operations": view.open_ops, "attempts": view.open_attempts},
        )
    version = p.state_version + 1
    changes: list[Change] = [SetProg(p.id, {"state": state}, bump_version=True)]
    voided = 0
    if state in (P.PAUSED, P.RETIRED):
        voids, voided = void_prepared(view.prepared, "prog_inactive")
        changes += voids
    changes.append(
        AppendEvent(
            "prog_state_set",
            n.id,
            data={
                "prog": view.name,
                "state": state.value,
                "state_version": version,
                "voided": voided,
            },
        )
    )
    return Decision(
        tuple(changes), {"prog": view.name, "state": state.value, "state_version": version}
    )
