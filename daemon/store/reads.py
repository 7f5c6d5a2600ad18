"""The unsigned reads (contract §4), on a reader connection of their own.

Reads never go through the writer and never wait behind an adapter call.
Their connection is read-only (``PRAGMA query_only``, set here whatever
connection is handed in): a statement that would write is refused by SQLite.
No read returns a secret: records hold none, and the token handle is never
stored. Pages end early (with ``next``) rather than exceed ``max_frame``.
The daemon's own reads of attempts (recovery, the token registry) are
:mod:`~wardd.daemon.store.attempt_reads`'.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

from wardd.protocol import UnknownNeuron, UnknownOperation, UnknownProg, encode_item

from .encoding import dec
from .prune import tombstone_row, tombstone_view
from .schema import OP_LIFE, OP_RECORDS, attempts_in

__all__ = ["Reads"]

PAGE_HEADROOM = 4096


# -- the wire forms (contract §4), one renderer each ------------------------------------

# an attempt's columns on the wire, in order, as get_operation and
# list_attempts show it; then ``claimed`` and ``evidence?`` (attempt_wire)
ATTEMPT_WIRE = (
    "attempt",
    "kind",
    "state",
    "epoch",
    "policy_version",
    "placement_generation",
    "digest",
    "worker",
    "boot",
    "created_at",
)
LISTED_ATTEMPT_WIRE = ("neuron", "op", "prog", "act", "attempt", "kind", "state", "boot")


def attempt_wire(r: sqlite3.Row, names: tuple[str, ...]) -> dict[str, Any]:
    """An attempt: ``names`` (``ATTEMPT_WIRE`` or ``LISTED_ATTEMPT_WIRE``),
    ``claimed`` (``r["claimed"]``: the claim's attempt id, or NULL), and its
    evidence if any."""
    item = {name: r[name] for name in names}
    item["claimed"] = r["claimed"] is not None
    if r["evidence"] is not None:
        item["evidence"] = dec(r["evidence"])
    return item


def outcome_wire(r: sqlite3.Row) -> dict[str, Any]:
    """An attempt's outcome, from its ``o_`` columns: ``value`` when there is
    one (always for a success: None is then its value), ``error`` if any."""
    out: dict[str, Any] = {"status": r["o_status"], "source": r["o_source"]}
    value = dec(r["o_value"])
    if value is not None or r["o_status"] == "succeeded":
        out["value"] = value
    if r["o_error"] is not None:
        out["error"] = r["o_error"]
    return out


def grant_wire(r: sqlite3.Row) -> dict[str, Any]:
    """A prog's grant, from its ``grant_`` columns (set: ``grant_enabled`` not NULL)."""
    return {"acts": dec(r["grant_acts"]), "enabled": bool(r["grant_enabled"])}


def op_summary_wire(r: sqlite3.Row) -> dict[str, Any]:
    """An op as list_operations shows it; a pruned one says so (contract §3.9)."""
    item = {
        "op": r["op"],
        "prog": r["prog"],
        "act": r["act"],
        "state": r["state"],
        "attempts": r["attempts"],
    }
    if r["pruned"]:
        item["pruned"] = True
    return item


def record_wire(r: sqlite3.Row, op: str) -> dict[str, Any]:
    """An event record of the op ``op`` (history)."""
    return {
        "seq": r["seq"],
        "at": r["at"],
        "kind": r["kind"],
        "op": op,
        "attempt": r["attempt"],
        "follows": r["follows"],
        "data": dec(r["data"]),
    }


# the metrics' gauges in one statement: every statement lets go of the GIL
# and must take it back, which under load can mean a wait of a whole switch
# interval behind a busy worker or writer thread
_METRICS = (
    "SELECT (SELECT count(*) FROM attempts WHERE state = 'unknown'), p.pruned_ops,"
    " (SELECT created_at FROM attempts WHERE state = 'unknown' ORDER BY id LIMIT 1)"
    " FROM prune_stats p"
)


class Reads:
    def __init__(self, conn: sqlite3.Connection, max_frame: int) -> None:
        conn.execute("PRAGMA query_only = ON")
        conn.row_factory = sqlite3.Row
        self.conn = conn
        self.max_frame = max_frame

    def _q(self, sql: str, params: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        return self.conn.execute(sql, params).fetchall()

    def _neuron(self, neuron: str) -> sqlite3.Row:
        rows = self._q("SELECT * FROM neurons WHERE neuron = ?", (neuron,))
        if not rows:
            raise UnknownNeuron("neuron is not registered")
        return rows[0]

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """The reader connection inside one read transaction: every
        statement sees the same committed state."""
        self.conn.execute("BEGIN")
        try:
            yield self.conn
        finally:
            self.conn.execute("COMMIT")

    def neuron_exists(self, neuron: str) -> bool:
        """Whether ``neuron`` is registered (contract §4: a signed request's last check)."""
        return bool(self._q("SELECT 1 FROM neurons WHERE neuron = ?", (neuron,)))

    def get_neuron(self, neuron: str) -> dict[str, Any]:
        n = self._neuron(neuron)
        grants = {
            r["prog"]: grant_wire(r)
            for r in self._q(
                "SELECT prog, grant_acts, grant_enabled FROM progs"
                " WHERE neuron_id = ? AND grant_enabled IS NOT NULL",
                (n["id"],),
            )
        }
        return {
            "neuron": neuron,
            "epoch": n["epoch"],
            "policy_version": n["policy_version"],
            "placement_generation": n["placement_generation"],
            "placement": dec(n["placement"]),
            "grants": grants,
        }

    def get_prog(self, neuron: str, prog: str) -> dict[str, Any]:
        n = self._neuron(neuron)
        rows = self._q("SELECT * FROM progs WHERE neuron_id = ? AND prog = ?", (n["id"], prog))
        if not rows:
            raise UnknownProg(f"no prog {prog!r} for this neuron")
        p = rows[0]
        return {
            "prog": prog,
            "state": p["state"],
            "state_version": p["state_version"],
            "step_limit": p["step_limit"],
            "steps_used": p["steps_used"],
            "steps_reserved": p["steps_reserved"],
            "reservation_seq": p["reservation_seq"],
            "exhausted": bool(p["exhausted"]),
            "grant": None if p["grant_enabled"] is None else grant_wire(p),
        }

    def _op(self, neuron: str, op: str) -> tuple[sqlite3.Row, sqlite3.Row, bool]:
        """(neuron, op row, pruned): a pruned op's row is its tombstone."""
        n = self._neuron(neuron)
        rows = self._q(
            "SELECT o.*, p.prog FROM operations o JOIN progs p ON p.id = o.prog_id"
            " WHERE o.neuron_id = ? AND o.op = ?",
            (n["id"], op),
        )
        if rows:
            return n, rows[0], False
        pruned = tombstone_row(self.conn, n["id"], op)
        if pruned is None:
            raise UnknownOperation(f"no operation {op!r} for this neuron")
        return n, pruned, True

    def get_operation(self, neuron: str, op: str) -> dict[str, Any]:
        _n, o, pruned = self._op(neuron, op)
        if pruned:  # contract §3.9: no args, no attempts
            return tombstone_view(o)
        attempts = []
        result = None
        for a in self._q(
            "SELECT a.*, c.attempt_id AS claimed, oc.status AS o_status, oc.value AS o_value,"
            " oc.source AS o_source, oc.error AS o_error FROM attempts a"
            " LEFT JOIN claims c ON c.attempt_id = a.id"
            " LEFT JOIN outcomes oc ON oc.attempt_id = a.id"
            " WHERE a.op_id = ? ORDER BY a.attempt",
            (o["id"],),
        ):
            entry = attempt_wire(a, ATTEMPT_WIRE)
            if a["reason"] is not None:
                entry["reason"] = a["reason"]
            if a["o_status"] is not None:
                entry["outcome"] = out = outcome_wire(a)
                if a["o_status"] == "succeeded" and o["result_epoch"] is not None:
                    result = {
                        "status": "succeeded",
                        "value": out["value"],
                        "source": a["o_source"],
                        "attempt": a["attempt"],
                        "epoch": o["result_epoch"],
                    }
            attempts.append(entry)
        info: dict[str, Any] = {
            "op": op,
            "prog": o["prog"],
            "act": o["act"],
            "args": bytes(o["args"]),
            "state": o["state"],
            "attempts": attempts,
        }
        if result is not None and o["state"] == "retained":
            info["result"] = result
        return info

    def _paged(
        self,
        key: str,
        rows: list[sqlite3.Row],
        render: Callable[[sqlite3.Row], dict[str, Any]],
        limit: int,
        cursor: str = "id",
    ) -> dict[str, Any]:
        """One page of a read (contract §4): ``{key: items, next?}``, up to
        ``limit`` rows rendered (``rows`` holds one more when there is more),
        ending early rather than exceed the frame bound. ``next`` is the
        last item's ``cursor`` column, the next page's ``after``."""
        items: list[dict[str, Any]] = []
        size = PAGE_HEADROOM
        nxt = None
        for i, row in enumerate(rows[:limit]):
            item = render(row)
            n = len(encode_item(item))
            if items and size + n > self.max_frame:
                nxt = rows[i - 1][cursor]
                break
            size += n
            items.append(item)
        else:
            if len(rows) > limit:
                nxt = rows[limit - 1][cursor]
        page: dict[str, Any] = {key: items}
        if nxt is not None:
            page["next"] = nxt
        return page

    def list_operations(
        self, neuron: str, state: str | None, prog: str | None, after: int | None, limit: int
    ) -> dict[str, Any]:
        """Live ops and pruned ones (contract §3.9: under their final state, with
        ``pruned: true`` and ``attempts: 0``), in one order: a tombstone keeps
        its op's row id, so paging is not disturbed by a prune between pages."""
        n = self._neuron(neuron)
        where, params = ["o.neuron_id = ?", "o.id > ?"], [n["id"], after or 0]
        # tombstones are read in row id order (`+` keeps SQLite off the
        # (neuron_id, op) index, which would sort every tombstone of the
        # neuron for each page): the merge with the live ops stops at `limit`
        twhere, tparams = ["+t.neuron_id = ?", "t.id > ?"], [n["id"], after or 0]
        if state == "unknown":
            where.append(
                "EXISTS (SELECT 1 FROM attempts a WHERE a.op_id = o.id AND a.state = 'unknown')"
            )
            twhere.append("0")  # a pruned op never held an unknown attempt
        elif state is not None:
            # operations_state orders ops by `life` (schema 7), not by state
            where.append("o.life = ? AND o.state = ?")
            params += [OP_LIFE.get(state, -1), state]
            twhere.append("+t.state = ?")
            tparams.append(state)
        if prog is not None:
            where.append("p.prog = ?")
            params.append(prog)
            twhere.append("p.prog = ?")
            tparams.append(prog)
        rows = self._q(
            "SELECT o.id, o.op, p.prog, o.act, o.state, o.attempts, 0 AS pruned"
            " FROM operations o JOIN progs p ON p.id = o.prog_id WHERE "
            + " AND ".join(where)
            + " UNION ALL SELECT t.id, t.op, p.prog, t.act, t.state, 0, 1"
            " FROM tombstones t JOIN progs p ON p.id = t.prog_id WHERE "
            + " AND ".join(twhere)
            + " ORDER BY 1 LIMIT ?",
            (*params, *tparams, limit + 1),
        )

        return self._paged("operations", rows, op_summary_wire, limit)

    def history(self, neuron: str, op: str, after: int | None, limit: int) -> dict[str, Any]:
        _n, o, pruned = self._op(neuron, op)
        if pruned:  # contract §3.9: its records were pruned with it
            return {"records": [], "pruned": True}
        # the op's records along their chain (schema v6), back to ``after``
        rows = self._q(
            OP_RECORDS + " SELECT e.* FROM chain c JOIN events e ON e.seq = c.seq"
            " WHERE e.seq > ? ORDER BY e.seq LIMIT ?",
            (o["last_seq"], after or 0, after or 0, limit + 1),
        )
        return self._paged("records", rows, lambda r: record_wire(r, op), limit, "seq")

    def list_attempts(self, state: str, after: int | None, limit: int) -> dict[str, Any]:
        rows = self._q(
            "SELECT a.*, o.op, p.prog, o.act, n.neuron, c.attempt_id AS claimed"
            " FROM attempts a JOIN operations o ON o.id = a.op_id"
            " JOIN progs p ON p.id = o.prog_id JOIN neurons n ON n.id = o.neuron_id"
            " LEFT JOIN claims c ON c.attempt_id = a.id"
            f" WHERE {attempts_in((state,))} AND a.id > ? ORDER BY a.id LIMIT ?",
            (after or 0, limit + 1),
        )

        return self._paged("attempts", rows, lambda r: attempt_wire(r, LISTED_ATTEMPT_WIRE), limit)

    # -- metrics ------------------------------------------------------------------------

    def metrics_figures(self) -> tuple[int, str | None, int]:
        """The metrics' database gauges, in one statement: the unknown
        attempts, the oldest one's ``created_at`` (None: none), ops pruned.
        (``status`` reads the writer's counts instead: store/counters.py.)"""
        unknown, pruned, oldest = self.conn.execute(_METRICS).fetchone()
        return unknown, oldest, pruned
