"""Writer units for the signed management methods (contract §3.1, §3.4, §4).

Placement, epoch, grant and prog-state writes run while the handler holds
the neuron's ward guard exclusively; each voids the prepared attempts it
makes stale in the same unit, so a token prepared before it can never be
claimed after it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

from wardd.protocol import (
    ArgsTooLarge,
    BadRequest,
    BadTransition,
    BudgetExhausted,
    Conflict,
    EpochMismatch,
    GenerationMismatch,
    NotReconcilable,
    NotRetained,
    OpConflict,
    OpenOperations,
    PolicyMismatch,
    ProgConflict,
    RebindRequired,
    StateMismatch,
    Terminal,
    UnknownAct,
    UnknownOperation,
    encode_item,
)

from ._records import append_event, dec, enc, now, refresh_op_state
from ._units import (
    Unit,
    managed_op,
    neuron_row,
    prog_row,
    record_outcome,
    require_enabled_grant,
    void_attempt,
    void_prepared,
)
from .store.prune import args_digest, tombstone_row

_TRANSITIONS = {
    ("active", "paused"),
    ("paused", "active"),
    ("active", "retired"),
    ("paused", "retired"),
    ("retired", "archived"),
}


def register_neuron(neuron: str) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        row = conn.execute("SELECT epoch FROM neurons WHERE neuron = ?", (neuron,)).fetchone()
        if row is not None:
            return {"neuron": neuron, "epoch": row[0], "already": True}
        cur = conn.execute(
            "INSERT INTO neurons(neuron, epoch, policy_version, placement_generation, created_at)"
            " VALUES (?, 1, 0, 0, ?)",
            (neuron, now()),
        )
        assert cur.lastrowid is not None
        append_event(conn, "registered", cur.lastrowid)
        return {"neuron": neuron, "epoch": 1}

    return unit


def bind_placement(
    neuron: str, expected: int, descriptor: dict[str, Any] | None, digest: str | None
) -> Unit:
    """bind (descriptor given) or release (None): CAS on the generation,
    then void the neuron's prepared attempts (``placement_changed``)."""

    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n = neuron_row(conn, neuron)
        if expected != n["placement_generation"]:
            raise GenerationMismatch(
                "expected_generation is not the current one",
                {"placement_generation": n["placement_generation"]},
            )
        gen = expected + 1
        conn.execute(
            "UPDATE neurons SET placement_generation = ?, placement = ?, placement_digest = ?"
            " WHERE id = ?",
            (gen, None if descriptor is None else enc(descriptor), digest, n["id"]),
        )
        voided = void_prepared(conn, "o.neuron_id = ?", (n["id"],), "placement_changed")
        data: dict[str, Any] = {"placement_generation": gen, "voided": voided}
        if descriptor is not None:
            data.update(
                digest=digest,
                worker=descriptor["executor"]["worker"],
                boot=descriptor["executor"]["boot"],
            )
        append_event(
            conn, "placement_bound" if descriptor else "placement_released", n["id"], data=data
        )
        return {"placement_generation": gen, "voided": voided}

    return unit


def advance_epoch(neuron: str, expected: int) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n = neuron_row(conn, neuron)
        if expected != n["epoch"]:
            raise EpochMismatch("expected_epoch is not the current epoch", {"epoch": n["epoch"]})
        epoch = expected + 1
        conn.execute("UPDATE neurons SET epoch = ? WHERE id = ?", (epoch, n["id"]))
        voided = void_prepared(conn, "o.neuron_id = ?", (n["id"],), "epoch_changed")
        append_event(conn, "epoch_advanced", n["id"], data={"epoch": epoch, "voided": voided})
        return {"epoch": epoch, "voided": voided}

    return unit


