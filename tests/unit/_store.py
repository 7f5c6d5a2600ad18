"""The store of the in-process tests and the builders of its records.

``store`` (tests/unit/conftest.py) is a real SQLite file migrated by the
daemon's own schema code (daemon/store/schema.py). Records go in through
the daemon's applier (daemon/store/apply.py), as the writer's units write
them: :meth:`Store.write` with the changes of :func:`neuron_and_prog` and
:func:`dispatched_op`. What the applier never writes (an op that ended at
a given time, for the pruning's order) goes in through the one SQL helper,
:func:`ended_op`. A test of a migration starts from a released database
instead: :func:`released`.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import attrs

from wardd.daemon.core import changes as ch
from wardd.daemon.store.apply import apply
from wardd.daemon.store.schema import migrate
from wardd.daemon.store.writer import Tx, connect, connect_reader
from wardd.protocol import AttemptState, OpState

__all__ = [
    "DATA",
    "RELEASED",
    "Store",
    "dispatched_op",
    "ended_op",
    "migrated",
    "neuron_and_prog",
    "query_plan",
    "released",
]

#: the databases each released schema version left (tests/data/schema-v<N>.db)
DATA = Path(__file__).resolve().parents[1] / "data"
#: the released schema versions, oldest first
RELEASED = sorted(int(p.stem.removeprefix("schema-v")) for p in DATA.glob("schema-v*.db"))
DESCRIPTOR = {"v": 1, "executor": {"worker": "w0", "boot": "b" * 32}}


@attrs.frozen
class Store:
    """A migrated database file and the write connection the test holds on it."""

    path: Path
    conn: sqlite3.Connection

    def write(self, *changes: ch.Change) -> None:
        """``changes`` written by the applier in one transaction, as a unit of the writer."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            apply(Tx(self.conn), ch.Decision(changes))
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def reader(self) -> sqlite3.Connection:
        """A read-only connection to the file, as the daemon's readers open it."""
        return connect_reader(self.path)


def migrated(path: Path) -> sqlite3.Connection:
    """The writer's connection to ``path``, migrated to this schema."""
    conn = connect(path)
    migrate(conn)
    return conn


def query_plan(conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()) -> str:
    """SQLite's plan for ``sql``, its steps joined by `` | ``."""
    return " | ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql, params))


def released(tmp_path: Path, version: int, name: str = "wardd.db") -> Path:
    """A copy, in ``tmp_path``, of the database schema ``version`` left."""
    path = tmp_path / name
    shutil.copy(DATA / f"schema-v{version}.db", path)
    return path


def neuron_and_prog(
    neuron_id: int = 1, neuron: str = "n", prog: str = "p", step_limit: int = 9
) -> tuple[ch.Change, ...]:
    """A new neuron and one prog of it, both numbered ``neuron_id``."""
    return (ch.NewNeuron(neuron_id, neuron), ch.NewProg(neuron_id, neuron_id, prog, step_limit))


def dispatched_op(
    op_id: int, neuron_id: int, kind: str, boot: str, act: str = "echo"
) -> tuple[ch.Change, ...]:
    """An op of prog ``neuron_id`` as a dispatch leaves it, with its records:
    its one attempt ``prepared``, ``running`` (claimed), ``cancelled`` while
    it runs, or ``done`` (succeeded, the op retained)."""
    state = AttemptState.PREPARED if kind == "prepared" else AttemptState.RUNNING
    out: list[ch.Change] = [
        ch.NewOp(op_id, neuron_id, f"op-{op_id}", neuron_id, act, b"x" * 8),
        ch.AppendEvent("submitted", neuron_id, op_id=op_id, data={"prog": "p"}),
        ch.NewAttempt(
            op_id, op_id, 1, "guarded", 1, 1, 1, DESCRIPTOR, "d" * 64, "w0", boot, state, None
        ),
        ch.AppendEvent("prepared", neuron_id, op_id=op_id, attempt=1, data={"boot": boot}),
        ch.SetOp(op_id, {"state": OpState(state.value), "attempts": 1}, was=OpState.PENDING),
    ]
    if state == AttemptState.RUNNING:
        out += [
            ch.NewClaim(op_id, op_id, 1, 1, "d" * 64, "w0", boot, {"adapter": act}),
            ch.AppendEvent("claimed", neuron_id, op_id=op_id, attempt=1, data={"boot": boot}),
        ]
    if kind == "cancelled":
        out += [
            ch.AppendEvent("cancelled", neuron_id, op_id=op_id, data={"reason": "cancelled"}),
            ch.SetOp(op_id, {"state": OpState.CANCELLED, "cancelled": True}, was=OpState.RUNNING),
        ]
    if kind == "done":
        out += [
            ch.SetAttempt(
                op_id, 1, state=AttemptState.SUCCEEDED, act=act, was=AttemptState.RUNNING
            ),
            ch.NewOutcome(op_id, op_id, 1, AttemptState.SUCCEEDED, b"v", None, "adapter"),
            ch.AppendEvent("outcome", neuron_id, op_id=op_id, attempt=1, data={"status": "ok"}),
            ch.SetOp(op_id, {"state": OpState.RETAINED, "result_epoch": 1}, was=OpState.RUNNING),
        ]
    return tuple(out)


def ended_op(
    conn: sqlite3.Connection,
    name: str,
    *,
    ended: str = "2020-01-01T00:00:00.000Z",
    args: bytes = b"a" * 64,
    state: str = "consumed",
    attempt: str | None = "succeeded",
) -> int:
    """An op of prog 1 (:func:`neuron_and_prog`) whose last record is dated
    ``ended``, in ``state``, with one attempt (claimed, its outcome written)
    in the state ``attempt``, or none; the schema's trigger sets its
    ``ended_at`` from that record once the op has ended."""
    cur = conn.execute(
        "INSERT INTO operations(neuron_id, op, prog_id, act, args, state, attempts)"
        " VALUES (1, ?, 1, 'echo', ?, ?, ?)",
        (name, args, state, 0 if attempt is None else 1),
    )
    op_id = int(cur.lastrowid or 0)
    if attempt is not None:
        a = conn.execute(
            "INSERT INTO attempts(op_id, attempt, kind, epoch, policy_version, boot,"
            " created_at, state) VALUES (?, 1, 'invoke', 1, 1, 'b', 't', ?)",
            (op_id, attempt),
        ).lastrowid
        conn.execute(
            "INSERT INTO claims(attempt_id, placement_generation, digest, worker, boot, at)"
            " VALUES (?, 1, 'd', 'w0', 'b', 't')",
            (a,),
        )
        conn.execute(
            "INSERT INTO outcomes(attempt_id, status, value, source, at)"
            " VALUES (?, 'succeeded', ?, 'adapter', 't')",
            (a, args),
        )
    seq = conn.execute(
        "INSERT INTO events(at, kind, neuron_id, op_id, data) VALUES (?, 'consumed', 1, ?, ?)",
        (ended, op_id, args),
    ).lastrowid
    conn.execute("UPDATE operations SET last_seq = ? WHERE id = ?", (seq, op_id))
    return op_id
