"""The writer units: every state transition of contract §3, one function each.

A unit is ``fn(conn) -> value`` run by the writer inside its own SAVEPOINT
(see ``_writer``). Builders here return such closures. A unit raises a
:class:`WarddError` to refuse (nothing is kept) or returns one to refuse
*after* a write that must stay (``token_void`` durably voids its attempt).
Checks run in the order the contract states, and each transition appends its event
record in the same unit, so records and projections never disagree.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, cast

import attrs

from wardd.protocol import (
    ActNotAccepted,
    ActNotGranted,
    AlreadySucceeded,
    ArgsTooLarge,
    AttemptBusy,
    AttemptMismatch,
    AttemptState,
    AttemptUnknown,
    BudgetExhausted,
    ClaimConflict,
    EpochMismatch,
    GenerationMismatch,
    GrantDisabled,
    NotRunning,
    PlacementStale,
    PlacementUnbound,
    ProgInactive,
    Terminal,
    TokenInvalid,
    TokenVoid,
    UnknownNeuron,
    UnknownOperation,
    UnknownProg,
    WarddError,
)

from ._records import NEXT_ATTEMPT_ID, append_event, dec, enc, move_attempt, now, refresh_op_state
from .store.prune import pruned_terminal, tombstone_row

Unit = Callable[[sqlite3.Connection], Any]


@attrs.frozen
class BootContext:
    """What a unit needs to know about this boot."""

    boot: str
    network: str
    advertised: Mapping[str, Mapping[str, Any]]  # digest -> descriptor
    act_bounds: Mapping[str, int]


@attrs.frozen
class AttemptRef:
    """Public metadata of an attempt (contract §3.2.1) plus routing facts."""

    attempt_id: int
    neuron: str
    neuron_id: int
    op: str
    op_id: int
    attempt: int
    act: str
    args: bytes
    epoch: int
    policy_version: int
    placement_generation: int | None
    digest: str | None
    worker: str | None

    def public(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "attempt": self.attempt,
            "epoch": self.epoch,
            "policy_version": self.policy_version,
            "placement_generation": self.placement_generation,
            "digest": self.digest,
        }


# -- lookups ------------------------------------------------------------------


def neuron_row(conn: sqlite3.Connection, neuron: str) -> sqlite3.Row:
    row = conn.execute("SELECT * FROM neurons WHERE neuron = ?", (neuron,)).fetchone()
    if row is None:
        raise UnknownNeuron("neuron is not registered")
    return cast(sqlite3.Row, row)


def prog_row(conn: sqlite3.Connection, neuron_id: int, prog: str) -> sqlite3.Row:
    row = conn.execute(
        "SELECT * FROM progs WHERE neuron_id = ? AND prog = ?", (neuron_id, prog)
    ).fetchone()
    if row is None:
        raise UnknownProg(f"no prog {prog!r} for this neuron")
    return cast(sqlite3.Row, row)


def op_row(conn: sqlite3.Connection, neuron_id: int, op: str) -> sqlite3.Row:
    row = conn.execute(
        "SELECT * FROM operations WHERE neuron_id = ? AND op = ?", (neuron_id, op)
    ).fetchone()
    if row is None:
        pruned = tombstone_row(conn, neuron_id, op)
        if pruned is not None:  # contract §3.9: a pruned op is terminal for ever
            raise pruned_terminal(pruned)
        raise UnknownOperation(f"no operation {op!r} for this neuron")
    return cast(sqlite3.Row, row)


def managed_op(conn: sqlite3.Connection, neuron_id: int, op: str) -> sqlite3.Row:
    """The op of a management write (contract §3.4's second group, and
    ``abort``): ownership (``unknown_operation``), then the prog's grant
    (``grant_disabled``), before any other answer; a pruned op (§3.9)
    passes both and is then ``terminal``."""
    row = conn.execute(
        "SELECT * FROM operations WHERE neuron_id = ? AND op = ?", (neuron_id, op)
    ).fetchone()
    pruned = None if row is not None else tombstone_row(conn, neuron_id, op)
    if row is None and pruned is None:
        raise UnknownOperation(f"no operation {op!r} for this neuron")
    prog_id = row["prog_id"] if row is not None else pruned["prog_id"]  # type: ignore[index]
    prog = conn.execute("SELECT * FROM progs WHERE id = ?", (prog_id,)).fetchone()
    require_enabled_grant(prog)
    if pruned is not None:
        raise pruned_terminal(pruned)
    return cast(sqlite3.Row, row)


def grant_of(prog: sqlite3.Row) -> tuple[frozenset[str], bool] | None:
    if prog["grant_enabled"] is None:
        return None
    return frozenset(dec(prog["grant_acts"])), bool(prog["grant_enabled"])


def require_enabled_grant(prog: sqlite3.Row) -> None:
    """contract §3.4: management writes need a current, enabled grant."""
    grant = grant_of(prog)
    if grant is None or not grant[1]:
        raise GrantDisabled("the prog has no enabled grant")


# -- voids --------------------------------------------------------------------


def void_attempt(conn: sqlite3.Connection, attempt_id: int, reason: str) -> bool:
    """Void a still-prepared attempt; False if it is no longer prepared."""
    row = conn.execute(
        "SELECT a.op_id, a.attempt, a.state, o.neuron_id FROM attempts a"
        " JOIN operations o ON o.id = a.op_id WHERE a.id = ?",
        (attempt_id,),
    ).fetchone()
    if row is None or row["state"] != "prepared":
        return False
    move_attempt(
        conn,
        attempt_id=attempt_id,
        neuron_id=row["neuron_id"],
        op_id=row["op_id"],
        attempt=row["attempt"],
        state="void",
        kind="voided",
        data={"reason": reason},
        reason=reason,
    )
    return True


def void_prepared(
    conn: sqlite3.Connection, where: str, params: tuple[Any, ...], reason: str
) -> int:
    """Void every prepared attempt matching ``where`` (on attempts a / operations o)."""
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT a.id FROM attempts a JOIN operations o ON o.id = a.op_id"
            f" WHERE a.state = 'prepared' AND {where}",
            params,
        )
    ]
    return sum(void_attempt(conn, i, reason) for i in ids)


# -- prepare / claim ------------------------------------------------------------


def _prepare_checks(
    conn: sqlite3.Connection,
    ctx: BootContext,
    neuron: sqlite3.Row,
    p: Mapping[str, Any],
    *,
    manual: bool = False,
) -> tuple[sqlite3.Row, sqlite3.Row, dict[str, Any] | None]:
    """contract §3.2.1, in its order. Returns (op, prog, bound descriptor)."""
    op = op_row(conn, neuron["id"], p["op"])
    if op["state"] in ("consumed", "cancelled"):
        raise Terminal(f"operation is {op['state']}")
    if "expected_epoch" in p and p["expected_epoch"] != neuron["epoch"]:
        raise EpochMismatch("expected_epoch is not the neuron's epoch", {"epoch": neuron["epoch"]})
    prog = conn.execute("SELECT * FROM progs WHERE id = ?", (op["prog_id"],)).fetchone()
    if prog["state"] != "active":
        raise ProgInactive(f"prog is {prog['state']}")
    if prog["exhausted"]:
        raise BudgetExhausted("the prog's step budget is exhausted")
    grant = grant_of(prog)
    if grant is None or not grant[1]:
        raise GrantDisabled("the prog has no enabled grant")
    if op["act"] not in grant[0]:
        raise ActNotGranted(f"act {op['act']!r} is not granted to the prog")
    descriptor = None
    if manual:
        bound = ctx.act_bounds.get(op["act"])
        if bound is None:
            raise ActNotAccepted(f"act {op['act']!r} is not configured")
    else:
        if neuron["placement"] is None:
            raise PlacementUnbound("the neuron has no placement")
        if p["placement_generation"] != neuron["placement_generation"]:
            raise GenerationMismatch(
                "placement_generation is not the current one",
                {"placement_generation": neuron["placement_generation"]},
            )
        descriptor = dec(neuron["placement"])
        if descriptor["executor"]["boot"] != ctx.boot:
            raise PlacementStale("the placement names an earlier boot; bind this boot's descriptor")
        if neuron["placement_digest"] not in ctx.advertised:
            raise PlacementStale("the placement is not a descriptor this daemon advertises")
        if op["act"] not in descriptor["acts"]:
            raise ActNotAccepted(f"act {op['act']!r} is not accepted by the placement")
        bound = descriptor["act_bounds"][op["act"]]
    if len(op["args"]) > bound:
        raise ArgsTooLarge(
            f"args are {len(op['args'])} bytes; the act's bound is {bound}",
            {"max_arg_bytes": bound},
        )
    if p["expected_attempt"] != op["attempts"] + 1:
        raise AttemptMismatch(
            "expected_attempt is not 1 + the number of attempts", {"attempts": op["attempts"]}
        )
    states = {r[0] for r in conn.execute("SELECT state FROM attempts WHERE op_id = ?", (op["id"],))}
    if states & {AttemptState.PREPARED, AttemptState.RUNNING}:
        raise AttemptBusy("an attempt of the operation is prepared or running")
    if "unknown" in states:
        raise AttemptUnknown("an attempt of the operation is unknown; reconcile it first")
    if "succeeded" in states:
        raise AlreadySucceeded("the operation already succeeded")
    return op, prog, descriptor


def _insert_attempt(
    conn: sqlite3.Connection,
    ctx: BootContext,
    neuron: sqlite3.Row,
    op: sqlite3.Row,
    descriptor: dict[str, Any] | None,
    kind: str,
    *,
    refresh: bool = True,
) -> AttemptRef:
    n = op["attempts"] + 1
    state = "prepared" if kind == "guarded" else "unknown"
    worker = descriptor["executor"]["worker"] if descriptor else None
    digest = neuron["placement_digest"] if descriptor else None
    gen = neuron["placement_generation"] if descriptor else None
    evidence = None if kind == "guarded" else enc({"manual": True})
    cur = conn.execute(
        "INSERT INTO attempts(id, op_id, attempt, kind, epoch, policy_version,"
        " placement_generation, descriptor, digest, worker, boot, created_at, state, evidence)"
        f" VALUES ({NEXT_ATTEMPT_ID},?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            op["id"],
            n,
            kind,
            neuron["epoch"],
            neuron["policy_version"],
            gen,
            neuron["placement"] if descriptor else None,
            digest,
            worker,
            ctx.boot,
            now(),
            state,
            evidence,
        ),
    )
    conn.execute("UPDATE operations SET attempts = ? WHERE id = ?", (n, op["id"]))
    data: dict[str, Any] = {
        "kind": kind,
        "epoch": neuron["epoch"],
        "policy_version": neuron["policy_version"],
    }
    if descriptor:
        data.update(placement_generation=gen, digest=digest, worker=worker, boot=ctx.boot)
    append_event(conn, "prepared", neuron["id"], op_id=op["id"], attempt=n, data=data)
    if refresh:
        refresh_op_state(conn, op["id"])
    assert cur.lastrowid is not None
    return AttemptRef(
        attempt_id=cur.lastrowid,
        neuron=neuron["neuron"],
        neuron_id=neuron["id"],
        op=op["op"],
        op_id=op["id"],
        attempt=n,
        act=op["act"],
        args=op["args"],
        epoch=neuron["epoch"],
        policy_version=neuron["policy_version"],
        placement_generation=gen,
        digest=digest,
        worker=worker,
    )


def prepare(ctx: BootContext, neuron: str, params: Mapping[str, Any]) -> Unit:
    def unit(conn: sqlite3.Connection) -> AttemptRef:
        nrow = neuron_row(conn, neuron)
        op, _prog, descriptor = _prepare_checks(conn, ctx, nrow, params)
        return _insert_attempt(conn, ctx, nrow, op, descriptor, "guarded")

    return unit


def manual_take(ctx: BootContext, neuron: str, params: Mapping[str, Any]) -> Unit:
    def unit(conn: sqlite3.Connection) -> AttemptRef:
        nrow = neuron_row(conn, neuron)
        op, _prog, _ = _prepare_checks(conn, ctx, nrow, params, manual=True)
        return _insert_attempt(conn, ctx, nrow, op, None, "manual")

    return unit


def _reverify(conn: sqlite3.Connection, ref: AttemptRef) -> str | None:
    """contract §3.2.2: the claim re-verifies the attempt's context. Returns the
    void reason of the first check that fails, or None."""
    nrow = conn.execute("SELECT * FROM neurons WHERE id = ?", (ref.neuron_id,)).fetchone()
    op = conn.execute("SELECT * FROM operations WHERE id = ?", (ref.op_id,)).fetchone()
    prog = conn.execute("SELECT * FROM progs WHERE id = ?", (op["prog_id"],)).fetchone()
    if op["cancelled"]:
        return "cancelled"
    grant = grant_of(prog)
    if grant is None or not grant[1] or ref.act not in grant[0]:
        return "revoked"
    if nrow["epoch"] != ref.epoch:
        return "epoch_changed"
    if (
        nrow["placement_generation"] != ref.placement_generation
        or nrow["placement_digest"] != ref.digest
    ):
        return "placement_changed"
    if prog["exhausted"]:
        return "budget_exhausted"
    if prog["state"] != "active":
        return "prog_inactive"
    return None


def shutdown_void() -> TokenVoid:
    """The refusal of a dispatch the shutdown keeps from its claim (contract §3.6)."""
    return TokenVoid("the daemon is shutting down", {"reason": "shutdown"})


def claim(
    ref: AttemptRef,
    *,
    worker: str,
    boot: str,
    claim_info: dict[str, Any] | None,
    stopping: Callable[[], bool] = lambda: False,
    on_claim: Callable[[AttemptRef], None] = lambda ref: None,
) -> Unit:
    """The claim (contract §3.2.2): re-verify, then insert the one claim of the
    attempt. A void context durably voids the attempt and answers
    ``token_void``; a lost race answers ``claim_conflict``. Once the daemon
    is stopping (``stopping()``), no claim is made: the writer orders every
    claim before or after the moment the shutdown began (contract §3.6).
    ``on_claim(ref)`` runs inside the unit once the claim is inserted, so
    whatever it registers exists before the claim is visible to a read."""

    def unit(conn: sqlite3.Connection) -> AttemptRef | WarddError:
        if stopping():
            void_attempt(conn, ref.attempt_id, "shutdown")
            return shutdown_void()
        got = _claim(conn, ref, worker, boot, claim_info)
        if isinstance(got, AttemptRef):
            on_claim(got)
        return got

    return unit


def _claim(
    conn: sqlite3.Connection,
    ref: AttemptRef,
    worker: str,
    boot: str,
    claim_info: dict[str, Any] | None,
) -> AttemptRef | WarddError:
    row = conn.execute(
        "SELECT state, reason FROM attempts WHERE id = ?", (ref.attempt_id,)
    ).fetchone()
    if row is None:  # its op ended and was pruned (contract §3.9): never run
        raise TokenInvalid("the token's attempt no longer exists (its op was pruned)")
    if row["state"] == "void":
        return TokenVoid("the attempt was voided before its claim", {"reason": row["reason"]})
    if row["state"] != "prepared":
        raise ClaimConflict("the attempt is already claimed")
    reason = _reverify(conn, ref)
    if reason is not None:
        void_attempt(conn, ref.attempt_id, reason)
        return TokenVoid("the attempt's context changed before its claim", {"reason": reason})
    return _insert_claim(conn, ref, worker, boot, claim_info)


def _insert_claim(
    conn: sqlite3.Connection,
    ref: AttemptRef,
    worker: str,
    boot: str,
    claim_info: dict[str, Any] | None,
) -> AttemptRef:
    """Insert the one claim of a prepared attempt (unique: CAS)."""
    try:
        conn.execute(
            "INSERT INTO claims(attempt_id, placement_generation, digest, worker, boot,"
            " claim_info, at) VALUES (?,?,?,?,?,?,?)",
            (
                ref.attempt_id,
                ref.placement_generation,
                ref.digest,
                worker,
                boot,
                None if claim_info is None else enc(claim_info),
                now(),
            ),
        )
    except sqlite3.IntegrityError:
        raise ClaimConflict("the attempt is already claimed") from None
    data = {
        "worker": worker,
        "boot": boot,
        "placement_generation": ref.placement_generation,
        "digest": ref.digest,
    }
    move_attempt(
        conn,
        attempt_id=ref.attempt_id,
        neuron_id=ref.neuron_id,
        op_id=ref.op_id,
        attempt=ref.attempt,
        state="running",
        kind="claimed",
        data=data,
    )
    return ref


def invoke_claim(
    ctx: BootContext,
    neuron: str,
    params: Mapping[str, Any],
    *,
    worker: str,
    claim_info: Callable[[str], dict[str, Any] | None],
    stopping: Callable[[], bool] = lambda: False,
    on_claim: Callable[[AttemptRef], None] = lambda ref: None,
) -> Unit:
    """contract §3.2.5: invoke runs ``prepare``'s checks again, on the worker's
    thread under the guard, and records the attempt and its claim in one unit.

    Returns the claimed AttemptRef; a ``str`` naming the worker to route to
    when the placement now names another worker than ``worker`` (nothing is
    written); or ``token_void`` (``shutdown``) once ``stopping()``. A refusal
    of the checks raises its code. ``claim_info(act)`` answers the claim
    record of the op's act, computed on the worker thread before the unit
    (see ``workers.Dispatch``); ``on_claim(ref)`` runs inside the unit once
    the claim is inserted, as for `claim`."""

    def unit(conn: sqlite3.Connection) -> AttemptRef | str | WarddError:
        if stopping():
            return shutdown_void()
        nrow = neuron_row(conn, neuron)
        op, _prog, descriptor = _prepare_checks(conn, ctx, nrow, params)
        assert descriptor is not None
        target: str = descriptor["executor"]["worker"]
        if target != worker:
            return target
        ref = _insert_attempt(conn, ctx, nrow, op, descriptor, "guarded", refresh=False)
        # the context was verified a moment ago in this same unit, under the
        # guard: the claim needs no second re-verification
        claimed = _insert_claim(conn, ref, worker, ctx.boot, claim_info(ref.act))
        on_claim(claimed)
        return claimed

    return unit


def abort_target(conn: sqlite3.Connection, neuron: str, op: str, attempt: int) -> tuple[int, str]:
    """contract §3.8 ``abort``'s checks, on a read: ownership
    (``unknown_operation``), then the prog's grant (``grant_disabled``),
    then a running guarded attempt (``not_running`` otherwise). Returns the
    attempt's row id and the op's act; whether its adapter can be stopped
    from outside (``not_abortable``) is the caller's to check."""
    nrow = neuron_row(conn, neuron)
    o = managed_op(conn, nrow["id"], op)
    row = conn.execute(
        "SELECT id, kind, state FROM attempts WHERE op_id = ? AND attempt = ?", (o["id"], attempt)
    ).fetchone()
    if row is None or row["state"] != "running" or row["kind"] != "guarded":
        what = (
            f"op {op!r} has no attempt {attempt}"
            if row is None
            else f"attempt {attempt} of op {op!r} is {row['state']}"
            + (" (a manual attempt)" if row["kind"] == "manual" else "")
        )
        raise NotRunning(f"nothing to abort: {what}")
    return int(row["id"]), str(o["act"])


