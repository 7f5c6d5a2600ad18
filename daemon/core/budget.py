"""Decisions about a prog's step budget (contract §3.4, §3.8):
reservations, settling, exhaustion, the step limit."""

from __future__ import annotations

from typing import Any

from wardd.protocol import BadRequest, BudgetExhausted, Conflict

from .changes import (
    AppendEvent,
    Change,
    Decision,
    NewReservation,
    ReleaseReservations,
    SetProg,
    SetReservation,
)
from .lookup import require_enabled_grant, require_prog
from .ops import cancel_changes
from .records import Attempt, Op, Prog, ProgView
from .root import fence_state_version

__all__ = [
    "exhaust",
    "recover_reservations",
    "reserve_steps",
    "set_step_limit",
    "settle_steps",
]


def _owned(view: ProgView) -> tuple[int, Prog]:
    n, p = require_prog(view)
    require_enabled_grant(p)
    return n.id, p


def reserve_steps(view: ProgView, reservation: str, steps: int) -> Decision:
    """contract §3.4: idempotent for identical content (``conflict``
    otherwise), ``budget_exhausted`` over the limit. A new reservation gets
    the prog's next reservation number; an existing one, whatever its
    state, answers ``already`` with its state and number: a settled or
    released reservation never reopens."""
    neuron_id, p = _owned(view)
    r = view.reservation
    if r is not None:
        if r.steps != steps:
            raise Conflict(f"reservation {reservation!r} exists with other steps")
        return Decision(
            (),
            {
                "reservation": reservation,
                "steps": steps,
                "number": r.number,
                "already": True,
                "state": r.state,
            },
        )
    if p.exhausted or p.steps_used + p.steps_reserved + steps > p.step_limit:
        raise BudgetExhausted(
            "the reservation exceeds the prog's step budget",
            {
                "steps_used": p.steps_used,
                "steps_reserved": p.steps_reserved,
                "step_limit": p.step_limit,
            },
        )
    number = p.reservation_seq
    changes: tuple[Change, ...] = (
        NewReservation(p.id, reservation, steps, number),
        SetProg(p.id, {"reservation_seq": number + 1}, reserved_delta=steps),
        AppendEvent(
            "steps_reserved",
            neuron_id,
            data={"prog": view.name, "reservation": reservation, "steps": steps, "number": number},
        ),
    )
    return Decision(changes, {"reservation": reservation, "steps": steps, "number": number})


def settle_steps(view: ProgView, reservation: str, steps: int) -> tuple[Decision, bool]:
    """Settle a reservation with the steps used. The second value: the
    settle exhausts the prog (see :func:`exhaust`, decided right after)."""
    neuron_id, p = _owned(view)
    r = view.reservation
    if r is None:
        raise BadRequest(f"no reservation {reservation!r} for this prog")
    if r.state == "settled":
        if r.settled != steps:
            raise Conflict("the reservation was settled with other steps")
        reply = {
            "reservation": reservation,
            "steps": steps,
            "steps_used": p.steps_used,
            "already": True,
        }
        return Decision((), reply), False
    if r.state != "open":
        raise Conflict(f"the reservation is {r.state}")
    if steps > r.steps:
        raise BadRequest("steps exceed the reservation")
    used = p.steps_used + steps
    changes: tuple[Change, ...] = (
        SetReservation(r.id, "settled", steps),
        SetProg(p.id, {"steps_used": used}, reserved_delta=-r.steps),
        AppendEvent(
            "steps_settled",
            neuron_id,
            data={
                "prog": view.name,
                "reservation": reservation,
                "steps": steps,
                "steps_used": used,
            },
        ),
    )
    exhausts = used >= p.step_limit and not p.exhausted
    return Decision(changes, {"reservation": reservation, "steps": steps, "steps_used": used}), (
        exhausts
    )


def exhaust(prog: Prog, open_ops: tuple[tuple[Op, Attempt | None], ...]) -> Decision:
    """contract §3.4: the prog is exhausted; every op it ends becomes
    cancelled (its prepared attempt voided); retained results are consumed
    without being returned; unknown attempts stay."""
    changes: list[Change] = [
        SetProg(prog.id, {"exhausted": True}),
        AppendEvent("budget_exhausted", prog.neuron_id, data={"prog": prog.prog}),
    ]
    for op, latest in open_ops:
        changes += cancel_changes(op, latest, "budget_exhausted")
    return Decision(tuple(changes))


def set_step_limit(view: ProgView, step_limit: int, expected_version: int) -> Decision:
    """contract §3.8: set a prog's step limit, fenced by its state_version.

    Order: ownership, grant (``grant_disabled``), the version
    (``state_mismatch``), then the floor: a limit below ``steps_used +
    steps_reserved`` is ``bad_request``. Raising the limit above
    ``steps_used`` ends an exhaustion (new reservations and prepares pass
    again; what the exhaustion cancelled stays cancelled). Lowering it
    never exhausts the prog by itself: exhaustion happens at a settle; a
    lower limit only refuses the reservations it cannot hold."""
    neuron_id, p = _owned(view)
    fence_state_version(p, expected_version)
    floor = p.steps_used + p.steps_reserved
    if step_limit < floor:
        raise BadRequest(
            f"step_limit {step_limit} is below steps_used + steps_reserved ({floor})",
            {"param": "step_limit", "minimum": floor},
        )
    resumed = p.exhausted and step_limit > p.steps_used
    exhausted = False if resumed else p.exhausted
    version = p.state_version + 1
    changes: tuple[Change, ...] = (
        SetProg(p.id, {"step_limit": step_limit, "exhausted": exhausted}, bump_version=True),
        AppendEvent(
            "step_limit_set",
            neuron_id,
            data={
                "prog": view.name,
                "step_limit": step_limit,
                "previous": p.step_limit,
                "state_version": version,
                "exhaustion_ended": resumed,
            },
        ),
    )
    return Decision(
        changes, {"prog": view.name, "step_limit": step_limit, "state_version": version}
    )


def recover_reservations(
    view: ProgView, before: int | None, open_reservations: tuple[tuple[int, int], ...]
) -> Decision:
    """contract §3.4: release the prog's open reservations (a crashed
    runner's) and answer how many. With ``before`` only those numbered below
    it, so a replay never releases a reservation made after the request was
    signed. ``open_reservations``: (number, steps) of each open one."""
    neuron_id, p = _owned(view)
    chosen = [steps for number, steps in open_reservations if before is None or number < before]
    total, count = sum(chosen), len(chosen)
    data: dict[str, Any] = {"prog": view.name, "released": count, "steps": total}
    if before is not None:
        data["before"] = before
    changes: tuple[Change, ...] = (
        ReleaseReservations(p.id, before),
        SetProg(p.id, {}, reserved_delta=-total),
        AppendEvent("reservations_recovered", neuron_id, data=data),
    )
    return Decision(changes, {"released": count})
