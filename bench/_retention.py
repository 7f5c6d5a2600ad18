"""Retention (contract §3.9): what a pruned op keeps for ever, what
pruning costs a dispatch, and whether a long run stays flat.

1. bytes per op: ``n`` submit+invoke+consume cycles of ``echo`` with 64-byte
   args on a real daemon, the way 1,754 bytes per op were measured on the
   schema before retention; the file size per op with every record kept,
   then after every op is pruned (file size, and ``dbstat``'s bytes of the
   tombstones table and its index).
2. dispatch under pruning: a backlog of ``n`` prunable ops (built through
   the daemon's own writer units in a plain loop, many per transaction: a
   build, not a measurement) plus pending ops to invoke; a real daemon with
   ``retention_s = 1`` starts pruning it at once, and one blocking client
   invokes meanwhile. The same database on a daemon that keeps everything
   (``retention_s = 0``) gives the idle figure. Latencies are per ``invoke``.
3. long run: ``cycles`` full cycles from 4 client threads (one neuron each)
   with ``retention_s`` short, sampling ``status.db.size`` and the daemon's
   RSS; flat means the samples after the first retention periods stay
   within a band.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from _common import rss_kib
from _wardd import Actor, Daemon

from wardd.client import Client

ARGS = b"x" * 64


# -- helpers ------------------------------------------------------------------------


def cycle(client: Client, actor: Actor, op: str, args: bytes = ARGS) -> None:
    client.call("submit", actor.submit_params(op, args))
    r = client.call("invoke", actor.invoke_params(op))
    if r["status"] != "succeeded":
        raise RuntimeError(f"invoke did not succeed: {r}")
    actor.call(client, "consume", {"op": op})


def settled_size(db: Path) -> dict[str, int]:
    """After the daemon stopped: the WAL folded in and truncated, then the
    file size, the pages in use, and what dbstat says the tombstones take."""
    conn = sqlite3.connect(db)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        tomb = 0
        try:
            tomb = conn.execute(
                "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name IN"
                " ('tombstones', 'sqlite_autoindex_tombstones_1')"
            ).fetchone()[0]
        except sqlite3.Error:
            pass
    finally:
        conn.close()
    return {"file": os.path.getsize(db), "used": (pages - free) * page, "tombstones": tomb}


def wait_pruned(client: Client, n: int, timeout: float = 600.0) -> float:
    t0 = time.monotonic()
    while client.call("status")["db"]["pruned_ops"] < n:
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"fewer than {n} ops pruned after {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - t0


# -- 1. bytes per op -------------------------------------------------------------------


def bytes_per_op(tmp: Path, n: int) -> dict[str, Any]:
    root = tmp / "ret-bytes"
    d = Daemon(root, workers=2, retention_s=0)
    try:
        d.start()
        c = d.connect()
        actor = Actor(c)
        c.close()
        d.stop()
        empty = settled_size(d.database)
        d.start()
        c = d.connect()
        actor.bind(c)
        for i in range(n):
            cycle(c, actor, f"b{i}")
        c.close()
        d.stop()
        kept = settled_size(d.database)
        d = Daemon(root, workers=2, retention_s=1, prune_interval_s=1)
        d.start()
        c = d.connect()
        wait_pruned(c, n)
        time.sleep(2.5)  # the next looks give the last free pages back
        c.close()
        d.stop()
        pruned = settled_size(d.database)
    finally:
        d.stop()
        d.cleanup()
    return {
        "n": n,
        "kept_per_op": (kept["used"] - empty["used"]) / n,
        "kept_file_per_op": (kept["file"] - empty["file"]) / n,
        "pruned_per_op": (pruned["used"] - empty["used"]) / n,
        "pruned_file_per_op": (pruned["file"] - empty["file"]) / n,
        "tombstone_per_op": pruned["tombstones"] / n,
        "sizes": {"empty": empty, "kept": kept, "pruned": pruned},
    }


# -- 2. dispatch latency under pruning --------------------------------------------------


def build_backlog(tmp: Path, n: int, pending: int) -> tuple[Path, Actor]:
    """A database with ``n`` finished (consumed) ops and ``pending`` submitted
    ones, for one bound neuron; returns (database, actor)."""
    db, actors = build(tmp / "ret-backlog", n, [pending])
    return db, actors[0]


def build(root: Path, n: int, pending: list[int], args: bytes = ARGS) -> tuple[Path, list[Actor]]:
    """A database in ``root`` with ``n`` finished (consumed) ops of the
    first of ``len(pending)`` bound neurons (``args`` each), and ``pending[k]``
    submitted ops ``lat{i}`` of neuron ``k``; returns (database, actors)."""
    from wardd.daemon.core.records import AttemptRef, BootContext
    from wardd.daemon.dispatch import attempt_units
    from wardd.daemon.dispatch import management_units as mgmt
    from wardd.daemon.dispatch.calls import CallEnd
    from wardd.daemon.store.counters import snapshot_afresh
    from wardd.daemon.store.encoding import dec
    from wardd.daemon.store.writer import Tx, connect
    from wardd.protocol import AttemptState

    d = Daemon(root, workers=2, retention_s=0)
    try:
        d.start()
        c = d.connect()
        actors = [Actor(c, worker=f"w{k % 2}") for k in range(len(pending))]
        c.close()
    finally:
        d.stop()
        d.cleanup()
    actor = actors[0]
    conn = connect(d.database)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA synchronous=OFF")
    row = conn.execute(
        "SELECT placement, placement_digest, placement_generation, epoch FROM neurons"
        " WHERE neuron = ?",
        (actor.id,),
    ).fetchone()
    desc = dec(row["placement"])
    ctx = BootContext(
        boot=desc["executor"]["boot"],
        network="bench",
        advertised={row["placement_digest"]: desc},
        act_bounds={"echo": 65536},
    )
    bounds = {"echo": 65536}
    per_tx = 1000
    try:
        for start in range(0, n, per_tx):
            conn.execute("BEGIN IMMEDIATE")
            tx = Tx(conn)  # as the writer's batch would be
            for i in range(start, min(n, start + per_tx)):
                op = f"g{i}"
                mgmt.submit(actor.id, actor.prog, op, "echo", args, bounds)(tx)
                p = {
                    "op": op,
                    "expected_attempt": 1,
                    "placement_generation": row["placement_generation"],
                    "expected_epoch": row["epoch"],
                }
                ref = attempt_units.invoke_claim(ctx, actor.id, p, worker="w0", claim_info=None)(tx)
                if not isinstance(ref, AttemptRef):
                    raise RuntimeError(f"invoke_claim refused: {ref!r}")
                attempt_units.outcome(ref, CallEnd(AttemptState.SUCCEEDED, ref.args))(tx)
                mgmt.consume(actor.id, op)(tx)
            conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        tx = Tx(conn)
        for a, count in zip(actors, pending, strict=True):
            for i in range(count):
                mgmt.submit(a.id, a.prog, f"lat{i}", "echo", ARGS, bounds)(tx)
        snapshot_afresh(conn)  # the counts' snapshot the writer would have left (schema 7)
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return d.database, actors


def invoke_while(
    d: Daemon, actor: Actor, ops: list[str], backlog: int | None, after_n: int = 0
) -> dict[str, Any]:
    """Invoke ``ops`` one by one on a fresh start of ``d``; with ``backlog``,
    while fewer than that many ops are pruned (the prune time is returned),
    then ``after_n`` more on the same daemon once pruning is done."""
    d.start()
    c = d.connect()
    try:
        actor.bind(c)
        lat: list[float] = []
        after: list[float] = []
        t0 = time.monotonic()
        done_at = None
        for i, op in enumerate(ops):
            p = actor.invoke_params(op)
            t = time.perf_counter()
            r = c.call("invoke", p)
            (lat if done_at is None else after).append(time.perf_counter() - t)
            if r["status"] != "succeeded":
                raise RuntimeError(f"invoke did not succeed: {r}")
            if done_at is not None and len(after) >= after_n:
                break
            if backlog is not None and done_at is None and i % 50 == 49:
                if c.call("status")["db"]["pruned_ops"] >= backlog:
                    done_at = time.monotonic() - t0
        pruned = c.call("status")["db"]["pruned_ops"]
        if backlog is not None and done_at is None:
            done_at = (time.monotonic() - t0) + wait_pruned(c, backlog)
        return {
            "lat": lat,
            "after": after,
            "pruned_during": pruned,
            "prune_s": done_at,
            "rss_kib": rss_kib(d.pid),
        }
    finally:
        c.close()
        d.stop()
        d.cleanup()


def dispatch_under_pruning(tmp: Path, n: int, invokes: int, idle_invokes: int) -> dict[str, Any]:
    """``invokes`` bounds the calls made while pruning (they stop when it is
    done); ``idle_invokes`` calls on the same database with no pruning."""
    t0 = time.monotonic()
    db, actor = build_backlog(tmp, n, 2 * idle_invokes + invokes)
    built_s = time.monotonic() - t0
    idle_root = tmp / "ret-idle"
    idle_root.mkdir()
    shutil.copyfile(db, idle_root / "wardd.db")
    idle = invoke_while(
        Daemon(idle_root, workers=2, retention_s=0),
        actor,
        [f"lat{i}" for i in range(idle_invokes)],
        None,
    )
    busy = invoke_while(
        Daemon(db.parent, workers=2, database=db, retention_s=1, prune_interval_s=1),
        actor,
        [f"lat{i}" for i in range(idle_invokes, 2 * idle_invokes + invokes)],
        n,
        after_n=idle_invokes,
    )
    shutil.rmtree(idle_root, ignore_errors=True)
    return {"n": n, "built_s": built_s, "idle": idle, "pruning": busy}


# -- 3. long run --------------------------------------------------------------------------


def long_run(
    tmp: Path, cycles: int, retention_s: int, threads: int = 4, sample_s: float = 2.0
) -> dict[str, Any]:
    root = tmp / "ret-long"
    d = Daemon(root, workers=2, retention_s=retention_s, prune_interval_s=1)
    samples: list[dict[str, float]] = []
    errors: list[BaseException] = []
    try:
        d.start()
        setup = d.connect()
        actors = [Actor(setup, worker=f"w{i % 2}") for i in range(threads)]
        per = cycles // threads
        counts = [0] * threads

        def run(k: int) -> None:
            c = d.connect()
            try:
                for i in range(per):
                    cycle(c, actors[k], f"l{k}-{i}")
                    counts[k] += 1
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
            finally:
                c.close()

        ts = [threading.Thread(target=run, args=(k,), daemon=True) for k in range(threads)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        while any(t.is_alive() for t in ts):
            time.sleep(sample_s)
            st = setup.call("status")
            wal = Path(str(d.database) + "-wal")
            samples.append(
                {
                    "t": round(time.monotonic() - t0, 1),
                    "cycles": sum(counts),
                    "size": st["db"]["size"],
                    "db": d.database.stat().st_size,
                    "wal": wal.stat().st_size if wal.exists() else 0,
                    "rss_kib": rss_kib(d.pid),
                    "pruned": st["db"]["pruned_ops"],
                    "live": sum(n for s, n in st["operations"].items()) - st["db"]["pruned_ops"],
                }
            )
        elapsed = time.monotonic() - t0
        setup.close()
    finally:
        d.stop()
        d.cleanup()
    if errors:
        raise errors[0]
    warm = [s for s in samples if s["t"] >= 3 * retention_s]
    return {
        "cycles": sum(counts),
        "elapsed_s": elapsed,
        "retention_s": retention_s,
        "samples": samples,
        "after_warmup": warm,
    }