def set_grant(neuron: str, prog: str, acts: list[str], enabled: bool, expected: int) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n = neuron_row(conn, neuron)
        p = prog_row(conn, n["id"], prog)
        if expected != n["policy_version"]:
            raise PolicyMismatch(
                "expected_policy_version is not the current one",
                {"policy_version": n["policy_version"]},
            )
        pv = expected + 1
        conn.execute("UPDATE neurons SET policy_version = ? WHERE id = ?", (pv, n["id"]))
        conn.execute(
            "UPDATE progs SET grant_acts = ?, grant_enabled = ? WHERE id = ?",
            (enc(sorted(set(acts))), int(enabled), p["id"]),
        )
        if enabled and acts:
            marks = ",".join("?" * len(acts))
            voided = void_prepared(
                conn, f"o.prog_id = ? AND o.act NOT IN ({marks})", (p["id"], *acts), "revoked"
            )
        else:
            voided = void_prepared(conn, "o.prog_id = ?", (p["id"],), "revoked")
        append_event(
            conn,
            "grant_set",
            n["id"],
            data={
                "prog": prog,
                "acts": sorted(set(acts)),
                "enabled": enabled,
                "policy_version": pv,
                "voided": voided,
            },
        )
        return {"policy_version": pv, "voided": voided}

    return unit


def create_prog(neuron: str, prog: str, step_limit: int) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n = neuron_row(conn, neuron)
        row = conn.execute(
            "SELECT step_limit FROM progs WHERE neuron_id = ? AND prog = ?", (n["id"], prog)
        ).fetchone()
        if row is not None:
            if row[0] != step_limit:
                raise ProgConflict("a prog with this id and other content exists")
            return {"prog": prog, "already": True}
        conn.execute(
            "INSERT INTO progs(neuron_id, prog, state, step_limit) VALUES (?,?,?,?)",
            (n["id"], prog, "active", step_limit),
        )
        append_event(conn, "prog_created", n["id"], data={"prog": prog, "step_limit": step_limit})
        return {"prog": prog}

    return unit


def change_prog(conn: sqlite3.Connection, prog_id: int, **columns: Any) -> int:
    """A state change of a prog (contract §3.1): sets ``columns`` and
    increments ``state_version`` in the same UPDATE; returns the new version.

    Every write that changes a prog's state (``set_prog_state``, and
    ``set_step_limit``) goes through here, so the version a signed request
    was fenced on never comes back. Other prog writes (budget counters,
    grant, exhaustion) are not state changes and leave it alone."""
    sets = "".join(f"{name} = ?, " for name in columns)
    conn.execute(
        f"UPDATE progs SET {sets}state_version = state_version + 1 WHERE id = ?",
        (*columns.values(), prog_id),
    )
    (version,) = conn.execute("SELECT state_version FROM progs WHERE id = ?", (prog_id,)).fetchone()
    return int(version)


def _prog_state_data(p: sqlite3.Row) -> dict[str, Any]:
    return {"state": p["state"], "state_version": p["state_version"]}


def _fence_state_version(p: sqlite3.Row, expected: int) -> None:
    """A state change's fence (contract §3.1, §3.8): ``state_mismatch`` with
    the prog's state and version when ``expected`` is not its version."""
    if expected != p["state_version"]:
        raise StateMismatch(
            f"the prog's state_version is {p['state_version']}, not {expected}",
            _prog_state_data(p),
        )


