"""Recovery at start: a database of 1M event records and 10k in-flight attempts.

The database is built directly with ``sqlite3`` in the daemon's schema
(``wardd.daemon.store.schema.migrate`` creates it), as an earlier boot would have
left it: ``neurons`` neurons, each with one prog granted ``echo`` and bound
to the earlier boot's ``w0``; completed ops (submitted → prepared → claimed →
outcome: 4 event records, an attempt with its full descriptor, a claim and
an outcome each); and the in-flight attempts of the earlier boot, half
``prepared`` (2 records) and half claimed and ``running`` (3 records). The
event records add up to ``records``.

:func:`build_ops` makes the larger database ``status`` is measured on
under load (1M ops), in SQL alone: a few seconds rather than a minute.

The time measured is from just before the daemon process is spawned to its
``READY=1``: interpreter start, imports (from bytecode, as an installed
wardd has it: :func:`compile_package`), migration check, and the recovery
unit that marks every in-flight attempt unknown (contract §3.6). A start on an
empty database is measured the same way, to tell the fixed cost apart. The
database a start is timed on is on disk first (:func:`copy_db`).
"""

from __future__ import annotations

import compileall
import importlib
import os
import secrets
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import cbor2

from wardd.daemon.store.counters import snapshot_afresh
from wardd.daemon.store.schema import migrate

OLD_BOOT = "0" * 31 + "1"
AT = "2025-01-01T00:00:00.000Z"


def _descriptor(boot: str) -> dict[str, Any]:
    return {
        "v": 1,
        "machine": {"arch": "x86_64", "abi": "linux-gnu"},
        "environment": {"kind": "native-host", "abi": "wardd-hostact/1"},
        "proof": "none",
        "network": "bench",
        "executor": {
            "warrior": "wardd",
            "version": "0.1.0",
            "backend": "host-thread",
            "worker": "w0",
            "device": "0123456789abcdef",
            "boot": boot,
        },
        "acts": ["echo"],
        "max_arg_bytes": 65536,
        "act_bounds": {"echo": 65536},
        "limits": {"cpu": None, "time": None, "memory": None},
    }


