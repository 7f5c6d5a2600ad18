"""The boot records: one row per start of the daemon (``boots``).

A start records itself before serving (``record_boot``, on the write
connection, before the writer thread takes it) and reads the previous
start's row for ``status.previous_boot``; a stop that was clean marks its
row (``mark_clean_stop``, a writer unit). A start whose predecessor has no
clean mark knows that one crashed or was killed.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from .writer import Tx, Unit

__all__ = ["mark_clean_stop", "record_boot"]


def record_boot(
    conn: sqlite3.Connection, *, boot: str, started_at: str, pid: int, version: str
) -> dict[str, Any] | None:
    """Record this start; the previous one as ``{boot, clean}`` (None: the first start)."""
    last = conn.execute("SELECT boot_id, clean FROM boots ORDER BY id DESC LIMIT 1").fetchone()
    conn.execute(
        "INSERT INTO boots(boot_id, started_at, pid, version) VALUES (?,?,?,?)",
        (boot, started_at, pid, version),
    )
    return None if last is None else {"boot": last[0], "clean": bool(last[1])}


def mark_clean_stop(boot: str, at: str) -> Unit:
    """The writer unit that marks this boot's row stopped cleanly at ``at``."""

    def unit(tx: Tx) -> None:
        tx.conn.execute("UPDATE boots SET stopped_at = ?, clean = 1 WHERE boot_id = ?", (at, boot))

    return unit