def set_prog_state(
    neuron: str, prog: str, expected: str, state: str, expected_version: int | None
) -> Unit:
    """contract §3.4 order: ownership, grant, the state CAS, then (when given)
    ``expected_state_version`` (both ``state_mismatch``), the transition
    (``bad_transition``), then the archive check (``open_operations``)."""

    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n = neuron_row(conn, neuron)
        p = prog_row(conn, n["id"], prog)
        require_enabled_grant(p)
        if p["state"] != expected:
            raise StateMismatch(f"the prog is {p['state']}", _prog_state_data(p))
        if expected_version is not None:
            _fence_state_version(p, expected_version)
        if (expected, state) not in _TRANSITIONS:
            raise BadTransition(f"{expected} -> {state} is not a prog transition")
        if state == "archived":
            (open_ops,) = conn.execute(
                "SELECT count(*) FROM operations WHERE prog_id = ?"
                " AND state NOT IN ('consumed', 'cancelled')",
                (p["id"],),
            ).fetchone()
            (open_atts,) = conn.execute(
                "SELECT count(*) FROM attempts a JOIN operations o ON o.id = a.op_id"
                " WHERE o.prog_id = ? AND a.state IN ('running', 'unknown')",
                (p["id"],),
            ).fetchone()
            if open_ops or open_atts:
                raise OpenOperations(
                    "the prog has open operations or in-doubt attempts",
                    {"operations": open_ops, "attempts": open_atts},
                )
        version = change_prog(conn, p["id"], state=state)
        voided = 0
        if state in ("paused", "retired"):
            voided = void_prepared(conn, "o.prog_id = ?", (p["id"],), "prog_inactive")
        append_event(
            conn,
            "prog_state_set",
            n["id"],
            data={"prog": prog, "state": state, "state_version": version, "voided": voided},
        )
        return {"prog": prog, "state": state, "state_version": version}

    return unit


def submit(
    neuron: str, prog: str, op: str, act: str, args: bytes, act_bounds: Mapping[str, int]
) -> Unit:
    """contract §4 submit: idempotent for identical content, ``op_conflict``
    otherwise; an act that is not registered is ``unknown_act``; args over
    the act's bound are ``args_too_large``."""

    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n = neuron_row(conn, neuron)
        p = prog_row(conn, n["id"], prog)
        require_enabled_grant(p)
        bound = act_bounds.get(act)
        if bound is None:
            raise UnknownAct(f"act {act!r} is not registered")
        if len(args) > bound:
            raise ArgsTooLarge(
                f"args are {len(args)} bytes; the act's bound is {bound}", {"max_arg_bytes": bound}
            )
        row = conn.execute(
            "SELECT * FROM operations WHERE neuron_id = ? AND op = ?", (n["id"], op)
        ).fetchone()
        if row is not None:
            if (row["prog_id"], row["act"], bytes(row["args"])) != (p["id"], act, args):
                raise OpConflict("an operation with this id and other content exists")
            return {"op": op, "state": row["state"], "already": True}
        pruned = tombstone_row(conn, n["id"], op)
        if pruned is not None:  # contract §3.9: idempotent through the tombstone, never run again
            content = (pruned["prog_id"], pruned["act"], bytes(pruned["args_digest"]))
            if content != (p["id"], act, args_digest(args)):
                raise OpConflict("an operation with this id and other content existed")
            return {"op": op, "state": pruned["state"], "already": True, "pruned": True}
        if p["exhausted"]:
            raise BudgetExhausted("the prog's step budget is exhausted")
        # the row id above every pruned op's: a tombstone keeps its op's row
        # id (list_operations pages by it), which SQLite would hand out again
        cur = conn.execute(
            "INSERT INTO operations(id, neuron_id, op, prog_id, act, args, state)"
            " VALUES (1 + max(coalesce((SELECT max(id) FROM operations), 0),"
            " coalesce((SELECT max(id) FROM tombstones), 0)), ?,?,?,?,?, 'pending')",
            (n["id"], op, p["id"], act, args),
        )
        assert cur.lastrowid is not None
        append_event(
            conn,
            "submitted",
            n["id"],
            op_id=cur.lastrowid,
            data={"prog": prog, "act": act, "args_bytes": len(args)},
        )
        return {"op": op, "state": "pending"}

    return unit


# -- resolution (contract §3.4) ------------------------------------------------------


def _owned_op(conn: sqlite3.Connection, neuron: str, op: str) -> tuple[sqlite3.Row, sqlite3.Row]:
    n = neuron_row(conn, neuron)
    return n, managed_op(conn, n["id"], op)


