"""Recovery's writer units: the start-time marks, the orphans' record, a receipt's answer.

Each is a unit, a function of its `Tx` (the write connection and the batch's
moves and notes), run by the writer thread; the
core (:mod:`~wardd.daemon.core.attempts`) decides, the store applies
(contract §3.4, §3.6; docs/recovery.md).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from wardd.adapters import Receipt
from wardd.protocol import OpState

from ..core import attempts as core
from ..store import load
from ..store.apply import apply
from ..store.attempt_reads import Candidate
from ..store.encoding import now, wire_safe
from ..store.marks import Mark, open_attempts, write_marks
from ..store.writer import Tx

__all__ = ["apply_receipt", "mark_unknown", "record_orphans"]


def mark_unknown(
    boot: str,
    marks: list[tuple[dict[str, Any], dict[str, Any]]] | None = None,
    orphans: Collection[int] = frozenset(),
    only: Collection[int] | None = None,
) -> Any:
    """The start-time unit: earlier boots' open attempts become unknown.

    Each marked attempt is also appended to ``marks``, where it is (neuron,
    op, attempt, act) and its evidence, for the log and the notify hook
    once the unit is committed. An attempt in
    ``orphans`` had a program that outlived its boot, killed at this start
    (``orphan_kill``): its evidence says ``orphan_killed: true``. ``only``
    (None: all) limits the marks to those attempt ids. Thousands
    after a crash: the core decides each attempt from its row's figures
    and the marks are written set-wise (``store/marks.py``).
    """

    def unit(tx: Tx) -> list[int]:
        decided = []
        for o in open_attempts(tx.conn, boot):
            if only is not None and o.id not in only:
                continue
            op_to = core.unknown_mark(
                o.state,
                o.attempt == o.op_attempts,
                o.op_state,
                o.cancelled,
                o.op_state == OpState.CONSUMED,
            )
            evidence = core.unknown_evidence(o.claimed, o.boot, o.id in orphans)
            decided.append(Mark(o, op_to, evidence))
            if marks is not None:
                where = {"neuron": o.neuron, "op": o.op, "attempt": o.attempt, "act": o.act}
                marks.append((where, evidence))
        write_marks(tx, decided)
        return [m.open.id for m in decided]

    return unit


def record_orphans(
    boot: str, attempt_ids: Collection[int], marks: list[tuple[dict[str, Any], dict[str, Any]]]
) -> Any:
    """The unit committed before an orphan is killed (its groups are
    stopped already): each attempt in ``attempt_ids`` says ``orphan_killed:
    true``. One an earlier boot left open is marked unknown now, as
    :func:`mark_unknown` marks it (and appended to ``marks``); one already
    unknown gets it added to its evidence (``core.orphan_killed``). A start
    SIGKILLed after this commit loses nothing: the fact is durable, and the
    stopped program is found and killed by the next start. Returns the ids
    marked."""
    mark = mark_unknown(boot, marks, attempt_ids, only=attempt_ids)

    def unit(tx: Tx) -> list[int]:
        marked: list[int] = mark(tx)
        for attempt_id in sorted(set(attempt_ids) - set(marked)):
            op_id = load.op_id_of_attempt(tx.conn, attempt_id)
            if op_id is not None:
                apply(tx, core.orphan_killed(load.op_attempts(tx.conn, op_id), attempt_id))
        return marked

    return unit


def apply_receipt(c: Candidate, receipt: Receipt, in_process: bool, binding: bool = True) -> Any:
    """Record a receipt's answer: applied when ``binding`` allows (contract §3.4),
    otherwise kept as a hint in the evidence (answer and detail); for an
    attempt resolved meanwhile, a contradicting answer is kept as
    ``receipt_conflict``. The unit returns a :class:`core.ReceiptEffect`."""
    value, why = wire_safe(receipt.value)
    applies = binding and (receipt.answer == "executed" or in_process)

    def unit(tx: Tx) -> core.ReceiptEffect:
        op_id = load.op_id_of_attempt(tx.conn, c.attempt_id)
        if op_id is None:
            return core.ReceiptEffect()
        view = load.op_attempts(tx.conn, op_id)
        decision = core.receipt(
            view,
            c.attempt_id,
            receipt.answer,
            value,
            why,
            receipt.detail,
            applies=applies,
            at=now(),
        )
        effect: core.ReceiptEffect = apply(tx, decision)
        return effect

    return unit
