"""The writer units of attempts: load, decide (:mod:`.core`), apply (:mod:`.store`).

A unit is ``fn(tx) -> value`` run by the writer inside its own SAVEPOINT
(see :mod:`.store.writer`; ``tx`` is its :class:`~.store.writer.Tx`). Each
unit here loads the records its decision reads, asks the pure core
(:mod:`.core.attempts`) to decide, and applies the decision's changes; the
reply is the decision's. A refusal that writes nothing is raised by the
core; one that keeps its writes (``token_void`` voids the attempt durably)
is returned as the reply.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping
from typing import Any

from ..core import attempts as core
from ..core import call as call_core
from ..core.call import Answered
from ..core.records import AttemptRef, BootContext
from ..store import load
from ..store.apply import apply
from ..store.writer import Tx, Unit
from .calls import CallEnd, ClaimEntry

__all__ = [
    "abort_target",
    "call_claim",
    "call_precheck",
    "claim",
    "invoke_claim",
    "invoke_precheck",
    "manual_take",
    "outcome",
    "prepare",
    "void",
    "void_many",
]


def prepare(ctx: BootContext, neuron: str, params: Mapping[str, Any]) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.op_view(tx.conn, neuron, params["op"], next_attempt=True)
        return apply(tx, core.prepare(ctx, view, params), view.op)

    return unit


def manual_take(ctx: BootContext, neuron: str, params: Mapping[str, Any]) -> Unit:
    def unit(tx: Tx) -> Any:
        view = load.op_view(tx.conn, neuron, params["op"], next_attempt=True)
        return apply(tx, core.manual_take(ctx, view, params), view.op)

    return unit


def claim(
    ref: AttemptRef,
    *,
    worker: str,
    boot: str,
    claim_info: Any,
    stopping: threading.Event | None = None,
    entry: ClaimEntry | None = None,
) -> Unit:
    """The claim of a token's attempt (contract §3.2.2). ``entry`` (None:
    no call table, outside a worker) is entered inside the unit once the
    claim is written, so the call exists before the claim is visible to a
    read."""

    def unit(tx: Tx) -> Any:
        view = load.op_view_by_id(tx.conn, ref.op_id)
        decision = core.claim(
            view, ref, worker=worker, boot=boot, claim_info=claim_info, stopping=_set(stopping)
        )
        return _claimed(tx, decision, view.op, entry)

    return unit


def invoke_claim(
    ctx: BootContext,
    neuron: str,
    params: Mapping[str, Any],
    *,
    worker: str,
    claim_info: Any,
    stopping: threading.Event | None = None,
    entry: ClaimEntry | None = None,
) -> Unit:
    """contract §3.2.5: ``invoke``'s attempt and claim in one unit, under the
    guard. The reply: the claimed :class:`AttemptRef`, a :class:`Reroute`
    (nothing written), or ``token_void`` (``shutdown``). ``claim_info`` was
    computed on the worker thread before the unit."""

    def unit(tx: Tx) -> Any:
        view = load.op_view(tx.conn, neuron, params["op"], next_attempt=True)
        decision = core.invoke_claim(
            ctx, view, params, worker=worker, claim_info=claim_info, stopping=_set(stopping)
        )
        return _claimed(tx, decision, view.op, entry)

    return unit


def _call_views(
    conn: sqlite3.Connection, neuron: str, params: Mapping[str, Any]
) -> tuple[Any, Any]:
    """What a ``call`` decides on: the prog it names and the op (with its
    attempts, or its tombstone)."""
    pview = load.prog_view(conn, neuron, params["prog"])
    return pview, load.op_view(conn, neuron, params["op"], next_attempt=True)


def call_precheck(
    conn: sqlite3.Connection, ctx: BootContext, neuron: str, params: Mapping[str, Any]
) -> Answered | tuple[str, str]:
    """``call``'s checks on arrival, on a read snapshot (they write nothing)."""
    pview, existing = _call_views(conn, neuron, params)
    return call_core.precheck(ctx, pview, existing, params)


def call_claim(
    ctx: BootContext,
    neuron: str,
    params: Mapping[str, Any],
    *,
    worker: str,
    claim_info: Any,
    stopping: threading.Event | None = None,
    entry: ClaimEntry | None = None,
) -> Unit:
    """contract §3.2.6: ``call``'s op (when new), attempt and claim in one
    unit, under the guard. The reply: the claimed :class:`AttemptRef`, an
    :class:`Answered` (nothing written), a :class:`Reroute` (nothing
    written), or ``token_void`` (``shutdown``)."""

    def unit(tx: Tx) -> Any:
        pview, existing = _call_views(tx.conn, neuron, params)
        new = existing.op is None
        decision = call_core.claim(
            ctx,
            pview,
            existing,
            params,
            next_op_id=load.next_id(tx.conn, "operations") if new else 0,
            next_attempt_id=load.next_id(tx.conn, "attempts") if new else existing.next_attempt_id,
            worker=worker,
            claim_info=claim_info,
            stopping=_set(stopping),
        )
        return _claimed(tx, decision, existing.op, entry)

    return unit


def _claimed(tx: Tx, decision: Any, loaded: Any, entry: ClaimEntry | None) -> Any:
    reply = apply(tx, decision, loaded)
    if entry is not None and isinstance(reply, AttemptRef):
        entry.enter(reply)
    return reply


def invoke_precheck(
    conn: sqlite3.Connection, ctx: BootContext, neuron: str, params: Mapping[str, Any]
) -> tuple[str, str]:
    """``invoke``'s checks on arrival, on a read snapshot (they write nothing)."""
    return core.invoke_precheck(ctx, load.op_view(conn, neuron, params["op"]), params)


def abort_target(conn: sqlite3.Connection, neuron: str, op: str, attempt: int) -> tuple[int, str]:
    """``abort``'s checks, on a read snapshot (see :func:`core.abort_target`)."""
    return core.abort_target(load.op_view(conn, neuron, op), attempt)


def outcome(ref: AttemptRef, end: CallEnd) -> Unit:
    """Accept the outcome of an adapter's call, ``end``, pinned to its op and
    attempt (contract §3.2.3): accepted whatever changed meanwhile."""

    def unit(tx: Tx) -> Any:
        view = load.op_attempts(tx.conn, ref.op_id)
        decision = core.outcome(
            view, ref.attempt_id, end.status, end.value, end.error, aborted=end.aborted
        )
        return apply(tx, decision, view.op)

    return unit


def void_many(attempt_ids: list[int], reason: str) -> Unit:
    """Void each attempt still prepared; the reply is how many were."""

    def unit(tx: Tx) -> int:
        count = 0
        for attempt_id in attempt_ids:
            op_id = load.op_id_of_attempt(tx.conn, attempt_id)
            if op_id is not None:  # one decision per op: each sees the last one's writes
                view = load.op_attempts(tx.conn, op_id)
                count += apply(tx, core.void(view, attempt_id, reason), view.op)
        return count

    return unit


def void(attempt_id: int, reason: str) -> Unit:
    many = void_many([attempt_id], reason)

    def unit(tx: Tx) -> bool:
        return bool(many(tx))

    return unit


def _set(flag: threading.Event | None) -> bool:
    """Whether the daemon's stop has begun (no flag: a unit run outside a daemon)."""
    return flag is not None and flag.is_set()