def build(
    path: Path, *, records: int = 1_000_000, in_flight: int = 10_000, neurons: int = 100
) -> dict[str, int]:
    """Build the database at ``path``; returns the row counts."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    migrate(conn)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-200000")
    desc = cbor2.dumps(_descriptor(OLD_BOOT), canonical=True)
    digest = secrets.token_hex(32)
    grant = cbor2.dumps(["echo"])
    per_neuron_records = 2  # grant_set, placement_bound
    n_prepared = in_flight // 2
    n_running = in_flight - n_prepared
    inflight_records = 2 * n_prepared + 3 * n_running
    n_done = (records - neurons * per_neuron_records - inflight_records) // 4
    n_ops = n_done + in_flight

    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO boots(boot_id, started_at, pid, version) VALUES (?,?,?,?)",
        (OLD_BOOT, AT, 1, "0.1.0"),
    )
    conn.executemany(
        "INSERT INTO neurons(id, neuron, epoch, policy_version, placement_generation,"
        " placement, placement_digest, created_at) VALUES (?,?,1,1,1,?,?,?)",
        [(i + 1, secrets.token_hex(32), desc, digest, AT) for i in range(neurons)],
    )
    conn.executemany(
        "INSERT INTO progs(id, neuron_id, prog, state, step_limit, grant_acts, grant_enabled)"
        " VALUES (?,?,'p','active',1000000000,?,1)",
        [(i + 1, i + 1, grant) for i in range(neurons)],
    )
    seq = 0
    ev: list[tuple[Any, ...]] = []
    for i in range(neurons):
        for kind in ("grant_set", "placement_bound"):
            seq += 1
            ev.append((seq, AT, kind, i + 1, None, None, None, None))
    conn.executemany(
        "INSERT INTO events(seq, at, kind, neuron_id, op_id, attempt, follows,"
        " data) VALUES (?,?,?,?,?,?,?,?)",
        ev,
    )

    ops: list[tuple[Any, ...]] = []
    attempts: list[tuple[Any, ...]] = []
    claims: list[tuple[Any, ...]] = []
    outcomes: list[tuple[Any, ...]] = []
    ev = []
    d_sub = cbor2.dumps({"prog": "p", "act": "echo"})
    d_prep = cbor2.dumps(
        {
            "kind": "guarded",
            "epoch": 1,
            "policy_version": 1,
            "placement_generation": 1,
            "digest": digest,
            "worker": "w0",
            "boot": OLD_BOOT,
        }
    )
    d_claim = cbor2.dumps(
        {"worker": "w0", "boot": OLD_BOOT, "placement_generation": 1, "digest": digest}
    )
    d_out = cbor2.dumps({"status": "succeeded", "source": "adapter"})
    value = cbor2.dumps(b"x" * 32)

    def flush() -> None:
        conn.executemany(
            "INSERT INTO operations(id, neuron_id, op, prog_id, act, args, state,"
            " attempts, result_epoch, last_seq) VALUES (?,?,?,?,'echo',?,?,1,?,?)",
            ops,
        )
        conn.executemany(
            "INSERT INTO attempts(id, op_id, attempt, kind, epoch, policy_version,"
            " placement_generation, descriptor, digest, worker, boot, created_at,"
            " state) VALUES (?,?,1,'guarded',1,1,1,?,?,'w0',?,?,?)",
            attempts,
        )
        # claimed, then given an outcome, after the insert (the daemon's order, which
        # the row's growth shows in its pages): straight into the attempt's columns,
        # not through the views `claims` and `outcomes` (their INSTEAD OF triggers)
        conn.executemany(
            "UPDATE attempts SET claim_generation = 1, claim_digest = ?,"
            " claim_worker = 'w0', claim_boot = ?, claimed_at = ? WHERE id = ?",
            claims,
        )
        conn.executemany(
            "UPDATE attempts SET outcome_status = 'succeeded', outcome_value = ?,"
            " outcome_source = 'adapter', outcome_at = ? WHERE id = ?",
            outcomes,
        )
        conn.executemany(
            "INSERT INTO events(seq, at, kind, neuron_id, op_id, attempt, follows,"
            " data) VALUES (?,?,?,?,?,?,?,?)",
            ev,
        )
        for lst in (ops, attempts, claims, outcomes, ev):
            lst.clear()

    for op_id in range(1, n_ops + 1):
        neuron = (op_id - 1) % neurons + 1
        if op_id <= n_done:
            kinds = ("submitted", "prepared", "claimed", "outcome")
            state, a_state = "retained", "succeeded"
        elif op_id <= n_done + n_running:
            kinds = ("submitted", "prepared", "claimed")
            state, a_state = "running", "running"
        else:
            kinds = ("submitted", "prepared")
            state, a_state = "prepared", "prepared"
        follows = None
        for kind in kinds:
            seq += 1
            data = {"submitted": d_sub, "prepared": d_prep, "claimed": d_claim, "outcome": d_out}[
                kind
            ]
            ev.append(
                (seq, AT, kind, neuron, op_id, None if kind == "submitted" else 1, follows, data)
            )
            follows = seq
        ops.append(
            (
                op_id,
                neuron,
                f"op-{op_id}",
                neuron,
                b"x" * 32,
                state,
                1 if a_state == "succeeded" else None,
                seq,
            )
        )
        attempts.append((op_id, op_id, desc, digest, OLD_BOOT, AT, a_state))
        if "claimed" in kinds:
            claims.append((digest, OLD_BOOT, AT, op_id))
        if a_state == "succeeded":
            outcomes.append((value, AT, op_id))
        if len(ops) >= 20_000:
            flush()
    flush()
    conn.execute("UPDATE neurons SET last_seq = NULL")
    snapshot_afresh(conn)  # the counts' snapshot the writer would have left (schema 7)
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("ANALYZE") if os.environ.get("WARDD_BENCH_ANALYZE") else None
    counts = {
        t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("events", "operations", "attempts", "claims", "outcomes")
    }
    counts["in_flight"] = conn.execute(
        "SELECT count(*) FROM attempts WHERE state IN ('prepared', 'running')"
    ).fetchone()[0]
    conn.close()
    _flush(path)
    counts["bytes"] = os.path.getsize(path)
    return counts


def build_ops(
    path: Path, *, ops: int = 1_000_000, in_flight: int = 10_000, neurons: int = 100
) -> dict[str, int]:
    """A database of ``ops`` ops as an earlier boot left it, built by SQL
    statements alone: the same neurons and progs as :func:`build`, every op
    with one guarded attempt, its claim and its records (4 each); all but
    ``in_flight`` finished (``retained``, with an outcome), those still
    ``running`` (no outcome, 3 records): the recovery marks them unknown."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    migrate(conn)
    conn.execute("PRAGMA journal_mode=OFF")
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-400000")
    desc = cbor2.dumps(_descriptor(OLD_BOOT), canonical=True)
    digest = secrets.token_hex(32)
    done = ops - in_flight
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO boots(boot_id, started_at, pid, version) VALUES (?,?,?,?)",
        (OLD_BOOT, AT, 1, "0.1.0"),
    )
    conn.executemany(
        "INSERT INTO neurons(id, neuron, epoch, policy_version, placement_generation,"
        " placement, placement_digest, created_at) VALUES (?,?,1,1,1,?,?,?)",
        [(i + 1, secrets.token_hex(32), desc, digest, AT) for i in range(neurons)],
    )
    conn.executemany(
        "INSERT INTO progs(id, neuron_id, prog, state, step_limit, grant_acts, grant_enabled)"
        " VALUES (?,?,'p','active',1000000000,?,1)",
        [(i + 1, i + 1, cbor2.dumps(["echo"])) for i in range(neurons)],
    )
    conn.execute("CREATE TEMP TABLE n(x INTEGER PRIMARY KEY)")
    conn.execute(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < ?)"
        " INSERT INTO n SELECT x FROM c",
        (ops,),
    )
    fin = f"x <= {int(done)}"  # a finished op
    conn.execute(
        "INSERT INTO operations(id, neuron_id, op, prog_id, act, args, state, attempts,"
        " result_epoch, last_seq) SELECT x, (x - 1) % ?1 + 1, 'op-' || x, (x - 1) % ?1 + 1,"
        f" 'echo', ?2, CASE WHEN {fin} THEN 'retained' ELSE 'running' END, 1,"
        f" CASE WHEN {fin} THEN 1 END, 4 * x - NOT ({fin}) FROM n",
        (neurons, b"x" * 32),
    )
    conn.execute(
        "INSERT INTO attempts(id, op_id, attempt, kind, epoch, policy_version,"
        " placement_generation, descriptor, digest, worker, boot, created_at, state)"
        " SELECT x, x, 1, 'guarded', 1, 1, 1, ?, ?, 'w0', ?, ?,"
        f" CASE WHEN {fin} THEN 'succeeded' ELSE 'running' END FROM n",
        (desc, digest, OLD_BOOT, AT),
    )
    # claimed, then the finished ones given an outcome, in the attempts' own
    # columns (one pass each in rowid order, as the views' triggers did row by row)
    conn.execute(
        "UPDATE attempts SET claim_generation = 1, claim_digest = ?,"
        " claim_worker = 'w0', claim_boot = ?, claimed_at = ?",
        (digest, OLD_BOOT, AT),
    )
    conn.execute(
        "UPDATE attempts SET outcome_status = 'succeeded', outcome_value = ?,"
        " outcome_source = 'adapter', outcome_at = ? WHERE id <= ?",
        (cbor2.dumps(b"x" * 32), AT, done),
    )
    data = [
        cbor2.dumps(d)
        for d in (
            {"prog": "p", "act": "echo"},
            {
                "kind": "guarded",
                "epoch": 1,
                "policy_version": 1,
                "placement_generation": 1,
                "digest": digest,
                "worker": "w0",
                "boot": OLD_BOOT,
            },
            {"worker": "w0", "boot": OLD_BOOT, "placement_generation": 1, "digest": digest},
            {"status": "succeeded", "source": "adapter"},
        )
    ]
    # the records in seq order (4 per op: appended, never inserted between)
    conn.execute(
        "INSERT INTO events(seq, at, kind, neuron_id, op_id, attempt, follows, data)"
        " SELECT 4 * x - 4 + k, ?, CASE k WHEN 1 THEN 'submitted' WHEN 2 THEN 'prepared'"
        " WHEN 3 THEN 'claimed' ELSE 'outcome' END, (x - 1) % ? + 1, x,"
        " CASE WHEN k > 1 THEN 1 END, CASE WHEN k > 1 THEN 4 * x - 5 + k END,"
        " CASE k WHEN 1 THEN ? WHEN 2 THEN ? WHEN 3 THEN ? ELSE ? END"
        " FROM n, (SELECT 1 AS k UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4)"
        f" WHERE k < 4 OR {fin} ORDER BY x, k",
        (AT, neurons, *data),
    )
    snapshot_afresh(conn)  # the counts' snapshot the writer would have left (schema 7)
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode=WAL")
    counts = {
        t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
        for t in ("events", "operations", "attempts", "claims", "outcomes")
    }
    counts["in_flight"] = conn.execute(
        "SELECT count(*) FROM attempts WHERE state = 'running'"
    ).fetchone()[0]
    conn.close()
    _flush(path)
    counts["bytes"] = os.path.getsize(path)
    return counts