def reconcile(neuron: str, op: str, attempt: int, status: str, value: Any) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        _n, o = _owned_op(conn, neuron, op)
        a = conn.execute(
            "SELECT * FROM attempts WHERE op_id = ? AND attempt = ?", (o["id"], attempt)
        ).fetchone()
        if a is None:
            raise UnknownOperation(f"operation {op!r} has no attempt {attempt}")
        result = {"op": op, "attempt": attempt, "status": status}
        if a["state"] == "unknown":
            record_outcome(conn, a["id"], status, value, None, "reconcile")
            return result
        out = conn.execute("SELECT * FROM outcomes WHERE attempt_id = ?", (a["id"],)).fetchone()
        was_unknown = a["evidence"] is not None or (out is not None and out["source"] != "adapter")
        if out is None or not was_unknown:
            raise NotReconcilable(
                f"attempt {attempt} is {a['state']}; only unknown attempts can be reconciled"
            )
        # compare canonical encodings: True == 1 in Python but not on the wire,
        # and map key order is no difference
        same = encode_item(dec(out["value"]), canonical=True) == encode_item(value, canonical=True)
        if out["status"] == status and same:
            return {**result, "already": True}
        raise Conflict(
            "the attempt was already resolved with another outcome",
            {"status": out["status"], "source": out["source"]},
        )

    return unit


def cancel(neuron: str, op: str) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n, o = _owned_op(conn, neuron, op)
        if o["state"] == "cancelled":
            return {"op": op, "state": "cancelled", "already": True}
        if o["state"] == "consumed":
            raise Terminal("the operation is consumed")
        cancel_op(conn, n["id"], o, "cancelled")
        return {"op": op, "state": "cancelled", "was": o["state"]}

    return unit


def cancel_op(conn: sqlite3.Connection, neuron_id: int, o: sqlite3.Row, reason: str) -> None:
    for (aid,) in conn.execute(
        "SELECT id FROM attempts WHERE op_id = ? AND state = 'prepared'", (o["id"],)
    ).fetchall():
        void_attempt(conn, aid, reason)
    conn.execute(
        "UPDATE operations SET cancelled = 1, result_epoch = NULL WHERE id = ?", (o["id"],)
    )
    append_event(
        conn, "cancelled", neuron_id, op_id=o["id"], data={"reason": reason, "was": o["state"]}
    )
    refresh_op_state(conn, o["id"])


def _retained(conn: sqlite3.Connection, o: sqlite3.Row) -> sqlite3.Row:
    if o["state"] in ("consumed", "cancelled"):
        raise Terminal(f"the operation is {o['state']}")
    if o["state"] != "retained":
        raise NotRetained(f"the operation holds no result (it is {o['state']})")
    row: sqlite3.Row = conn.execute(
        "SELECT a.attempt, a.epoch, oc.status, oc.value, oc.source FROM attempts a"
        " JOIN outcomes oc ON oc.attempt_id = a.id WHERE a.op_id = ? AND oc.status = 'succeeded'",
        (o["id"],),
    ).fetchone()
    return row


def consume(neuron: str, op: str) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n, o = _owned_op(conn, neuron, op)
        r = _retained(conn, o)
        if o["result_epoch"] != n["epoch"]:
            raise RebindRequired(
                "the result belongs to an older epoch; rebind it first",
                {"epoch": o["result_epoch"]},
            )
        conn.execute("UPDATE operations SET state = 'consumed' WHERE id = ?", (o["id"],))
        append_event(conn, "consumed", n["id"], op_id=o["id"], data={"attempt": r["attempt"]})
        return {
            "op": op,
            "attempt": r["attempt"],
            "result": {
                "status": r["status"],
                "value": dec(r["value"]),
                "source": r["source"],
                "attempt": r["attempt"],
                "epoch": o["result_epoch"],
            },
        }

    return unit


