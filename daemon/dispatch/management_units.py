"""The writer units of the signed management methods (contract §3.1,
§3.4, §4): load, decide (:mod:`.core`), apply (:mod:`.store`).

Placement, epoch, grant and prog-state writes run while the handler holds
the neuron's ward guard exclusively (see the handler table).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wardd.protocol import AttemptState, ProgState

from ..core import budget, ops, root
from ..store import load
from ..store.apply import apply
from ..store.writer import Tx, Unit

__all__ = [
    "advance_epoch",
    "bind_placement",
    "cancel",
    "consume",
    "create_prog",
    "rebind",
    "reconcile",
    "recover_reservations",
    "register_neuron",
    "reserve_steps",
    "set_grant",
    "set_prog_state",
    "set_step_limit",
    "settle_steps",
    "submit",
]


def register_neuron(neuron: str) -> Unit:
    def unit(tx: Tx) -> Any:
        existing = load.neuron(tx.conn, neuron)
        return apply(tx, root.register_neuron(existing, neuron, load.next_id(tx.conn, "neurons")))

    return unit


def bind_placement(
    neuron: str, expected: int, descriptor: dict[str, Any] | None, digest: str | None
) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, "", prepared="neuron")
        return apply(tx, root.bind_placement(view, expected, descriptor, digest))

    return unit


def advance_epoch(neuron: str, expected: int) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, "", prepared="neuron")
        return apply(tx, root.advance_epoch(view, expected))

    return unit


def set_grant(neuron: str, prog: str, acts: list[str], enabled: bool, expected: int) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, prog, prepared="prog")
        return apply(tx, root.set_grant(view, acts, enabled, expected))

    return unit


def create_prog(neuron: str, prog: str, step_limit: int) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, prog)
        return apply(tx, root.create_prog(view, step_limit, load.next_id(tx.conn, "progs")))

    return unit


def set_prog_state(
    neuron: str, prog: str, expected: str, state: str, expected_version: int | None
) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(
            tx.conn, neuron, prog, prepared="prog", open_counts=state == ProgState.ARCHIVED
        )
        decision = root.set_prog_state(
            view, ProgState(expected), ProgState(state), expected_version
        )
        return apply(tx, decision)

    return unit


def submit(
    neuron: str, prog: str, op: str, act: str, args: bytes, act_bounds: Mapping[str, int]
) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, prog)
        existing = load.op_named(tx.conn, view.neuron, op)
        decision = ops.submit(
            view, existing, op, act, args, act_bounds, load.next_id(tx.conn, "operations")
        )
        return apply(tx, decision)

    return unit


def reconcile(neuron: str, op: str, attempt: int, status: str, value: Any) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.op_view(tx.conn, neuron, op)
        return apply(tx, ops.reconcile(view, attempt, AttemptState(status), value))

    return unit


def cancel(neuron: str, op: str) -> Unit:
    def unit(tx: Tx) -> Any:
        return apply(tx, ops.cancel(load.op_view(tx.conn, neuron, op)))

    return unit


def consume(neuron: str, op: str) -> Unit:
    def unit(tx: Tx) -> Any:
        return apply(tx, ops.consume(load.op_view(tx.conn, neuron, op)))

    return unit


def rebind(neuron: str, op: str, expected_epoch: int | None) -> Unit:
    def unit(tx: Tx) -> Any:
        return apply(tx, ops.rebind(load.op_view(tx.conn, neuron, op), expected_epoch))

    return unit


def reserve_steps(neuron: str, prog: str, reservation: str, steps: int) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, prog, reservation=reservation)
        return apply(tx, budget.reserve_steps(view, reservation, steps))

    return unit


def settle_steps(neuron: str, prog: str, reservation: str, steps: int) -> Unit:
    """Settle; a settle that exhausts the prog then cancels its open ops
    (a second decision, on the records as the first left them)."""

    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, prog, reservation=reservation)
        decision, exhausts = budget.settle_steps(view, reservation, steps)
        reply = apply(tx, decision)
        if exhausts:
            assert view.prog is not None
            apply(tx, budget.exhaust(view.prog, load.open_ops_of_prog(tx.conn, view.prog.id)))
        return reply

    return unit


def set_step_limit(neuron: str, prog: str, step_limit: int, expected_version: int) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, prog)
        return apply(tx, budget.set_step_limit(view, step_limit, expected_version))

    return unit


def recover_reservations(neuron: str, prog: str, before: int | None) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.prog_view(tx.conn, neuron, prog)
        held = () if view.prog is None else load.open_reservations(tx.conn, view.prog.id)
        return apply(tx, budget.recover_reservations(view, before, held))

    return unit
