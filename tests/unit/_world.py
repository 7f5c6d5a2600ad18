"""The records of one prepare request, built in memory: `World` holds its
knobs (every check passes by default) and `build` makes the records and
params of one. Shared by the pure-core tables of prepare's order and of
``call`` (tests never import each other: tests/unit/test_layout.py).
"""

from __future__ import annotations

import copy
from typing import Any

import attrs

from wardd.daemon.core.records import (
    Attempt,
    AttemptKind,
    BootContext,
    Grant,
    Neuron,
    Op,
    OpView,
    Prog,
    Tombstone,
)
from wardd.daemon.core.states import op_state
from wardd.protocol import AttemptState, OpState, ProgState

__all__ = [
    "ACT",
    "BOOT",
    "BOUND",
    "DIGEST",
    "OLD_BOOT",
    "World",
    "attempt",
    "build",
    "descriptor_of",
]

A = AttemptState
BOOT = "b" * 32
OLD_BOOT = "a" * 32
DIGEST = "d" * 64
ACT = "echo"
BOUND = 16


@attrs.define
class World:
    """The knobs of one prepare request; the defaults pass every check."""

    neuron: bool = True
    op: str = "present"  # present | absent | pruned
    cancelled: bool = False
    consumed: bool = False
    expected_epoch: str = "current"  # current | stale | omitted
    prog_state: ProgState = ProgState.ACTIVE
    exhausted: bool = False
    grant: str = "enabled"  # enabled | disabled | missing
    act_granted: bool = True
    placement: bool = True
    generation_current: bool = True
    placement_boot: str = BOOT
    advertised: bool = True
    profile: str = "ours"  # ours | other_machine | other_backend | limited
    descriptor_accepts: bool = True
    act_configured: bool = True
    args_len: int = BOUND  # at the bound: passes
    expected_attempt_right: bool = True
    # the states of attempts after the two reopening ones (void, failed)
    open_states: tuple[AttemptState, ...] = ()
    succeeded: bool = False


def attempt(number: int, state: AttemptState) -> Attempt:
    return Attempt(
        id=100 + number,
        op_id=7,
        attempt=number,
        kind=AttemptKind.GUARDED,
        epoch=3,
        policy_version=2,
        placement_generation=5,
        digest=DIGEST,
        worker="w0",
        boot=BOOT,
        state=state,
        reason="token_expired" if state == A.VOID else None,
        evidence=None,
        ever_unknown=state == A.UNKNOWN,
    )


def descriptor_of(boot: str, act_bounds: dict[str, int]) -> dict[str, Any]:
    """A descriptor this daemon advertises in boot ``boot`` (its profile
    supported), accepting the acts of ``act_bounds`` (act → its args' bound)."""
    return {
        "machine": "x86_64-linux",
        "environment": "cpython",
        "proof": "none",
        "network": "testnet",
        "limits": {"cpu_s": None, "time_s": None, "memory_bytes": None},
        "executor": {
            "backend": "wardd",
            "warrior": "wardd 0",
            "device": "dev",
            "boot": boot,
            "worker": "w0",
        },
        "acts": list(act_bounds),
        "act_bounds": dict(act_bounds),
    }


def build(w: World) -> tuple[BootContext, OpView, dict[str, Any]]:
    """The records and params of ``w`` (a real descriptor's shape, reduced to
    the fields prepare reads)."""
    ours = descriptor_of(w.placement_boot, {ACT if w.descriptor_accepts else "other": BOUND})
    descriptor = copy.deepcopy(ours)
    if w.profile == "other_machine":
        descriptor["machine"] = "aarch64-linux"
    elif w.profile == "other_backend":
        descriptor["executor"]["backend"] = "another"
    elif w.profile == "limited":
        descriptor["limits"]["cpu_s"] = 10
    ctx = BootContext(
        boot=BOOT,
        network="testnet",
        advertised={DIGEST: ours} if w.advertised else {"e" * 64: ours},
        act_bounds={ACT: BOUND} if w.act_configured else {"other": BOUND},
    )
    neuron = Neuron(
        id=1,
        neuron="n" * 64,
        epoch=3,
        policy_version=2,
        placement_generation=5,
        placement=descriptor if w.placement else None,
        placement_digest=DIGEST if w.placement else None,
    )
    grant = None
    if w.grant != "missing":
        grant = Grant(
            acts=frozenset({ACT} if w.act_granted else {"other"}),
            enabled=w.grant == "enabled",
        )
    prog = Prog(
        id=4,
        neuron_id=1,
        prog="p",
        state=w.prog_state,
        state_version=1,
        step_limit=100,
        steps_used=100 if w.exhausted else 0,
        steps_reserved=0,
        exhausted=w.exhausted,
        grant=grant,
        reservation_seq=1,
    )
    states = [A.VOID, A.FAILED]  # reopening: they never block a new attempt
    if w.succeeded:
        states.append(A.SUCCEEDED)
    states += list(w.open_states)
    attempts = tuple(attempt(i, s) for i, s in enumerate(states, 1))
    op = Op(
        id=7,
        neuron_id=1,
        op="op-1",
        prog_id=4,
        act=ACT,
        args=b"x" * w.args_len,
        state=op_state(w.cancelled, w.consumed, attempts[-1].state),
        attempts=len(attempts),
        cancelled=w.cancelled,
        consumed=w.consumed,
        result_epoch=3 if w.succeeded else None,
    )
    tomb = None
    if w.op == "pruned":
        tomb = Tombstone(op="op-1", prog_id=4, act=ACT, args_digest=b"", state=OpState.CONSUMED)
    view = OpView(
        neuron=neuron if w.neuron else None,
        name="op-1",
        op=op if w.op == "present" else None,
        prog=prog,
        attempts=attempts if w.op == "present" else (),
        tombstone=tomb,
        next_attempt_id=200,
    )
    params: dict[str, Any] = {
        "op": "op-1",
        "expected_attempt": len(attempts) + (1 if w.expected_attempt_right else 0),
        "placement_generation": 5 if w.generation_current else 4,
    }
    if w.expected_epoch != "omitted":
        params["expected_epoch"] = 3 if w.expected_epoch == "current" else 2
    return ctx, view, params