def rebind(neuron: str, op: str, expected_epoch: int | None) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n, o = _owned_op(conn, neuron, op)
        r = _retained(conn, o)
        if expected_epoch is not None and expected_epoch != n["epoch"]:
            raise EpochMismatch("expected_epoch is not the current epoch", {"epoch": n["epoch"]})
        if o["result_epoch"] == n["epoch"]:
            return {"op": op, "epoch": n["epoch"], "already": True}
        conn.execute("UPDATE operations SET result_epoch = ? WHERE id = ?", (n["epoch"], o["id"]))
        append_event(
            conn,
            "rebound",
            n["id"],
            op_id=o["id"],
            data={"attempt": r["attempt"], "from_epoch": o["result_epoch"], "epoch": n["epoch"]},
        )
        return {"op": op, "epoch": n["epoch"]}

    return unit


# -- budget (contract §3.4) ----------------------------------------------------------


def _owned_prog(
    conn: sqlite3.Connection, neuron: str, prog: str
) -> tuple[sqlite3.Row, sqlite3.Row]:
    n = neuron_row(conn, neuron)
    p = prog_row(conn, n["id"], prog)
    require_enabled_grant(p)
    return n, p


def reserve_steps(neuron: str, prog: str, reservation: str, steps: int) -> Unit:
    """contract §3.4: idempotent for identical content (``conflict`` otherwise),
    ``budget_exhausted`` over the limit. A new reservation gets the prog's
    next reservation number. An existing one, whatever its state, answers
    ``already`` with its state and number: a settled or released reservation
    never reopens."""

    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n, p = _owned_prog(conn, neuron, prog)
        row = conn.execute(
            "SELECT steps, state, number FROM reservations WHERE prog_id = ? AND reservation = ?",
            (p["id"], reservation),
        ).fetchone()
        if row is not None:  # idempotent for identical content (contract §3.4)
            if row["steps"] != steps:
                raise Conflict(f"reservation {reservation!r} exists with other steps")
            return {
                "reservation": reservation,
                "steps": steps,
                "number": row["number"],
                "already": True,
                "state": row["state"],
            }
        if p["exhausted"] or p["steps_used"] + p["steps_reserved"] + steps > p["step_limit"]:
            raise BudgetExhausted(
                "the reservation exceeds the prog's step budget",
                {
                    "steps_used": p["steps_used"],
                    "steps_reserved": p["steps_reserved"],
                    "step_limit": p["step_limit"],
                },
            )
        number = p["reservation_seq"]
        conn.execute(
            "INSERT INTO reservations(prog_id, reservation, steps, state, number)"
            " VALUES (?,?,?, 'open', ?)",
            (p["id"], reservation, steps, number),
        )
        conn.execute(
            "UPDATE progs SET steps_reserved = steps_reserved + ?, reservation_seq = ?"
            " WHERE id = ?",
            (steps, number + 1, p["id"]),
        )
        append_event(
            conn,
            "steps_reserved",
            n["id"],
            data={"prog": prog, "reservation": reservation, "steps": steps, "number": number},
        )
        return {"reservation": reservation, "steps": steps, "number": number}

    return unit


def settle_steps(neuron: str, prog: str, reservation: str, steps: int) -> Unit:
    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n, p = _owned_prog(conn, neuron, prog)
        row = conn.execute(
            "SELECT * FROM reservations WHERE prog_id = ? AND reservation = ?",
            (p["id"], reservation),
        ).fetchone()
        if row is None:
            raise BadRequest(f"no reservation {reservation!r} for this prog")
        if row["state"] == "settled":
            if row["settled"] != steps:
                raise Conflict("the reservation was settled with other steps")
            return {
                "reservation": reservation,
                "steps": steps,
                "steps_used": p["steps_used"],
                "already": True,
            }
        if row["state"] != "open":
            raise Conflict(f"the reservation is {row['state']}")
        if steps > row["steps"]:
            raise BadRequest("steps exceed the reservation")
        conn.execute(
            "UPDATE reservations SET state = 'settled', settled = ? WHERE id = ?",
            (steps, row["id"]),
        )
        used = p["steps_used"] + steps
        conn.execute(
            "UPDATE progs SET steps_used = ?, steps_reserved = steps_reserved - ? WHERE id = ?",
            (used, row["steps"], p["id"]),
        )
        append_event(
            conn,
            "steps_settled",
            n["id"],
            data={"prog": prog, "reservation": reservation, "steps": steps, "steps_used": used},
        )
        if used >= p["step_limit"] and not p["exhausted"]:
            exhaust(conn, n["id"], p["id"])
        return {"reservation": reservation, "steps": steps, "steps_used": used}

    return unit


