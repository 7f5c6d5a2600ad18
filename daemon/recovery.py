"""Crash recovery and executor receipts (contract §3.4, §3.6).

At start, under the owner lock and before serving anything but ``hello``
and ``status``, every attempt of an earlier boot that is prepared or
claimed without an outcome becomes ``unknown`` — durably, once, with
evidence ``{claimed, boot}``. No token is recreated and nothing is
redispatched.

Then receipts: an adapter's ``receipt(key)`` may resolve an unknown guarded
attempt (``source: receipt``). ``executed`` is applied for every adapter;
``not_executed`` only for adapters that ran inside the daemon process
(``in_process``), since recovery never concludes that an outside executor
has stopped; any other answer is kept as a hint in the evidence and the
attempt stays unknown for ``reconcile``. Receipts never resolve a manual
attempt. In-process receipts run before serving; the others in the
background with bounded concurrency, counted by ``receipts_pending``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from typing import Any

import attrs
import structlog
import trio

from wardd.adapters import Adapter, Receipt, has_receipt

from ._reads import Reads
from ._records import append_event, dec, enc, move_attempt, wire_safe
from ._units import record_outcome
from ._writer import Writer

__all__ = ["Recovery"]

log = structlog.get_logger("wardd.recovery")
RECEIPT_CONCURRENCY = 4


@attrs.frozen
class Candidate:
    attempt_id: int
    neuron: str
    op: str
    attempt: int
    act: str
    claim_info: dict[str, Any] | None

    @property
    def key(self) -> str:
        return f"{self.neuron}/{self.op}/{self.attempt}"


def mark_unknown(boot: str, marks: list[dict[str, Any]] | None = None) -> Any:
    """The start-time unit: earlier boots' open attempts become unknown.

    Each marked attempt is also appended to ``marks`` (neuron, op, attempt,
    claimed, boot), for the log once the unit is committed.
    """

    def unit(conn: sqlite3.Connection) -> int:
        rows = conn.execute(
            "SELECT a.id, a.op_id, a.attempt, a.boot, o.neuron_id, n.neuron, o.op,"
            " EXISTS (SELECT 1 FROM claims c WHERE c.attempt_id = a.id) AS claimed"
            " FROM attempts a JOIN operations o ON o.id = a.op_id"
            " JOIN neurons n ON n.id = o.neuron_id"
            " WHERE a.state IN ('prepared', 'running') AND a.boot != ?",
            (boot,),
        ).fetchall()
        for r in rows:
            evidence = {"claimed": bool(r["claimed"]), "boot": r["boot"]}
            if marks is not None:
                marks.append(
                    {"neuron": r["neuron"], "op": r["op"], "attempt": r["attempt"], **evidence}
                )
            move_attempt(
                conn,
                attempt_id=r["id"],
                neuron_id=r["neuron_id"],
                op_id=r["op_id"],
                attempt=r["attempt"],
                state="unknown",
                kind="marked_unknown",
                data=evidence,
                evidence=evidence,
            )
        return len(rows)

    return unit


def apply_receipt(c: Candidate, receipt: Receipt, in_process: bool) -> Any:
    def unit(conn: sqlite3.Connection) -> bool:
        row = conn.execute(
            "SELECT a.state, a.evidence, a.op_id, o.neuron_id FROM attempts a"
            " JOIN operations o ON o.id = a.op_id WHERE a.id = ?",
            (c.attempt_id,),
        ).fetchone()
        if row["state"] != "unknown":
            return False  # resolved meanwhile (a reconcile that came first)
        if receipt.answer == "executed":
            value, why = wire_safe(receipt.value)
            record_outcome(conn, c.attempt_id, "succeeded", value, why, "receipt")
            return True
        if receipt.answer == "not_executed" and in_process:
            record_outcome(conn, c.attempt_id, "not_executed", None, None, "receipt")
            return True
        evidence = dec(row["evidence"]) or {}
        evidence["receipt_hint"] = receipt.answer
        conn.execute("UPDATE attempts SET evidence = ? WHERE id = ?", (enc(evidence), c.attempt_id))
        append_event(
            conn,
            "receipt",
            row["neuron_id"],
            op_id=row["op_id"],
            attempt=c.attempt,
            data={"answer": receipt.answer, "applied": False},
        )
        return False

    return unit


class Recovery:
    def __init__(
        self, writer: Writer, reads: Reads, adapters: Mapping[str, Adapter], boot: str
    ) -> None:
        self._writer = writer
        self._reads = reads
        self._adapters = adapters
        self._boot = boot
        self._pending: dict[int, trio.Event] = {}  # attempt_id -> done
        self.marked = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def _candidates(
        self, neuron: str | None = None, states: tuple[str, ...] = ("unknown",)
    ) -> list[Candidate]:
        acts = [t for t, a in self._adapters.items() if has_receipt(a)]
        if not acts:
            return []
        marks = ",".join("?" * len(acts))
        smarks = ",".join("?" * len(states))
        sql = (
            "SELECT a.id, n.neuron, o.op, a.attempt, o.act, c.claim_info FROM attempts a"
            " JOIN operations o ON o.id = a.op_id JOIN neurons n ON n.id = o.neuron_id"
            " LEFT JOIN claims c ON c.attempt_id = a.id"
            f" WHERE a.state IN ({smarks}) AND a.kind = 'guarded' AND o.act IN ({marks})"
        )
        params: list[Any] = [*states, *acts]
        if neuron is not None:
            sql += " AND n.neuron = ?"
            params.append(neuron)
        return [
            Candidate(r[0], r[1], r[2], r[3], r[4], dec(r[5]))
            for r in self._reads.conn.execute(sql + " ORDER BY a.id", params)
        ]

    def _in_process(self, c: Candidate) -> bool:
        return bool(getattr(self._adapters[c.act], "in_process", False))

    async def at_start(self) -> None:
        # Before the first await: status counts every receipt still to run
        # from the moment the daemon serves (contract §3.6), including those of
        # attempts this recovery is about to mark.
        for c in self._candidates(states=("unknown", "prepared", "running")):
            if not self._in_process(c):
                self._pending[c.attempt_id] = trio.Event()
        marks: list[dict[str, Any]] = []
        self.marked = await self._writer.run(mark_unknown(self._boot, marks))
        for mark in marks:  # one line per attempt: an operator reconciles each (docs/recovery.md)
            log.warning("marked_unknown", **mark)
        cands = self._candidates()
        self._later = [c for c in cands if not self._in_process(c)]
        later_ids = {c.attempt_id for c in self._later}
        for attempt_id in [i for i in self._pending if i not in later_ids]:
            self._pending.pop(attempt_id).set()
        for c in self._later:
            self._pending.setdefault(c.attempt_id, trio.Event())
        for c in cands:
            if self._in_process(c):
                await self._check(c)

    async def background_receipts(self) -> None:
        limiter = trio.CapacityLimiter(RECEIPT_CONCURRENCY)
        async with trio.open_nursery() as nursery:
            for c in self._later:
                nursery.start_soon(self._check_limited, c, limiter)

    async def _check_limited(self, c: Candidate, limiter: trio.CapacityLimiter) -> None:
        async with limiter:
            await self._check(c)

    async def _check(self, c: Candidate) -> bool:
        adapter = self._adapters[c.act]
        done = self._pending.setdefault(c.attempt_id, trio.Event())
        try:
            receipt = await trio.to_thread.run_sync(_receipt, adapter, c, abandon_on_cancel=True)
            resolved: bool = await self._writer.run(
                apply_receipt(c, receipt, bool(getattr(adapter, "in_process", False)))
            )
            log.info(
                "receipt",
                neuron=c.neuron,
                op=c.op,
                attempt=c.attempt,
                answer=receipt.answer,
                resolved=resolved,
            )
            return resolved
        finally:
            self._pending.pop(c.attempt_id, None)
            done.set()

    async def check_receipts(self, neuron: str) -> dict[str, int]:
        cands = self._candidates(neuron)
        resolved = 0
        for c in cands:
            ev = self._pending.get(c.attempt_id)
            if ev is not None:  # a background check is on it: count what it decided
                await ev.wait()
                (state,) = self._reads.conn.execute(
                    "SELECT state FROM attempts WHERE id = ?", (c.attempt_id,)
                ).fetchone()
                resolved += state != "unknown"
                continue
            resolved += await self._check(c)
        return {"checked": len(cands), "resolved": resolved}

    async def wait_for_receipt(self, neuron: str, op: str, attempt: int) -> None:
        """contract §3.4: a reconcile waits for a pending receipt check first."""
        for attempt_id, ev in list(self._pending.items()):
            row = self._reads.conn.execute(
                "SELECT 1 FROM attempts a JOIN operations o ON o.id = a.op_id"
                " JOIN neurons n ON n.id = o.neuron_id"
                " WHERE a.id = ? AND n.neuron = ? AND o.op = ? AND a.attempt = ?",
                (attempt_id, neuron, op, attempt),
            ).fetchone()
            if row is not None:
                await ev.wait()


def _receipt(adapter: Adapter, c: Candidate) -> Receipt:
    try:
        fn = adapter.receipt  # type: ignore[attr-defined]
        if hasattr(adapter, "claim_info"):
            got = fn(c.key, c.claim_info)
        else:
            got = fn(c.key)
    except Exception as exc:  # noqa: BLE001 - a failing receipt is an unknown answer
        log.warning(
            "receipt_failed", neuron=c.neuron, op=c.op, attempt=c.attempt, error=type(exc).__name__
        )
        return Receipt("unknown")
    if isinstance(got, Receipt):
        return got
    if isinstance(got, str) and got in ("executed", "not_executed", "unknown"):
        return Receipt(got)  # type: ignore[arg-type]
    if isinstance(got, tuple) and len(got) == 2 and got[0] == "executed":
        return Receipt("executed", got[1])
    return Receipt("unknown")
