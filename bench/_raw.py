"""The physical bound: what the disk allows, measured on the daemon's own filesystem.

- ``commit_loop``: a raw ``sqlite3`` loop of ``BEGIN IMMEDIATE; INSERT; COMMIT``
  on a WAL database with ``synchronous=FULL`` (the daemon's settings, see
  ``wardd.daemon.store.writer.connect``). One guarded ``invoke`` costs two such
  commits (the attempt+claim unit, then the outcome unit: ``_units.invoke_claim``
  and ``workers.WorkerPool._accept``), so the raw sequential dispatch bound is
  ``commits/s ÷ 2``, and a full submit+invoke cycle ``commits/s ÷ 3``.
- ``cycle_loop``: the reference loop of the performance targets' table, ``commits`` (4)
  such commits per cycle, timed per cycle: the figure a submit+invoke cycle
  (sequential, or 16 clients together) is divided by.
- ``group_loop``: the same with ``rows`` rows per commit (what group commit
  can reach when the disk, not the CPU, is the limit).
- ``fsync_loop``: raw ``write(4 KiB) + fsync`` on a plain file, in place and
  appending.

Every SQLite loop starts on a WAL already grown to its working size (see
``_connect``), as the daemon's is; only the loop itself is timed.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

ROW = b"x" * 200  # about one event record with its CBOR data


WARM_PAGES = 1100  # more than the 1,000 pages of the default WAL autocheckpoint


def _connect(path: Path) -> sqlite3.Connection:
    """The loop's connection, its WAL already grown to its working size.

    A fresh WAL file grows with every commit, and a commit that appends to a
    file also fsyncs its metadata (compare the in-place and appending fsync
    loops): on these machines a short loop on a new file ran 2-3× slower
    than the same loop on a WAL in use. The daemon's WAL is long-lived and
    reused in place after each checkpoint, so the loops are measured in that
    state: one untimed transaction grows the WAL past the autocheckpoint,
    and a RESTART checkpoint makes the next commits rewrite it from the
    start. The connection stays open, so the WAL is not removed."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    assert mode == "wal", mode
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t(id INTEGER PRIMARY KEY, at REAL, data BLOB)")
    conn.execute("CREATE TABLE IF NOT EXISTS warm(data BLOB)")
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO warm(data) VALUES (?)", (b"\0" * (4096 * WARM_PAGES),))
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(RESTART)")
    return conn


def row_of(pages: int) -> bytes:
    """A row whose one-row commit writes about ``pages`` WAL pages (overflow pages)."""
    return ROW if pages <= 1 else b"x" * (4000 * (pages - 1))


def commit_loop(path: Path, seconds: float, *, pages: int = 1) -> tuple[float, list[float]]:
    """FULL WAL commits of one row each for ``seconds``: (commits/s, latencies).
    ``pages`` > 1 makes the row that many pages long (overflow pages), so
    that each commit writes about as many WAL frames as a dispatch commit."""
    row = row_of(pages)
    conn = _connect(path)
    try:
        lat: list[float] = []
        t0 = time.perf_counter()
        end = t0 + seconds
        now = t0
        while now < end:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t(at, data) VALUES (?, ?)", (now, row))
            conn.execute("COMMIT")
            t = time.perf_counter()
            lat.append(t - now)
            now = t
        return len(lat) / (now - t0), lat
    finally:
        conn.close()


def cycle_loop(path: Path, seconds: float, *, commits: int = 4) -> tuple[float, list[float]]:
    """Cycles of ``commits`` FULL WAL commits (one row each, one after the
    other on one connection) for ``seconds``: (cycles/s, cycle latencies)."""
    conn = _connect(path)
    try:
        lat: list[float] = []
        t0 = time.perf_counter()
        end = t0 + seconds
        now = t0
        while now < end:
            for _ in range(commits):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT INTO t(at, data) VALUES (?, ?)", (now, ROW))
                conn.execute("COMMIT")
            t = time.perf_counter()
            lat.append(t - now)
            now = t
        return len(lat) / (now - t0), lat
    finally:
        conn.close()


def group_loop(path: Path, seconds: float, rows: int) -> float:
    """FULL WAL commits of ``rows`` rows each: rows/s."""
    conn = _connect(path)
    try:
        n = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        now = t0
        batch = [(0.0, ROW)] * rows
        while now < end:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO t(at, data) VALUES (?, ?)", batch)
            conn.execute("COMMIT")
            n += rows
            now = time.perf_counter()
        return n / (now - t0)
    finally:
        conn.close()


def fsync_loop(path: Path, seconds: float, *, append: bool = False) -> float:
    """Write 4 KiB and fsync, for ``seconds``: fsyncs/s. In place (``pwrite``
    at offset 0, like a WAL being reused after a checkpoint) or appending
    (the file grows, so each fsync also commits file-system metadata)."""
    block = b"\0" * 4096
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else 0)
    fd = os.open(path, flags, 0o600)
    try:
        n = 0
        t0 = time.perf_counter()
        end = t0 + seconds
        now = t0
        while now < end:
            if append:
                os.write(fd, block)
            else:
                os.pwrite(fd, block, 0)
            os.fsync(fd)
            n += 1
            now = time.perf_counter()
        return n / (now - t0)
    finally:
        os.close(fd)
        os.unlink(path)


def fresh_db(root: Path, name: str) -> Path:
    p = root / name
    for suffix in ("", "-wal", "-shm"):
        try:
            os.unlink(str(p) + suffix)
        except FileNotFoundError:
            pass
    return p