def compile_package() -> list[str]:
    """Byte-compile wardd's modules where the daemon imports them from, as
    an install does (pip compiles them: an installed wardd starts from its
    bytecode). A checkout installed editable and run with
    ``PYTHONDONTWRITEBYTECODE=1`` (this project's sessions are) would
    otherwise compile its ~70 modules at every start, ~0.1 s of each
    spawn → READY=1 timed here. Returns the directories compiled."""
    done = []
    for name in ("protocol", "daemon", "adapters", "client"):
        for path in importlib.import_module(f"wardd.{name}").__path__:
            compileall.compile_dir(path, quiet=1)
            done.append(path)
    return done


def _flush(path: Path) -> None:
    """Write a file the bench made out to disk now, not inside a start it
    times (the kernel writes a few hundred dirty MB back when it chooses, and
    the daemon's own fsyncs wait behind them)."""
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_db(src: Path, dst: Path) -> None:
    """Copy a database (and its WAL) for a daemon to start on, flushed to
    disk first, as a database a daemon left is: otherwise the copy's
    hundreds of MB still in the page cache are written out by the first
    fsync of the database file, the automatic checkpoint that follows the
    recovery's commit, and counted in the start that is measured."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal"):
        if os.path.exists(str(src) + suffix):
            shutil.copyfile(str(src) + suffix, str(dst) + suffix)
            _flush(Path(str(dst) + suffix))


def timed(fn: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    v = fn()
    return v, time.perf_counter() - t
