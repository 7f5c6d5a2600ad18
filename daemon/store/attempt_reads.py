"""The daemon's own reads of attempts (contract §3.4, §3.6), as values.

Recovery, the receipt checks, the orphan kill and the token registry ask
about single attempts by row id or by state; what they get are frozen
values (:class:`Candidate`, :class:`Resend`, :class:`ClaimedCall`,
:class:`~wardd.daemon.observe.tracing.AttemptTrace`), never a wire form:
the unsigned reads a client makes are :mod:`~wardd.daemon.store.reads`'.
They run on the same read-only reader connection as those (``PRAGMA
query_only``, set here too, whatever connection is handed in).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import attrs

from wardd.adapters import SentCall, idempotency_key

from ..core.records import Grant
from ..observe.tracing import AttemptTrace, stored_traceparent
from .encoding import dec
from .prune import to_ms
from .schema import attempts_in

__all__ = ["AttemptReads", "Candidate", "ClaimedCall", "Resend"]


@attrs.frozen
class Candidate:
    """A guarded attempt a receipt may answer for (recovery, contract §3.4)."""

    attempt_id: int
    neuron: str
    op: str
    attempt: int
    act: str
    claimed: bool
    claim_info: Any  # the claim row's decoded claim_info (None: none stored)

    @property
    def key(self) -> str:
        return idempotency_key(self.neuron, self.op, self.attempt)


@attrs.frozen
class Resend:
    """A claimed call a receipt would send again (``receipt_resends``): what
    the daemon holds of it, and whether its op could still run now."""

    sent: SentCall
    cancelled: bool  # the op's
    act: str
    prog_state: str
    exhausted: bool
    grant: Grant | None


@attrs.frozen
class ClaimedCall:
    """A claimed guarded attempt of an earlier boot that may have left a
    program running (recovery looks for its orphans)."""

    attempt_id: int
    neuron: str
    op: str
    attempt: int
    boot: str  # the boot that claimed it: its program carries it as WARDD_BOOT
    act: str = ""  # an mcp act's server carries it as WARDD_MCP_ACT

    @property
    def key(self) -> str:
        return idempotency_key(self.neuron, self.op, self.attempt)


_IDS_PER_READ = 500  # bound parameters per statement
_TRACES = (
    "SELECT n.neuron, p.prog, o.op, a.attempt, o.act, a.claim_info FROM attempts a"
    " JOIN operations o ON o.id = a.op_id JOIN neurons n ON n.id = o.neuron_id"
    " JOIN progs p ON p.id = o.prog_id WHERE"
)


def attempt_trace(r: sqlite3.Row) -> AttemptTrace:
    """An attempt for the traces (attempt_traces' row): its dispatch span from its claim."""
    return AttemptTrace(
        neuron=r["neuron"],
        prog=r["prog"],
        op=r["op"],
        attempt=r["attempt"],
        act=r["act"],
        traceparent=stored_traceparent(dec(r["claim_info"])),
    )


def candidate(r: sqlite3.Row) -> Candidate:
    """A receipt candidate (receipt_candidates' row)."""
    return Candidate(
        attempt_id=r["id"],
        neuron=r["neuron"],
        op=r["op"],
        attempt=r["attempt"],
        act=r["act"],
        claimed=r["claimed"] is not None,
        claim_info=dec(r["claim_info"]),
    )


def claimed_call(r: sqlite3.Row) -> ClaimedCall:
    """A claimed call of an earlier boot (claimed_calls_of_earlier_boots' row)."""
    return ClaimedCall(
        attempt_id=int(r["id"]),
        neuron=r["neuron"],
        op=r["op"],
        attempt=r["attempt"],
        boot=r["boot"],
        act=r["act"],
    )


class AttemptReads:
    def __init__(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA query_only = ON")
        conn.row_factory = sqlite3.Row
        self.conn = conn

    def _q(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self.conn.execute(sql, params).fetchall()

    def resend(self, attempt_id: int) -> Resend | None:
        """What a receipt that sends a claimed attempt's request again needs
        (the op's args, the claim's time) and the op's context now; None when
        the attempt was never claimed."""
        rows = self._q(
            "SELECT o.args, a.claimed_at, o.cancelled, o.act, p.state, p.exhausted,"
            " p.grant_acts, p.grant_enabled FROM attempts a"
            " JOIN operations o ON o.id = a.op_id JOIN progs p ON p.id = o.prog_id"
            " WHERE a.id = ? AND a.claimed_at IS NOT NULL",
            (attempt_id,),
        )
        if not rows:
            return None
        r = rows[0]
        enabled = r["grant_enabled"]
        return Resend(
            sent=SentCall(bytes(r["args"]), to_ms(r["claimed_at"]) / 1000),
            cancelled=bool(r["cancelled"]),
            act=r["act"],
            prog_state=r["state"],
            exhausted=bool(r["exhausted"]),
            grant=None
            if enabled is None
            else Grant(frozenset(dec(r["grant_acts"])), bool(enabled)),
        )

    def attempt_state(self, attempt_id: int) -> tuple[str, str | None] | None:
        """(state, void reason) of an attempt by its row id, or None."""
        rows = self._q("SELECT state, reason FROM attempts WHERE id = ?", (attempt_id,))
        return (rows[0]["state"], rows[0]["reason"]) if rows else None

    def receipt_candidates(
        self,
        acts: Sequence[str],
        states: Sequence[str] = ("unknown",),
        neuron: str | None = None,
    ) -> list[Candidate]:
        """The guarded attempts in ``states`` of an op whose act is one of
        ``acts`` (of ``neuron`` only, if given), in attempt row id order."""
        if not acts or not states:
            return []
        amarks = ",".join("?" * len(acts))
        sql = (
            "SELECT a.id, n.neuron, o.op, a.attempt, o.act, c.attempt_id AS claimed,"
            " c.claim_info FROM attempts a"
            " JOIN operations o ON o.id = a.op_id JOIN neurons n ON n.id = o.neuron_id"
            " LEFT JOIN claims c ON c.attempt_id = a.id"
            f" WHERE {attempts_in(states)} AND a.kind = 'guarded' AND o.act IN ({amarks})"
        )
        params: list[Any] = [*acts]
        if neuron is not None:
            sql += " AND n.neuron = ?"
            params.append(neuron)
        return [candidate(r) for r in self._q(sql + " ORDER BY a.id", tuple(params))]

    def claimed_calls_of_earlier_boots(self, boot: str) -> list[ClaimedCall]:
        """Guarded attempts claimed by a boot other than ``boot`` and left
        ``running`` or ``unknown``: their programs may still run."""
        rows = self._q(
            "SELECT a.id, n.neuron, o.op, a.attempt, c.boot, o.act FROM attempts a"
            " JOIN operations o ON o.id = a.op_id JOIN neurons n ON n.id = o.neuron_id"
            " JOIN claims c ON c.attempt_id = a.id"
            " WHERE a.kind = 'guarded' AND a.boot != ?"
            f" AND {attempts_in(('running', 'unknown'))}",
            (boot,),
        )
        return [claimed_call(r) for r in rows]

    def attempt_traces(self, ids: Sequence[int]) -> list[AttemptTrace]:
        """The attempts ``ids`` as their recovery spans tell them (docs/operations.md,
        "Traces"), in row id order: read only when tracing is on."""
        got: list[AttemptTrace] = []
        for i in range(0, len(ids), _IDS_PER_READ):
            chunk = ids[i : i + _IDS_PER_READ]
            got += [
                attempt_trace(r)
                for r in self._q(
                    _TRACES + f" a.id IN ({','.join('?' * len(chunk))}) ORDER BY a.id", tuple(chunk)
                )
            ]
        return got

    def attempt_trace_of(self, neuron: str, op: str, attempt: int) -> AttemptTrace | None:
        """``neuron``'s ``op`` attempt ``attempt`` as its recovery spans tell it, or None."""
        rows = self._q(
            _TRACES + " n.neuron = ? AND o.op = ? AND a.attempt = ?", (neuron, op, attempt)
        )
        return attempt_trace(rows[0]) if rows else None

    def attempt_id(self, neuron: str, op: str, attempt: int) -> int | None:
        """The row id of ``neuron``'s ``op`` attempt number ``attempt``, or None."""
        rows = self._q(
            "SELECT a.id FROM attempts a JOIN operations o ON o.id = a.op_id"
            " JOIN neurons n ON n.id = o.neuron_id"
            " WHERE n.neuron = ? AND o.op = ? AND a.attempt = ?",
            (neuron, op, attempt),
        )
        return int(rows[0][0]) if rows else None
