"""The engine floor: the daemon's own writer units in a plain loop.

The same SQL and the same two ``synchronous=FULL`` commits per dispatch as
a guarded ``invoke`` (``attempt_units.invoke_claim``, then the ``echo`` call, then
``attempt_units.outcome``, each in ``BEGIN IMMEDIATE; SAVEPOINT; …; COMMIT`` like
the writer), on the daemon's connection settings, but with no socket, no
event loop, no threads and no signature. It tells how much of a dispatch is
the database work itself. It uses private modules of ``wardd.daemon``; if
their interface changed, the bench reports the figure as unavailable.

It also counts the WAL frames (pages) one dispatch commit writes, so that
the raw loop can be run with commits of the same size.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from _wardd import Actor, Daemon

WAL_FRAME = 4096 + 24


def prepare_db(root: Path, n: int) -> tuple[Path, Actor]:
    """A database with one bound neuron and ``n`` submitted ops (via a real
    daemon, then stopped: the loop owns the file alone)."""
    d = Daemon(root, workers=2)
    try:
        d.start()
        c = d.connect()
        actor = Actor(c)
        for i in range(n):
            c.call("submit", actor.submit_params(f"e{i}"))
        c.close()
    finally:
        d.stop()
        d.cleanup()
    return d.database, actor


def run(
    db: Path, actor: Actor, start: int, n: int, *, count_frames: bool = False
) -> dict[str, Any]:
    from wardd.daemon.core.records import BootContext
    from wardd.daemon.dispatch import attempt_units
    from wardd.daemon.dispatch.calls import CallEnd
    from wardd.daemon.store.encoding import dec
    from wardd.daemon.store.writer import Tx, connect
    from wardd.protocol import AttemptState

    conn = connect(db)
    conn.row_factory = sqlite3.Row
    try:
        row = conn.execute(
            "SELECT placement, placement_digest, placement_generation, epoch"
            " FROM neurons WHERE neuron = ?",
            (actor.id,),
        ).fetchone()
        desc = dec(row["placement"])
        ctx = BootContext(
            boot=desc["executor"]["boot"],
            network="bench",
            advertised={row["placement_digest"]: desc},
            act_bounds={"echo": 65536},
        )
        commit_s = 0.0

        def unit(fn: Any) -> Any:
            nonlocal commit_s
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("SAVEPOINT unit")
            value = fn(Tx(conn))
            conn.execute("RELEASE unit")
            t = time.perf_counter()
            conn.execute("COMMIT")
            commit_s += time.perf_counter() - t
            return value

        if count_frames:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA wal_autocheckpoint=0")
        t0 = time.perf_counter()
        for i in range(start, start + n):
            p = {
                "op": f"e{i}",
                "expected_attempt": 1,
                "placement_generation": row["placement_generation"],
                "expected_epoch": row["epoch"],
            }
            ref = unit(attempt_units.invoke_claim(ctx, actor.id, p, worker="w0", claim_info=None))
            if isinstance(ref, Exception) or isinstance(ref, str):
                raise RuntimeError(f"invoke_claim refused: {ref!r}")
            unit(attempt_units.outcome(ref, CallEnd(AttemptState.SUCCEEDED, ref.args)))
        elapsed = time.perf_counter() - t0
        out: dict[str, Any] = {
            "rate": n / elapsed,
            "commit_share": commit_s / elapsed,
            "commit_ms": commit_s / (2 * n) * 1000,
        }
        if count_frames:
            out["frames_per_commit"] = os.path.getsize(str(db) + "-wal") / WAL_FRAME / (2 * n)
            conn.execute("PRAGMA wal_autocheckpoint=1000")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return out
    finally:
        conn.close()
