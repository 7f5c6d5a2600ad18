"""WAL pages per dispatch commit: how many pages a guarded ``invoke``'s two
commits (the claim unit, then the outcome unit) append to the WAL, and to
which tables and indexes they belong.

- :func:`daemon_frames`: on a real daemon, the WAL is checkpointed and
  truncated (``PRAGMA wal_checkpoint(TRUNCATE)`` from the bench's own
  connection, the daemon idle), then ``n`` pre-submitted ops are invoked one
  after the other by one blocking client, and the WAL's size gives the frames
  appended: (size − 32-byte header) ÷ (4,096 + 24) per frame, ÷ 2n commits.
  ``n`` is kept small enough that the WAL stays under the daemon's automatic
  checkpoint (1,000 frames), which would start it over; a run that reaches it
  is reported as unreliable (None).
- :func:`by_unit`: the daemon's own units in a plain loop (as the engine
  floor, ``_engine``), each commit's frames read from the WAL's frame headers
  (their page numbers) and named by ``dbstat`` after the loop (a page taken
  from the free list during the loop is named by what holds it at the end;
  page 1, the header and the schema's root, and the pointer-map pages of
  incremental vacuum are named so).

A WAL frame is one page written by one commit: a page changed twice in one
transaction is one frame, a page changed by two commits is two.
"""

from __future__ import annotations

import collections
import sqlite3
import struct
from pathlib import Path
from typing import Any

from _wardd import Actor, Daemon

PAGE = 4096
FRAME = PAGE + 24
WAL_HEADER = 32
AUTOCHECKPOINT = 1000


def _wal_frames(db: Path) -> int:
    wal = Path(str(db) + "-wal")
    size = wal.stat().st_size if wal.exists() else 0
    return max(0, size - WAL_HEADER) // FRAME


def _truncate_wal(db: Path) -> None:
    conn = sqlite3.connect(str(db), timeout=30)
    try:
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        if busy:
            raise RuntimeError("the WAL could not be checkpointed (a reader held it)")
    finally:
        conn.close()


def daemon_frames(
    d: Daemon, actor: Actor, client: Any, n: int = 40, tag: str = "wal"
) -> float | None:
    """Frames per dispatch commit over ``n`` sequential invokes on ``d``."""
    ops = [f"{tag}-{i}" for i in range(n)]
    for op in ops:
        client.call("submit", actor.submit_params(op))
    _truncate_wal(d.database)
    for op in ops:
        client.call("invoke", actor.invoke_params(op))
    frames = _wal_frames(d.database)
    if frames >= AUTOCHECKPOINT - 20:
        return None
    return frames / (2 * n)


def _pages_of(wal: Path, start: int) -> list[int]:
    """The page number of each frame appended to ``wal`` past byte ``start``."""
    with open(wal, "rb") as f:
        f.seek(start)
        data = f.read()
    return [struct.unpack_from(">I", data, i)[0] for i in range(0, len(data) - FRAME + 1, FRAME)]


def _names(conn: sqlite3.Connection) -> dict[int, str]:
    names = {int(p): str(name) for name, p in conn.execute("SELECT name, pageno FROM dbstat")}
    names[1] = "page 1 (header)"
    return names


def by_unit(root: Path, n: int = 200, backlog: int = 300) -> dict[str, dict[str, Any]]:
    """Per unit (``claim``: invoke_claim; ``outcome``): frames per commit and
    frames per commit of each table or index, over ``n`` dispatches, with
    ``backlog`` more ops pending (as in the sequential section)."""
    from _engine import prepare_db

    from wardd.daemon.core.records import AttemptRef, BootContext
    from wardd.daemon.dispatch import attempt_units
    from wardd.daemon.dispatch.calls import CallEnd
    from wardd.daemon.store.encoding import dec
    from wardd.daemon.store.writer import Tx, connect
    from wardd.protocol import AttemptState

    db, actor = prepare_db(root, n + backlog)
    conn = connect(db)
    wal = Path(str(db) + "-wal")
    raw: dict[str, list[int]] = {"claim": [], "outcome": []}
    try:
        row = conn.execute(
            "SELECT placement, placement_digest, placement_generation, epoch"
            " FROM neurons WHERE neuron = ?",
            (actor.id,),
        ).fetchone()
        desc = dec(row[0])
        ctx = BootContext(
            boot=desc["executor"]["boot"],
            network="bench",
            advertised={row[1]: desc},
            act_bounds={"echo": 65536},
        )
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint=0")

        def unit(kind: str, fn: Any) -> Any:
            start = max(WAL_HEADER, wal.stat().st_size if wal.exists() else 0)
            conn.execute("BEGIN IMMEDIATE")
            value = fn(Tx(conn))
            conn.execute("COMMIT")
            raw[kind] += _pages_of(wal, start)
            return value

        for i in range(n):
            p = {
                "op": f"e{i}",
                "expected_attempt": 1,
                "placement_generation": row[2],
                "expected_epoch": row[3],
            }
            ref = unit(
                "claim", attempt_units.invoke_claim(ctx, actor.id, p, worker="w0", claim_info=None)
            )
            if not isinstance(ref, AttemptRef):
                raise RuntimeError(f"invoke_claim refused: {ref!r}")
            unit("outcome", attempt_units.outcome(ref, CallEnd(AttemptState.SUCCEEDED, ref.args)))
        names = _names(conn)
        conn.execute("PRAGMA wal_autocheckpoint=1000")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    out: dict[str, dict[str, Any]] = {}
    for kind, pages in raw.items():
        by = collections.Counter(names.get(p, "free list or pointer map") for p in pages)
        out[kind] = {
            "frames_per_commit": len(pages) / n,
            "by_btree": {k: v / n for k, v in by.most_common()},
        }
    return out


def describe(units: dict[str, dict[str, Any]]) -> str:
    """One line per unit: its frames per commit, then each table's or index's share."""
    lines = []
    for kind, u in units.items():
        parts = ", ".join(f"{k} {v:.2f}" for k, v in u["by_btree"].items())
        lines.append(f"{kind:<8} {u['frames_per_commit']:.2f}: {parts}")
    return "\n".join(lines)
