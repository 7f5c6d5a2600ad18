"""Database schema and migrations by ``PRAGMA user_version`` (contract §2, §3.6).

Integer rowid keys everywhere, client-chosen ids (neuron, prog, op) in
secondary unique indexes (random text primary keys cost ~4×).

An attempt's *binding* (kind, epoch, policy version, placement generation,
descriptor, digest, worker, boot, time) is immutable: a trigger refuses any
UPDATE of those columns. Its state, reason and evidence are projections of
the append-only ``events`` log, kept beside it for reads.
"""

from __future__ import annotations

import sqlite3

SCHEMA_VERSION = 4

_V1 = """
CREATE TABLE boots(
    id INTEGER PRIMARY KEY,
    boot_id TEXT NOT NULL UNIQUE,
    started_at TEXT NOT NULL,
    pid INTEGER NOT NULL,
    version TEXT NOT NULL,
    stopped_at TEXT,
    clean INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE neurons(
    id INTEGER PRIMARY KEY,
    neuron TEXT NOT NULL UNIQUE,
    epoch INTEGER NOT NULL,
    policy_version INTEGER NOT NULL,
    placement_generation INTEGER NOT NULL,
    placement BLOB,
    placement_digest TEXT,
    created_at TEXT NOT NULL,
    last_seq INTEGER
);
CREATE TABLE progs(
    id INTEGER PRIMARY KEY,
    neuron_id INTEGER NOT NULL REFERENCES neurons(id),
    prog TEXT NOT NULL,
    state TEXT NOT NULL,
    step_limit INTEGER NOT NULL,
    steps_used INTEGER NOT NULL DEFAULT 0,
    steps_reserved INTEGER NOT NULL DEFAULT 0,
    exhausted INTEGER NOT NULL DEFAULT 0,
    grant_acts BLOB,
    grant_enabled INTEGER,
    UNIQUE(neuron_id, prog)
);
CREATE TABLE reservations(
    id INTEGER PRIMARY KEY,
    prog_id INTEGER NOT NULL REFERENCES progs(id),
    reservation TEXT NOT NULL,
    steps INTEGER NOT NULL,
    state TEXT NOT NULL,
    settled INTEGER,
    UNIQUE(prog_id, reservation)
);
CREATE TABLE operations(
    id INTEGER PRIMARY KEY,
    neuron_id INTEGER NOT NULL REFERENCES neurons(id),
    op TEXT NOT NULL,
    prog_id INTEGER NOT NULL REFERENCES progs(id),
    act TEXT NOT NULL,
    args BLOB NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    result_epoch INTEGER,
    last_seq INTEGER,
    UNIQUE(neuron_id, op)
);
CREATE INDEX operations_state ON operations(neuron_id, state, id);
CREATE INDEX operations_prog ON operations(prog_id, state);
CREATE TABLE attempts(
    id INTEGER PRIMARY KEY,
    op_id INTEGER NOT NULL REFERENCES operations(id),
    attempt INTEGER NOT NULL,
    kind TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    policy_version INTEGER NOT NULL,
    placement_generation INTEGER,
    descriptor BLOB,
    digest TEXT,
    worker TEXT,
    boot TEXT NOT NULL,
    created_at TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT,
    evidence BLOB,
    UNIQUE(op_id, attempt)
);
CREATE INDEX attempts_state ON attempts(state, id);
CREATE TRIGGER attempts_binding_immutable
BEFORE UPDATE OF op_id, attempt, kind, epoch, policy_version, placement_generation,
                 descriptor, digest, worker, boot, created_at ON attempts
BEGIN
    SELECT RAISE(ABORT, 'an attempt binding is immutable');
END;
CREATE TABLE claims(
    attempt_id INTEGER PRIMARY KEY REFERENCES attempts(id),
    placement_generation INTEGER NOT NULL,
    digest TEXT NOT NULL,
    worker TEXT NOT NULL,
    boot TEXT NOT NULL,
    claim_info BLOB,
    at TEXT NOT NULL
);
CREATE TABLE outcomes(
    attempt_id INTEGER PRIMARY KEY REFERENCES attempts(id),
    status TEXT NOT NULL,
    value BLOB,
    error TEXT,
    source TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE TABLE events(
    seq INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    kind TEXT NOT NULL,
    neuron_id INTEGER NOT NULL,
    op_id INTEGER,
    attempt INTEGER,
    follows INTEGER,
    data BLOB
);
CREATE INDEX events_op ON events(op_id, seq) WHERE op_id IS NOT NULL;
CREATE TRIGGER events_append_only BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'event records are append-only');
END;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'event records are append-only');
END;
"""

