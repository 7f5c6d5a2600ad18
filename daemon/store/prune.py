"""Retention (contract §3.9): finished ops are pruned to tombstones.

An op is *prunable* once it has been ``consumed`` or ``cancelled`` for longer
than ``retention_s`` and none of its attempts is ``prepared``, ``running`` or
``unknown``. ``operations.ended_at`` says since when (schema v5: a trigger
sets it from the event record that ended the op, and clears it while an
attempt is open), so finding them is one range scan of a partial index.

Pruning an op, in one writer unit with every other op of its batch:
insert its tombstone ``{neuron, op, prog, act, args digest, final state,
ended_at, pruned_at}``, then delete its attempts (their claims and
outcomes with them: columns of their rows since schema 6), its event
records and the op row. The schema's triggers allow those deletes only for
an op that has a tombstone, and a tombstone only for an op that has ended,
so no other write can delete a record and no unknown attempt is ever
deleted, whatever this module does.

The :class:`Pruner` looks every ``prune_interval_s``; a look goes on, batch
after batch, until nothing prunable is left. Each batch is a unit of its own
(one transaction, an op pruned whole or not at all), bounded by time, not by
a count, and paced by the writer's load (:data:`PACES`): long batches back
to back while the writer is idle; under a light load, long batches that
yield to a queued unit once they have worked a few ms, each followed by a
pause as long; under a busy writer, batches of 2 ms that stop after any
chunk (8 ops, well under a millisecond) once a unit waits, each followed by
a pause twice as long as it took. A look walks the prunable ops once,
oldest first: each batch goes on from the ``(ended_at, id)`` where the last
one stopped (a :class:`Cursor`), never from the start. The pages a chunk
frees go back to the file system in the same unit (``PRAGMA
incremental_vacuum``, bounded per chunk), so the file shrinks as the
pruning goes; what is left (a look cut short, a backlog of free pages from
before) goes back after the look, in bounded units too, and a checkpoint on
a connection of its own truncates the file.
"""

from __future__ import annotations

import datetime
import enum
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import structlog
import trio

from wardd.protocol import WarddError

from ..core.ops import args_digest
from .counters import note_pruned
from .encoding import now
from .writer import Tx, Unit, connect_reader

__all__ = [
    "PACES",
    "BatchResult",
    "Cursor",
    "Load",
    "Pace",
    "Pruner",
    "give_back_pages",
    "load_of",
    "pause_s",
    "prune_batch",
    "prune_ops",
    "tombstone_row",
    "tombstone_view",
    "vacuum_step",
]

log = structlog.get_logger("wardd.prune")

# A batch stops at whichever comes first: its time budget, the end of the
# prunable ops, or, after a chunk, another unit queued behind it (then a
# dispatch waits for the chunk's deletion and one commit). The budget, how
# soon a batch yields, and the pause after it follow the writer's load
# (:data:`PACES`; docs/performance.md has the figures).
IDLE_BUDGET_S = 0.008
BUSY_BUDGET_S = 0.002
# under a light load a batch yields only once it has worked this long: a
# batch of one or two chunks costs a commit of its own for a handful of ops
LIGHT_YIELD_AFTER_S = 0.004
# ops pruned by one set of statements; a batch checks its budget after each.
# A busy writer's units wait for at most one chunk of 8 (well under 1 ms);
# otherwise chunks of 16 cost about a tenth less per op.
CHUNK_OPS = 8
LARGE_CHUNK_OPS = 16
# the least pause between two batches once others write, and how much
# longer than the batch the pause is under a busy writer (see PACES)
PAUSE_S = 0.002
BUSY_FACTOR = 2
# how often a look checkpoints the WAL on its own thread (see Pruner.look)
CHECKPOINT_EVERY_S = 0.2
# free pages (4 KiB each) a chunk gives back after its deletes, at most
# (about 11 µs each), and a unit of give_back at most
CHUNK_VACUUM_PAGES = 128
VACUUM_PAGES = 256
VACUUM_BUDGET_S = 0.004
_OPEN = ("prepared", "running", "unknown")
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


# -- times ------------------------------------------------------------------------


def to_ms(text: str) -> int:
    """RFC 3339 UTC text (as :func:`now` writes it) → milliseconds since the epoch."""
    d = datetime.datetime.fromisoformat(text.replace("Z", "+00:00")) - _EPOCH
    return d.days * 86_400_000 + d.seconds * 1000 + d.microseconds // 1000