def set_step_limit(neuron: str, prog: str, step_limit: int, expected_version: int) -> Unit:
    """contract §3.8: set a prog's step limit, fenced by its state_version.

    Order: ownership, grant (``grant_disabled``), the version
    (``state_mismatch``), then the floor: a limit below ``steps_used +
    steps_reserved`` is ``bad_request``. Raising the limit above
    ``steps_used`` ends an exhaustion (new reservations and prepares pass
    again; what the exhaustion cancelled stays cancelled). Lowering it never
    exhausts the prog by itself: exhaustion happens at a settle, as before;
    a lower limit only refuses the reservations it cannot hold."""

    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n = neuron_row(conn, neuron)
        p = prog_row(conn, n["id"], prog)
        require_enabled_grant(p)
        _fence_state_version(p, expected_version)
        floor = p["steps_used"] + p["steps_reserved"]
        if step_limit < floor:
            raise BadRequest(
                f"step_limit {step_limit} is below steps_used + steps_reserved ({floor})",
                {"param": "step_limit", "minimum": floor},
            )
        resumed = bool(p["exhausted"]) and step_limit > p["steps_used"]
        exhausted = 0 if resumed else p["exhausted"]
        version = change_prog(conn, p["id"], step_limit=step_limit, exhausted=exhausted)
        append_event(
            conn,
            "step_limit_set",
            n["id"],
            data={
                "prog": prog,
                "step_limit": step_limit,
                "previous": p["step_limit"],
                "state_version": version,
                "exhaustion_ended": resumed,
            },
        )
        return {"prog": prog, "step_limit": step_limit, "state_version": version}

    return unit


def exhaust(conn: sqlite3.Connection, neuron_id: int, prog_id: int) -> None:
    """contract §3.4: every op the exhaustion ends becomes cancelled; retained
    results are consumed without being returned; unknown attempts stay."""
    conn.execute("UPDATE progs SET exhausted = 1 WHERE id = ?", (prog_id,))
    (prog,) = conn.execute("SELECT prog FROM progs WHERE id = ?", (prog_id,)).fetchone()
    append_event(conn, "budget_exhausted", neuron_id, data={"prog": prog})
    for o in conn.execute(
        "SELECT * FROM operations WHERE prog_id = ? AND state NOT IN ('consumed', 'cancelled')",
        (prog_id,),
    ).fetchall():
        cancel_op(conn, neuron_id, o, "budget_exhausted")


def recover_reservations(neuron: str, prog: str, before: int | None) -> Unit:
    """contract §3.4: release the prog's open reservations (a crashed runner's)
    and return how many. With ``before`` only those numbered below it, so a
    replay never releases a reservation made after the request was signed.
    A ``before`` above ``reservation_seq`` is accepted: it fences nothing
    more than its absence would."""

    def unit(conn: sqlite3.Connection) -> dict[str, Any]:
        n, p = _owned_prog(conn, neuron, prog)
        where = "prog_id = ? AND state = 'open'"
        args: tuple[Any, ...] = (p["id"],)
        if before is not None:
            where += " AND number < ?"
            args += (before,)
        (total, count) = conn.execute(
            f"SELECT coalesce(sum(steps), 0), count(*) FROM reservations WHERE {where}", args
        ).fetchone()
        conn.execute(f"UPDATE reservations SET state = 'released' WHERE {where}", args)
        conn.execute(
            "UPDATE progs SET steps_reserved = steps_reserved - ? WHERE id = ?", (total, p["id"])
        )
        data: dict[str, Any] = {"prog": prog, "released": count, "steps": total}
        if before is not None:
            data["before"] = before
        append_event(conn, "reservations_recovered", n["id"], data=data)
        return {"released": count}

    return unit