# Version 2: `status` counts operations by state across all neurons; an
# index on the state alone makes that an index scan, not a table scan.
_V2 = """
CREATE INDEX operations_by_state ON operations(state);
"""

# Version 3: `status` must answer in well under a millisecond on a database
# of millions of operations, on the event loop thread. Counting by state,
# even through an index, took 14-33 ms at 1M operations; an exact count per
# state, kept by triggers in the same transactions that change the states,
# answers at once. The v2 index goes, and the prog index no longer carries
# the state (each goes one page write fewer per state change; the archive
# and exhaustion checks filter a prog's ops, never search by state).
_V3 = """
CREATE TABLE op_counts(state TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;
INSERT INTO op_counts(state, n) SELECT state, count(*) FROM operations GROUP BY state;
CREATE TRIGGER op_counts_insert AFTER INSERT ON operations
BEGIN
    INSERT INTO op_counts(state, n) VALUES (NEW.state, 1)
        ON CONFLICT(state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER op_counts_update AFTER UPDATE OF state ON operations
WHEN OLD.state != NEW.state
BEGIN
    UPDATE op_counts SET n = n - 1 WHERE state = OLD.state;
    INSERT INTO op_counts(state, n) VALUES (NEW.state, 1)
        ON CONFLICT(state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER op_counts_delete AFTER DELETE ON operations
BEGIN
    UPDATE op_counts SET n = n - 1 WHERE state = OLD.state;
END;
DROP INDEX operations_by_state;
DROP INDEX operations_prog;
CREATE INDEX operations_prog ON operations(prog_id);
"""

# Version 4 (contract §3.1, §3.4): the replay fences of the prog writes.
# - progs.state_version: 1 at creation, +1 with every state change of the prog
#   (set_prog_state, set_step_limit), never back; `set_prog_state` checks
#   `expected_state_version` against it. An existing prog starts at 1.
# - reservations.number: the prog's next number when the reservation is made
#   (1, 2, ...); progs.reservation_seq is the number the next one will get.
#   `recover_reservations.before` releases only open ones numbered below it.
#   Existing reservations are numbered per prog in rowid order (the order they
#   were made: a reservation row is never deleted); the window function and
#   the temporary table keep that linear on a large table.
_V4 = """
ALTER TABLE progs ADD COLUMN state_version INTEGER NOT NULL DEFAULT 1;
ALTER TABLE progs ADD COLUMN reservation_seq INTEGER NOT NULL DEFAULT 1;
ALTER TABLE reservations ADD COLUMN number INTEGER NOT NULL DEFAULT 0;
CREATE TEMP TABLE v4_numbers(id INTEGER PRIMARY KEY, number INTEGER NOT NULL);
INSERT INTO v4_numbers(id, number)
    SELECT id, row_number() OVER (PARTITION BY prog_id ORDER BY id) FROM reservations;
UPDATE reservations SET number = (SELECT n.number FROM v4_numbers n WHERE n.id = reservations.id);
DROP TABLE v4_numbers;
CREATE UNIQUE INDEX reservations_number ON reservations(prog_id, number);
UPDATE progs SET reservation_seq = 1 + coalesce(
    (SELECT max(r.number) FROM reservations r WHERE r.prog_id = progs.id), 0
);
"""

# version -> the script that brings a database at version-1 to version.
# A released version's script never changes: tests/data keeps a database
# of each released version and proves it migrates.
_SCRIPTS: dict[int, str] = {1: _V1, 2: _V2, 3: _V3, 4: _V4}


class SchemaTooNew(Exception):
    pass


def migrate(conn: sqlite3.Connection) -> tuple[int, int]:
    """Bring the database to :data:`SCHEMA_VERSION`; returns (from, to).

    Runs under the owner lock, before recovery (contract §3.6). Each step runs in
    its own transaction together with the ``user_version`` bump."""
    (current,) = conn.execute("PRAGMA user_version").fetchone()
    if current > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"database schema version {current} is newer than this wardd ({SCHEMA_VERSION})"
        )
    start = current
    while current < SCHEMA_VERSION:
        target = current + 1
        conn.execute("BEGIN IMMEDIATE")
        try:
            # executescript commits first; run statements one by one instead.
            _run_script(conn, target)
            conn.execute(f"PRAGMA user_version = {target}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        current = target
    return start, current


def _run_script(conn: sqlite3.Connection, version: int) -> None:
    script = _SCRIPTS[version]
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            conn.execute(buf)
            buf = ""