def invoke_precheck(
    conn: sqlite3.Connection, ctx: BootContext, neuron: str, params: Mapping[str, Any]
) -> tuple[str, str]:
    """contract §3.2.5: ``invoke``'s checks on arrival, on a read
    connection (they write nothing). Raises the first refusal that applies
    now; returns the worker the placement names and the op's act. The claim
    unit runs them again under the guard: this only answers a refusal at once."""
    nrow = neuron_row(conn, neuron)
    op, _prog, descriptor = _prepare_checks(conn, ctx, nrow, params)
    assert descriptor is not None
    return str(descriptor["executor"]["worker"]), str(op["act"])


def outcome(
    ref: AttemptRef,
    status: str,
    value: Any,
    error: str | None,
    source: str,
    *,
    aborted: bool = False,
) -> Unit:
    """Accept an outcome pinned to the original op and attempt (contract §3.2.3):
    accepted whatever changed meanwhile. ``aborted``: an operator's ``abort``
    ended the call (an unknown outcome with evidence ``aborted: true``)."""

    def unit(conn: sqlite3.Connection) -> str:
        return record_outcome(conn, ref.attempt_id, status, value, error, source, aborted=aborted)

    return unit


def record_outcome(
    conn: sqlite3.Connection,
    attempt_id: int,
    status: str,
    value: Any,
    error: str | None,
    source: str,
    *,
    aborted: bool = False,
) -> str:
    """Store one outcome (or, for ``unknown``, mark the attempt unknown)."""
    row = conn.execute(
        "SELECT a.op_id, a.attempt, a.epoch, o.neuron_id, o.cancelled FROM attempts a"
        " JOIN operations o ON o.id = a.op_id WHERE a.id = ?",
        (attempt_id,),
    ).fetchone()
    at = now()
    where = {
        "attempt_id": attempt_id,
        "neuron_id": row["neuron_id"],
        "op_id": row["op_id"],
        "attempt": row["attempt"],
        "at": at,
    }
    if status == "unknown":
        evidence: dict[str, Any] = {"claimed": True, "error": error}
        if aborted:
            evidence["aborted"] = True
        move_attempt(
            conn,
            **where,
            state="unknown",
            kind="outcome",
            data={"status": "unknown", "error": error, **({"aborted": True} if aborted else {})},
            evidence=evidence,
        )
        return status
    conn.execute(
        "INSERT INTO outcomes(attempt_id, status, value, error, source, at) VALUES (?,?,?,?,?,?)",
        (attempt_id, status, enc(value), error, source, at),
    )
    if status == "succeeded" and not row["cancelled"]:
        conn.execute(
            "UPDATE operations SET result_epoch = ? WHERE id = ?", (row["epoch"], row["op_id"])
        )
    data: dict[str, Any] = {"status": status, "source": source}
    if error is not None:
        data["error"] = error
    kind = {"adapter": "outcome", "receipt": "receipt", "reconcile": "reconciled"}[source]
    move_attempt(conn, **where, state=status, kind=kind, data=data)
    return status


def void_many(attempt_ids: list[int], reason: str) -> Unit:
    def unit(conn: sqlite3.Connection) -> int:
        return sum(void_attempt(conn, i, reason) for i in attempt_ids)

    return unit


def void(attempt_id: int, reason: str) -> Unit:
    def unit(conn: sqlite3.Connection) -> bool:
        return void_attempt(conn, attempt_id, reason)

    return unit