def from_ms(ms: int) -> str:
    """Milliseconds since the epoch → RFC 3339 UTC text, like :func:`now`."""
    t = datetime.datetime.fromtimestamp(ms // 1000, datetime.UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def cutoff(retention_s: int, at: float | None = None) -> str:
    """Ops that ended before this (RFC 3339 text, comparable as text with
    ``ended_at``) have been finished for longer than ``retention_s``."""
    t = (time.time() if at is None else at) - retention_s
    return from_ms(int(t * 1000))


# -- tombstones ---------------------------------------------------------------------


def tombstone_row(conn: sqlite3.Connection, neuron_id: int, op: str) -> sqlite3.Row | None:
    """The tombstone of the neuron's pruned op ``op``, joined with its prog's
    id text (``prog``), or None."""
    cur = conn.execute(
        "SELECT t.*, p.prog FROM tombstones t JOIN progs p ON p.id = t.prog_id"
        " WHERE t.neuron_id = ? AND t.op = ?",
        (neuron_id, op),
    )
    cur.row_factory = sqlite3.Row
    row: sqlite3.Row | None = cur.fetchone()
    return row


def tombstone_view(row: sqlite3.Row) -> dict[str, Any]:
    """``get_operation`` of a pruned op (contract §3.9): no args, no attempts."""
    return {
        "op": row["op"],
        "prog": row["prog"],
        "act": row["act"],
        "state": row["state"],
        "pruned": True,
        "ended_at": from_ms(row["ended_at"]),
        "pruned_at": from_ms(row["pruned_at"]),
    }


# -- the units ----------------------------------------------------------------------


@attrs.frozen
class Cursor:
    """Where a look has got to: the last op a batch looked at, in the
    ``operations_ended`` index's order. The next batch starts after it."""

    ended_at: str
    id: int


@attrs.frozen
class BatchResult:
    pruned: int  # ops turned into tombstones
    examined: int  # candidates looked at (0: nothing prunable is left after the cursor)
    cursor: Cursor | None  # the last candidate looked at (None when none was)
    pages_freed: int = 0  # pages given back to the file system in the same unit
    seconds: float = 0.0  # the unit's own work (not its wait for the writer, nor the commit)


def prune_batch(
    before: str,
    *,
    after: Cursor | None = None,
    budget_s: float = BUSY_BUDGET_S,
    yield_to: Callable[[], bool] = lambda: False,
    yield_after_s: float = 0.0,
    chunk_ops: int = CHUNK_OPS,
    vacuum_pages: int = CHUNK_VACUUM_PAGES,
) -> Unit:
    """Prune the ops that ended before ``before``, oldest first, from
    ``after`` on, ``chunk_ops`` at a time, each chunk followed by giving
    back up to ``vacuum_pages`` free pages; stops once ``budget_s`` of work
    is spent, as soon as ``yield_to()`` says other units wait (once
    ``yield_after_s`` of work is spent), or when no prunable op is left
    (one writer unit)."""

    def unit(tx: Tx) -> BatchResult:
        conn = tx.conn
        t0 = time.perf_counter()
        at = now()
        at_ms = to_ms(at)
        cursor = after
        pruned = examined = freed = 0
        while True:
            chunk = _candidates(conn, before, cursor, chunk_ops)
            if not chunk:
                break
            cursor = Cursor(chunk[-1][1], chunk[-1][0])
            examined += len(chunk)
            pruned += prune_ops(conn, [i for i, _ in chunk], at_ms)
            freed += give_back_pages(conn, vacuum_pages, max(budget_s, VACUUM_BUDGET_S))
            spent = time.perf_counter() - t0
            if len(chunk) < chunk_ops or spent >= budget_s:
                break
            if spent >= yield_after_s and yield_to():
                break
        if pruned:
            conn.execute(
                "UPDATE prune_stats SET pruned_ops = pruned_ops + ?, last_pruned_at = ?"
                " WHERE id = 1",
                (pruned, at),
            )
            note_pruned(tx.notes, pruned, at)  # status.db's figures, once committed
        return BatchResult(pruned, examined, cursor, freed, time.perf_counter() - t0)

    return unit


def _candidates(
    conn: sqlite3.Connection, before: str, after: Cursor | None, limit: int
) -> list[tuple[int, str]]:
    """The next ``limit`` (id, ended_at) that ended before ``before``, after
    the cursor, in the partial index's order: a seek, never a scan from the
    start of the index."""
    if after is None:
        return conn.execute(
            "SELECT id, ended_at FROM operations WHERE ended_at IS NOT NULL AND ended_at < ?"
            " ORDER BY ended_at, id LIMIT ?",
            (before, limit),
        ).fetchall()
    return conn.execute(
        "SELECT id, ended_at FROM operations WHERE ended_at IS NOT NULL AND ended_at < ?"
        " AND (ended_at, id) > (?, ?) ORDER BY ended_at, id LIMIT ?",
        (before, after.ended_at, after.id, limit),
    ).fetchall()


def prune_op(conn: sqlite3.Connection, op_id: int, pruned_at_ms: int) -> bool:
    """Turn one ended op into its tombstone (see :func:`prune_ops`)."""
    return prune_ops(conn, [op_id], pruned_at_ms) == 1


def prune_ops(conn: sqlite3.Connection, op_ids: list[int], pruned_at_ms: int) -> int:
    """Turn the ended ops among ``op_ids`` into tombstones, a few statements
    for all of them; returns how many. An op that has not ended (its
    ``ended_at`` is stale) gets ``ended_at`` cleared instead, so that it is
    not looked at again until it ends (the trigger sets it again then)."""
    if not op_ids:
        return 0
    ids = _id_list(op_ids)  # row ids from our own query
    rows = conn.execute(
        "SELECT o.id, o.neuron_id, o.op, o.prog_id, o.act, o.args, o.state, o.ended_at"
        f" FROM operations o WHERE o.id IN ({ids}) AND o.ended_at IS NOT NULL"
        " AND o.state IN ('consumed', 'cancelled') AND NOT EXISTS (SELECT 1 FROM attempts a"
        f" WHERE a.op_id = o.id AND a.state IN ({_marks(_OPEN)}))",
        _OPEN,
    ).fetchall()
    ended = {r[0] for r in rows}
    stale = [i for i in op_ids if i not in ended]
    if stale:
        conn.execute(f"UPDATE operations SET ended_at = NULL WHERE id IN ({_id_list(stale)})")
    if not rows:
        return 0
    conn.executemany(
        "INSERT INTO tombstones(id, neuron_id, op, prog_id, act, args_digest, state,"
        " ended_at, pruned_at) VALUES (?,?,?,?,?,?,?,?,?)",
        [
            (i, n, op, prog, act, args_digest(bytes(args)), state, to_ms(end), pruned_at_ms)
            for i, n, op, prog, act, args, state, end in rows
        ],
    )
    _delete_records(conn, _id_list(sorted(ended)))
    return len(rows)


def _delete_records(conn: sqlite3.Connection, done: str) -> None:
    """Delete every record of the ops ``done`` (their tombstones are in):
    its attempts by their (op_id, attempt) index, its records along their chain."""
    # before anything is deleted: no attempt id or seq is ever handed out again
    conn.execute(
        "UPDATE prune_stats SET"
        " attempt_hw = max(attempt_hw, coalesce((SELECT max(id) FROM attempts), 0)),"
        " seq_hw = max(seq_hw, coalesce((SELECT max(seq) FROM events), 0)) WHERE id = 1"
    )
    # an attempt's claim and outcome are columns of its row (schema 6)
    conn.execute(f"DELETE FROM attempts WHERE op_id IN ({done})")
    # each op's records along their chain (schema v6: no index on op_id)
    conn.execute(
        "DELETE FROM events WHERE seq IN (WITH RECURSIVE chain(seq) AS ("
        f"SELECT last_seq FROM operations WHERE id IN ({done}) UNION ALL SELECT e.follows"
        " FROM events e JOIN chain c ON e.seq = c.seq WHERE e.follows IS NOT NULL)"
        " SELECT seq FROM chain)"
    )
    conn.execute(f"DELETE FROM operations WHERE id IN ({done})")


def give_back_pages(conn: sqlite3.Connection, pages: int, budget_s: float = VACUUM_BUDGET_S) -> int:
    """Give up to ``pages`` free pages back to the file system, within
    about ``budget_s``; returns how many.

    ``PRAGMA incremental_vacuum(N)`` frees one page per step of its
    statement, and Python's sqlite3 steps a statement that declares no
    result column only once: whatever N says, one ``execute`` frees one
    page. Hence one ``incremental_vacuum(1)`` per page (about 11 µs)."""
    (free,) = conn.execute("PRAGMA freelist_count").fetchone()
    want = min(int(free), pages)
    t0 = time.perf_counter()
    done = 0
    while done < want:
        conn.execute("PRAGMA incremental_vacuum(1)")
        done += 1
        if done % 32 == 0 and time.perf_counter() - t0 >= budget_s:
            break
    return done


def vacuum_step(pages: int = VACUUM_PAGES) -> Unit:
    """Give up to ``pages`` free pages back to the file system (at most
    :data:`VACUUM_BUDGET_S` of work); returns (pages freed, free pages left)."""

    def unit(tx: Tx) -> tuple[int, int]:
        freed = give_back_pages(tx.conn, pages)
        (left,) = tx.conn.execute("PRAGMA freelist_count").fetchone()
        return freed, int(left)

    return unit


def _id_list(ids: list[int]) -> str:
    return ",".join(str(int(i)) for i in ids)


def _marks(values: tuple[str, ...]) -> str:
    return ",".join("?" * len(values))


# -- the pace -----------------------------------------------------------------------


class Load(enum.Enum):
    """The writer's load as the pruner sees it after one of its batches."""

    IDLE = "idle"  # no other unit was written since the pruner's last batch
    LIGHT = "light"  # others wrote, and at most one unit waits now
    BUSY = "busy"  # two or more units are queued behind the pruner


@attrs.frozen
class Pace:
    budget_s: float  # the next batch's time budget
    yield_after_s: float  # its work before it yields to a queued unit
    chunk_ops: int  # ops per chunk (it checks its budget and the queue after each)
    factor: float  # the pause before it: factor × the last batch (see pause_s)
    by_wall: bool  # the last batch's wall time (queue, commit) rather than its own work


# load -> how the next batch runs, and the pause before it
PACES: dict[Load, Pace] = {
    Load.IDLE: Pace(IDLE_BUDGET_S, 0.0, LARGE_CHUNK_OPS, 0.0, by_wall=False),
    Load.LIGHT: Pace(IDLE_BUDGET_S, LIGHT_YIELD_AFTER_S, LARGE_CHUNK_OPS, 1.0, by_wall=False),
    Load.BUSY: Pace(BUSY_BUDGET_S, 0.0, CHUNK_OPS, BUSY_FACTOR, by_wall=True),
}


def load_of(others: int, queued: int) -> Load:
    """``others``: units other than the pruner's written since its last
    batch; ``queued``: units waiting for the writer now."""
    if queued >= 2:
        return Load.BUSY
    if others > 0 or queued > 0:
        return Load.LIGHT
    return Load.IDLE


def pause_s(p: Pace, wall_s: float, work_s: float) -> float:
    """The pause before the next batch: none while the writer is idle;
    else at least :data:`PAUSE_S`, and ``factor`` times the last batch."""
    if p.factor == 0:
        return 0.0
    return max(PAUSE_S, p.factor * (wall_s if p.by_wall else work_s))


# -- the scheduler ------------------------------------------------------------------


class Pruner:
    """Looks every ``interval_s`` for ops finished longer than ``retention_s``
    ago and prunes them on the writer, batch after batch (contract §3.9).

    ``writer`` is the daemon's :class:`~.writer.Writer`; ``stopping`` says
    when the daemon no longer takes writes (no batch is queued after that).
    """

    def __init__(
        self,
        writer: Any,
        db_path: Path,
        *,
        retention_s: int,
        interval_s: int,
        stopping: Callable[[], bool],
    ) -> None:
        self.writer = writer
        self.db_path = db_path
        self.retention_s = retention_s
        self.interval_s = interval_s
        self.stopping = stopping
        self._ckpt: sqlite3.Connection | None = None
        self._last_ckpt = 0.0
        self._truncate_pending = False

    @property
    def enabled(self) -> bool:
        return self.retention_s > 0

    async def run(self) -> None:
        """Look now, then every ``interval_s``, until cancelled."""
        if not self.enabled:
            return
        try:
            while not self.stopping():
                await self.look()
                await trio.sleep(self.interval_s)
        finally:
            if self._ckpt is not None:
                self._ckpt.close()
                self._ckpt = None

    async def look(self) -> int:
        """Prune until nothing prunable is left; returns how many ops.

        After each batch the pruner sees the writer's :class:`Load` and
        paces the next one (:data:`PACES`). Idle: batches of
        :data:`IDLE_BUDGET_S` back to back. Light (a client or two):
        batches as long, which yield to a queued unit once they have worked
        :data:`LIGHT_YIELD_AFTER_S`, each after a pause as long as the last
        one's work. Busy (units queue behind the pruner): batches of
        :data:`BUSY_BUDGET_S` that yield after any chunk, each after a pause
        :data:`BUSY_FACTOR` times as long as the last one took, queue and
        commit included: pruning then takes at most about a third of the
        writer (contract §3.9: dispatch is never held up for more than a
        few ms)."""
        t0 = time.monotonic()
        before = cutoff(self.retention_s)
        total = batches = freed = 0
        cursor: Cursor | None = None
        seen = self.writer.stats.units
        p = PACES[load_of(0, self.writer.backlog)]
        try:
            while not self.stopping():
                t = time.monotonic()
                res: BatchResult = await self.writer.run(
                    prune_batch(
                        before,
                        after=cursor,
                        budget_s=p.budget_s,
                        yield_to=lambda: self.writer.backlog > 1,
                        yield_after_s=p.yield_after_s,
                        chunk_ops=p.chunk_ops,
                    )
                )
                if res.examined == 0:
                    break
                cursor = res.cursor
                total += res.pruned
                freed += res.pages_freed
                batches += 1
                units = self.writer.stats.units
                p = PACES[load_of(units - seen - 1, self.writer.backlog)]
                seen = units
                wall = time.monotonic() - t
                await self._keep_wal_short()
                await trio.sleep(pause_s(p, wall, res.seconds))
            freed += await self.give_back(freed)
            if total:
                log.info(
                    "pruned",
                    ops=total,
                    batches=batches,
                    pages_freed=freed,
                    seconds=round(time.monotonic() - t0, 3),
                )
        except WarddError as err:  # the writer failed or stopped: the next look retries
            log.warning("prune_failed", error=err.message, pruned=total)
        return total

    async def give_back(self, by_batches: int = 0) -> int:
        """The free pages the batches left back to the file system (after
        every look: a look cut short leaves some for the next, and so does a
        backlog of free pages from before), then, if any were freed, here or
        (``by_batches``) by the look's batches, a checkpoint that truncates
        the file."""
        total = 0
        while not self.stopping():
            t = time.monotonic()
            freed, left = await self.writer.run(vacuum_step())
            total += freed
            if left == 0 or freed == 0:
                break
            await self._keep_wal_short()
            await trio.sleep(max(PAUSE_S, time.monotonic() - t))
        if (total or by_batches or self._truncate_pending) and not self.stopping():
            # a TRUNCATE that met a reader (it never waits) is tried again at
            # the next look: the file shrinks only once one completes
            done = await trio.to_thread.run_sync(self._checkpoint)
            self._truncate_pending = not done
        return total

    async def _keep_wal_short(self) -> None:
        """While pruning writes many pages, copy the WAL into the database
        on the pruner's own thread every :data:`CHECKPOINT_EVERY_S`, so that
        the writer's automatic checkpoint (1,000 pages, run inside whichever
        commit crosses it: often a dispatch's) rarely has anything to do."""
        if time.monotonic() - self._last_ckpt < CHECKPOINT_EVERY_S:
            return
        await trio.to_thread.run_sync(self._passive)
        self._last_ckpt = time.monotonic()

    def _passive(self) -> None:
        try:
            self._conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error as exc:
            log.warning("checkpoint_failed", error=str(exc))

    def _conn(self) -> sqlite3.Connection:
        if self._ckpt is None:
            self._ckpt = connect_reader(self.db_path)  # a checkpoint changes no row
            self._ckpt.execute("PRAGMA busy_timeout=0")
        return self._ckpt

    def _checkpoint(self) -> bool:
        """On a thread, on a connection of its own: copy the WAL into the
        database without waiting for anyone (PASSIVE), then, only if no
        transaction is open right now, TRUNCATE the WAL to nothing (with no
        busy wait: it takes the write lock only to copy what the passive
        pass left, a few pages)."""
        try:
            self._conn().execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            row = self._conn().execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except sqlite3.Error as exc:  # the space comes back at the next checkpoint
            log.warning("checkpoint_failed", error=str(exc))
            return False
        return row is not None and row[0] == 0  # busy: a reader or writer was in the way
