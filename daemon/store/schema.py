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
from collections.abc import Iterable, Mapping

SCHEMA_VERSION = 7

# Every table's columns (and, since v6, the columns of the views `claims` and
# `outcomes`), in the table's own order (the order of ``PRAGMA
# table_info`` once migrated: tests/unit/test_store_columns.py holds them to
# it, so a migration that adds a column fails that test until the column is
# named here). The store names a column only through these: the loaders'
# SELECT lists and their index maps (:mod:`.load`), the columns a change may
# set (:mod:`.apply`).
COLUMNS: Mapping[str, tuple[str, ...]] = {
    "boots": ("id", "boot_id", "started_at", "pid", "version", "stopped_at", "clean"),
    "neurons": (
        "id",
        "neuron",
        "epoch",
        "policy_version",
        "placement_generation",
        "placement",
        "placement_digest",
        "created_at",
        "last_seq",
    ),
    "progs": (
        "id",
        "neuron_id",
        "prog",
        "state",
        "step_limit",
        "steps_used",
        "steps_reserved",
        "exhausted",
        "grant_acts",
        "grant_enabled",
        "state_version",
        "reservation_seq",
    ),
    "reservations": ("id", "prog_id", "reservation", "steps", "state", "settled", "number"),
    "operations": (
        "id",
        "neuron_id",
        "op",
        "prog_id",
        "act",
        "args",
        "state",
        "attempts",
        "cancelled",
        "result_epoch",
        "last_seq",
        "ended_at",
        "counted_state",
    ),
    "attempts": (
        "id",
        "op_id",
        "attempt",
        "kind",
        "epoch",
        "policy_version",
        "placement_generation",
        "descriptor",
        "digest",
        "worker",
        "boot",
        "created_at",
        "state",
        "reason",
        "evidence",
        "claim_generation",
        "claim_digest",
        "claim_worker",
        "claim_boot",
        "claim_info",
        "claimed_at",
        "outcome_status",
        "outcome_value",
        "outcome_error",
        "outcome_source",
        "outcome_at",
    ),
    "claims": (
        "attempt_id",
        "placement_generation",
        "digest",
        "worker",
        "boot",
        "claim_info",
        "at",
    ),
    "outcomes": ("attempt_id", "status", "value", "error", "source", "at"),
    "events": ("seq", "at", "kind", "neuron_id", "op_id", "attempt", "follows", "data"),
    "counts": ("id", "seq", "ops"),
    "tombstones": (
        "id",
        "neuron_id",
        "op",
        "prog_id",
        "act",
        "args_digest",
        "state",
        "ended_at",
        "pruned_at",
    ),
    "descriptors": ("digest", "descriptor"),
    "prune_stats": ("id", "pruned_ops", "last_pruned_at", "attempt_hw", "seq_hw"),
}

# The highest event seq handed out so far: the last record's, or a pruned
# record's above it (prune_stats.seq_hw); the next record gets 1 + this.
LAST_SEQ = (
    "max(coalesce((SELECT max(seq) FROM events), 0),"
    " coalesce((SELECT seq_hw FROM prune_stats WHERE id = 1), 0))"
)

# The order of the op states in `operations_state` (schema 7): an op's life
# backwards (each state's ops in id order), so that the oldest op of a state,
# moving on to the next state of its life, lands at the end of the adjacent
# range: pending -> prepared -> running -> retained -> consumed each rewrite
# one leaf of the index, not two (a claim moved an op across every retained
# one). The generated column `life` holds it; a read by state names both
# (`o.life = ? AND o.state = ?`: OP_LIFE[state], state).
OP_LIFE: Mapping[str, int] = {
    "cancelled": 0,
    "consumed": 1,
    "retained": 2,
    "unknown": 3,
    "running": 4,
    "prepared": 5,
    "pending": 6,
}

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

# Version 5 (contract §3.9): retention. A finished op is pruned to a tombstone.
# - operations.ended_at: when the op ended, as the `at` of the event record
#   that ended it; set only while the op is consumed or cancelled and none of
#   its attempts is prepared, running or unknown (else NULL). A trigger keeps
#   it, on every change of the op's state and every record appended to it
#   (`last_seq`), so no write path can forget it: a cancelled op whose attempt
#   was still running ended with that attempt's outcome, one with an unknown
#   attempt has not ended until it is resolved. Existing ops get the same
#   value from their last record. A partial index finds the prunable ones.
# - tombstones: what is kept for ever of a pruned op. `id` is the op's own
#   row id (list_operations pages by it), times are milliseconds since the
#   epoch (a tombstone is ~10% of a finished op; RFC 3339 text on the wire).
#   Rows are never updated or deleted; one is inserted only for an op that
#   has ended (the trigger checks what the pruning unit checked).
# - Pruning deletes an op's records, which the v1 triggers forbid for event
#   records. They now allow it for exactly the ops that have a tombstone (so
#   only inside the unit that writes it); claims, outcomes, attempts and the
#   op row itself get the same guard, and an attempt that is prepared,
#   running or unknown can never be deleted. A new op can never take a
#   pruned op's id (neuron, op) nor its row id.
# - op_counts keeps counting a pruned op under its final state: the
#   tombstone's insert adds back what the op's delete took away.
# - prune_stats: pruned ops over the database's life, and when the last was;
#   and the high-water marks of attempt row ids and event seqs at the last
#   prune, so that an id or seq a pruned op held is never handed out again
#   (SQLite gives max(rowid)+1: deleting the newest rows would reuse them, and
#   a token, a call or a receipt of a pruned attempt would then name another
#   op's; seq is global and increasing).
# auto_vacuum = INCREMENTAL (space back to the file system) is set by
# `migrate` itself: it needs a VACUUM outside any transaction.
_V5 = """
ALTER TABLE operations ADD COLUMN ended_at TEXT;
UPDATE operations SET ended_at = coalesce(
        (SELECT e.at FROM events e WHERE e.seq = operations.last_seq),
        strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    WHERE state IN ('consumed', 'cancelled') AND NOT EXISTS (
        SELECT 1 FROM attempts a WHERE a.op_id = operations.id
            AND a.state IN ('prepared', 'running', 'unknown'));
CREATE INDEX operations_ended ON operations(ended_at) WHERE ended_at IS NOT NULL;
CREATE TRIGGER operations_ended AFTER UPDATE OF state, last_seq ON operations
WHEN NEW.state IN ('consumed', 'cancelled') OR OLD.ended_at IS NOT NULL
BEGIN
    UPDATE operations SET ended_at = CASE
        WHEN NEW.state NOT IN ('consumed', 'cancelled') OR EXISTS (
            SELECT 1 FROM attempts a WHERE a.op_id = NEW.id
                AND a.state IN ('prepared', 'running', 'unknown')) THEN NULL
        ELSE (SELECT e.at FROM events e WHERE e.seq = NEW.last_seq) END
    WHERE id = NEW.id;
END;
CREATE TABLE tombstones(
    id INTEGER PRIMARY KEY,
    neuron_id INTEGER NOT NULL,
    op TEXT NOT NULL,
    prog_id INTEGER NOT NULL,
    act TEXT NOT NULL,
    args_digest BLOB NOT NULL,
    state TEXT NOT NULL,
    ended_at INTEGER NOT NULL,
    pruned_at INTEGER NOT NULL,
    UNIQUE(neuron_id, op)
);
CREATE TRIGGER tombstones_only_ended BEFORE INSERT ON tombstones
WHEN NOT EXISTS (
    SELECT 1 FROM operations o WHERE o.id = NEW.id AND o.neuron_id = NEW.neuron_id
        AND o.op = NEW.op AND o.prog_id = NEW.prog_id AND o.act = NEW.act
        AND o.state = NEW.state AND o.ended_at IS NOT NULL
        AND o.state IN ('consumed', 'cancelled'))
    OR EXISTS (
    SELECT 1 FROM attempts a WHERE a.op_id = NEW.id
        AND a.state IN ('prepared', 'running', 'unknown'))
BEGIN
    SELECT RAISE(ABORT, 'only an op that has ended can be pruned');
END;
CREATE TRIGGER tombstones_count AFTER INSERT ON tombstones
BEGIN
    INSERT INTO op_counts(state, n) VALUES (NEW.state, 1)
        ON CONFLICT(state) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER tombstones_no_update BEFORE UPDATE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'tombstones are kept for ever');
END;
CREATE TRIGGER tombstones_no_delete BEFORE DELETE ON tombstones
BEGIN
    SELECT RAISE(ABORT, 'tombstones are kept for ever');
END;
DROP TRIGGER events_no_delete;
CREATE TRIGGER events_no_delete BEFORE DELETE ON events
WHEN OLD.op_id IS NULL OR NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.id = OLD.op_id)
BEGIN
    SELECT RAISE(ABORT, 'event records are append-only');
END;
CREATE TRIGGER attempts_no_delete BEFORE DELETE ON attempts
WHEN OLD.state IN ('prepared', 'running', 'unknown')
    OR NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.id = OLD.op_id)
BEGIN
    SELECT RAISE(ABORT, 'only a pruned op''s ended attempts can be deleted');
END;
CREATE TRIGGER claims_no_delete BEFORE DELETE ON claims
WHEN NOT EXISTS (
    SELECT 1 FROM attempts a JOIN tombstones t ON t.id = a.op_id WHERE a.id = OLD.attempt_id)
BEGIN
    SELECT RAISE(ABORT, 'only a pruned op''s claims can be deleted');
END;
CREATE TRIGGER outcomes_no_delete BEFORE DELETE ON outcomes
WHEN NOT EXISTS (
    SELECT 1 FROM attempts a JOIN tombstones t ON t.id = a.op_id WHERE a.id = OLD.attempt_id)
BEGIN
    SELECT RAISE(ABORT, 'only a pruned op''s outcomes can be deleted');
END;
CREATE TRIGGER operations_no_delete BEFORE DELETE ON operations
WHEN NOT EXISTS (SELECT 1 FROM tombstones t WHERE t.id = OLD.id)
BEGIN
    SELECT RAISE(ABORT, 'only a pruned op can be deleted');
END;
CREATE TRIGGER operations_not_pruned AFTER INSERT ON operations
WHEN EXISTS (SELECT 1 FROM tombstones t WHERE t.id = NEW.id)
    OR EXISTS (SELECT 1 FROM tombstones t WHERE t.neuron_id = NEW.neuron_id AND t.op = NEW.op)
BEGIN
    SELECT RAISE(ABORT, 'a pruned op never comes back');
END;
CREATE TABLE prune_stats(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    pruned_ops INTEGER NOT NULL,
    last_pruned_at TEXT,
    attempt_hw INTEGER NOT NULL DEFAULT 0,
    seq_hw INTEGER NOT NULL DEFAULT 0
);
INSERT INTO prune_stats(id, pruned_ops, last_pruned_at) VALUES (1, 0, NULL);
"""

# Version 6: smaller dispatch commits. Every event record of an op
# names the op's previous record (`follows`, written by the one applier since
# v1), and the op row names its last one (`last_seq`), so an op's records are
# found by walking that chain back along the primary key (`OP_RECORDS`):
# `history` and pruning read them so, and the index on events(op_id, seq),
# one more page written by every commit that appends a record, goes.
# `migrate` first checks that every op's records are on its chain.
# - An attempt's claim and outcome are columns of its own row (each set once,
#   then immutable, as the rows of their own tables were): the claim unit and
#   the outcome unit write the attempt's row anyway (its state), and the rows
#   of `claims` and `outcomes` were one more table page each. `claims` and
#   `outcomes` stay, as views of those columns, for the reads (and for
#   inserts, through INSTEAD OF triggers: a second claim of an attempt is
#   still refused as a constraint, the claim's CAS; a delete is refused: they
#   go with their attempt, whose delete the v5 guard allows only once pruned). An attempt is claimed
#   when `claimed_at` is set, has an outcome when `outcome_at` is.
# - The index on every attempt's state goes: a dispatch's two commits each
#   rewrote it (an attempt inserted running, then moved to its outcome). The
#   reads by state only ever ask for open attempts (prepared, running,
#   unknown), and an open attempt is always its op's latest (a new attempt is
#   refused while one is open): an unknown or a prepared one is found in a
#   partial index of its own (neither is written by `invoke`'s commits); a
#   running one is the latest attempt of a running op (`operations_state`,
#   already written by those commits) or of a cancelled op that has not ended
#   (a partial index that only a cancel while an attempt is open writes).
#   `attempts_in` spells that for the reads.
# - The claims and outcomes are copied into their columns by a row-value
#   UPDATE of a correlated subquery (SQLite 3.15), not `UPDATE ... FROM`
#   (3.33, newer than the 3.31 wardd accepts): the same rows either way
#   (tests/unit/test_schema_v6.py migrates every fixture both ways).
# - An attempt's descriptor (a third of its row) is kept once per digest, in
#   `descriptors` (the digest is the descriptor's own: canonical_digest), and
#   a new attempt's `descriptor` column is NULL: its binding names it by
#   `digest`. An earlier attempt keeps its own copy (the binding is
#   immutable); the migration copies those into `descriptors` too.
_V6 = """
DROP INDEX events_op;
ALTER TABLE attempts ADD COLUMN claim_generation INTEGER;
ALTER TABLE attempts ADD COLUMN claim_digest TEXT;
ALTER TABLE attempts ADD COLUMN claim_worker TEXT;
ALTER TABLE attempts ADD COLUMN claim_boot TEXT;
ALTER TABLE attempts ADD COLUMN claim_info BLOB;
ALTER TABLE attempts ADD COLUMN claimed_at TEXT;
ALTER TABLE attempts ADD COLUMN outcome_status TEXT;
ALTER TABLE attempts ADD COLUMN outcome_value BLOB;
ALTER TABLE attempts ADD COLUMN outcome_error TEXT;
ALTER TABLE attempts ADD COLUMN outcome_source TEXT;
ALTER TABLE attempts ADD COLUMN outcome_at TEXT;
UPDATE attempts SET (claim_generation, claim_digest, claim_worker, claim_boot, claim_info,
    claimed_at) = (SELECT c.placement_generation, c.digest, c.worker, c.boot, c.claim_info, c.at
    FROM claims c WHERE c.attempt_id = attempts.id)
    WHERE id IN (SELECT attempt_id FROM claims);
UPDATE attempts SET (outcome_status, outcome_value, outcome_error, outcome_source, outcome_at) =
    (SELECT oc.status, oc.value, oc.error, oc.source, oc.at
    FROM outcomes oc WHERE oc.attempt_id = attempts.id)
    WHERE id IN (SELECT attempt_id FROM outcomes);
DROP TRIGGER claims_no_delete;
DROP TRIGGER outcomes_no_delete;
DROP TABLE claims;
DROP TABLE outcomes;
CREATE VIEW claims(attempt_id, placement_generation, digest, worker, boot, claim_info, at) AS
    SELECT id, claim_generation, claim_digest, claim_worker, claim_boot, claim_info, claimed_at
    FROM attempts WHERE claimed_at IS NOT NULL;
CREATE VIEW outcomes(attempt_id, status, value, error, source, at) AS
    SELECT id, outcome_status, outcome_value, outcome_error, outcome_source, outcome_at
    FROM attempts WHERE outcome_at IS NOT NULL;
DROP INDEX attempts_state;
CREATE INDEX attempts_unknown ON attempts(id) WHERE state = 'unknown';
CREATE INDEX attempts_prepared ON attempts(id) WHERE state = 'prepared';
CREATE INDEX operations_cancelled_open ON operations(id)
    WHERE state = 'cancelled' AND ended_at IS NULL;
CREATE TABLE descriptors(digest TEXT PRIMARY KEY, descriptor BLOB NOT NULL) WITHOUT ROWID;
INSERT OR IGNORE INTO descriptors(digest, descriptor)
    SELECT digest, descriptor FROM attempts
    WHERE digest IS NOT NULL AND descriptor IS NOT NULL ORDER BY id;
CREATE TRIGGER descriptors_kept BEFORE UPDATE ON descriptors
BEGIN
    SELECT RAISE(ABORT, 'a descriptor is kept for ever');
END;
CREATE TRIGGER descriptors_no_delete BEFORE DELETE ON descriptors
BEGIN
    SELECT RAISE(ABORT, 'a descriptor is kept for ever');
END;
CREATE TRIGGER attempts_claim_once BEFORE UPDATE OF claim_generation, claim_digest,
    claim_worker, claim_boot, claim_info, claimed_at ON attempts
WHEN OLD.claimed_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'the attempt is already claimed');
END;
CREATE TRIGGER attempts_outcome_once BEFORE UPDATE OF outcome_status, outcome_value,
    outcome_error, outcome_source, outcome_at ON attempts
WHEN OLD.outcome_at IS NOT NULL
BEGIN
    SELECT RAISE(ABORT, 'the attempt already has an outcome');
END;
CREATE TRIGGER claims_insert INSTEAD OF INSERT ON claims
BEGIN
    SELECT RAISE(ABORT, 'no such attempt')
        WHERE NOT EXISTS (SELECT 1 FROM attempts WHERE id = NEW.attempt_id);
    UPDATE attempts SET claim_generation = NEW.placement_generation, claim_digest = NEW.digest,
        claim_worker = NEW.worker, claim_boot = NEW.boot, claim_info = NEW.claim_info,
        claimed_at = NEW.at WHERE id = NEW.attempt_id;
END;
CREATE TRIGGER claims_no_delete INSTEAD OF DELETE ON claims
BEGIN
    SELECT RAISE(ABORT, 'a claim goes only with its attempt');
END;
CREATE TRIGGER outcomes_no_delete INSTEAD OF DELETE ON outcomes
BEGIN
    SELECT RAISE(ABORT, 'an outcome goes only with its attempt');
END;
CREATE TRIGGER outcomes_insert INSTEAD OF INSERT ON outcomes
BEGIN
    SELECT RAISE(ABORT, 'no such attempt')
        WHERE NOT EXISTS (SELECT 1 FROM attempts WHERE id = NEW.attempt_id);
    UPDATE attempts SET outcome_status = NEW.status, outcome_value = NEW.value,
        outcome_error = NEW.error, outcome_source = NEW.source, outcome_at = NEW.at
        WHERE id = NEW.attempt_id;
END;
"""
# Version 7: smaller dispatch commits, again (at most 5 WAL pages a commit,
# docs/performance.md).
# - `op_counts` was kept by triggers, one page more in every commit that
#   moved an op. It becomes `counts`: a snapshot of the ops by state, as of
#   the record `seq`, written by the writer at most about once a second (in
#   a batch it commits anyway) and in every pruning batch (store/counters.py).
#   `status` is seeded from it plus a bounded catch-up over the ops whose
#   records came after it: each such op counts under its state now instead of
#   `counted_state`, the state it had at the snapshot (NULL: it did not
#   exist then). A trigger keeps `counted_state`: the first write of an op
#   after a snapshot (a new `last_seq`, the old one not past the snapshot)
#   saves the state the snapshot counted it under, whatever path writes it.
#   A SIGKILL between snapshots loses nothing: the catch-up reads it back.
# - `operations_state` orders the states by `OP_LIFE` (a generated column,
#   `life`, computed from `state`, stored only in the index), so that a
#   claim and an outcome each rewrite one leaf of it.
_V7 = """
ALTER TABLE operations ADD COLUMN counted_state TEXT;
ALTER TABLE operations ADD COLUMN life INTEGER GENERATED ALWAYS AS (CASE state
    WHEN 'cancelled' THEN 0 WHEN 'consumed' THEN 1 WHEN 'retained' THEN 2
    WHEN 'unknown' THEN 3 WHEN 'running' THEN 4 WHEN 'prepared' THEN 5
    WHEN 'pending' THEN 6 END) VIRTUAL;
DROP INDEX operations_state;
CREATE INDEX operations_state ON operations(neuron_id, life, id);
CREATE TABLE counts(id INTEGER PRIMARY KEY CHECK (id = 1), seq INTEGER NOT NULL, ops TEXT NOT NULL);
INSERT INTO counts(id, seq, ops) SELECT 1,
    max(coalesce((SELECT max(seq) FROM events), 0),
        coalesce((SELECT seq_hw FROM prune_stats WHERE id = 1), 0)),
    (SELECT json_group_object(state, n) FROM op_counts WHERE n != 0);
DROP TRIGGER op_counts_insert;
DROP TRIGGER op_counts_update;
DROP TRIGGER op_counts_delete;
DROP TRIGGER tombstones_count;
DROP TABLE op_counts;
CREATE TRIGGER operations_counted AFTER UPDATE OF last_seq ON operations
WHEN OLD.last_seq <= (SELECT seq FROM counts WHERE id = 1)
BEGIN
    UPDATE operations SET counted_state = OLD.state WHERE id = NEW.id;
END;
"""


# An op's event records, newest first, from its last record back along
# `follows` (v6): bind the op's `last_seq`, then the seq to stop at (the
# walk ends at the first record whose `follows` is not above it; 0 for all).
# Select `seq` from `chain` (each is an events row id).
OP_RECORDS = (
    "WITH RECURSIVE chain(seq) AS (SELECT ? UNION ALL SELECT e.follows FROM events e"
    " JOIN chain c ON e.seq = c.seq WHERE e.follows > ?)"
)

# The ids of the attempts in a state that reads ask for (see _V6): each
# state through its own index, never a scan.
_ATTEMPTS_IN = {
    "unknown": "SELECT id FROM attempts WHERE state = 'unknown'",
    "prepared": "SELECT id FROM attempts WHERE state = 'prepared'",
    "running": (
        "SELECT r.id FROM operations ro JOIN attempts r"
        " ON r.op_id = ro.id AND r.attempt = ro.attempts"
        " WHERE ro.neuron_id IN (SELECT id FROM neurons)"
        f" AND ro.life = {OP_LIFE['running']} AND ro.state = 'running'"
        " AND r.state = 'running'"
        " UNION ALL SELECT r.id FROM operations ro JOIN attempts r"
        " ON r.op_id = ro.id AND r.attempt = ro.attempts"
        " WHERE ro.state = 'cancelled' AND ro.ended_at IS NULL AND r.state = 'running'"
    ),
}


def attempts_in(states: Iterable[str]) -> str:
    """A WHERE term: the attempt ``a`` is in one of ``states`` (each of
    ``unknown``, ``prepared``, ``running``: the open ones, the only ones a
    read asks for by state), its id among those each state's index finds
    (one list of ids: an OR of the states would scan every attempt)."""
    unknown = set(states) - set(_ATTEMPTS_IN)
    if unknown:
        raise ValueError(f"attempts are not read by state {sorted(unknown)}")
    return "a.id IN (" + " UNION ALL ".join(_ATTEMPTS_IN[s] for s in states) + ")"


# version -> the script that brings a database at version-1 to version.
# A released version's script never changes what it makes: tests/data keeps
# a database of each released version and proves it migrates (a statement
# may be rewritten only to the same rows, as v6's copies were for SQLite 3.31).
_SCRIPTS: dict[int, str] = {1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _V7}


class SchemaTooNew(Exception):
    pass


# The oldest SQLite that can hold this schema: 3.31, for schema 7's generated
# column (`operations.life`, the key of `operations_state`). An older one could
# neither migrate a database to it nor read one migrated.
SQLITE_MIN = (3, 31, 0)


class SQLiteTooOld(Exception):
    pass


def check_sqlite() -> None:
    """Raise `SQLiteTooOld` when the SQLite this Python links is older than
    :data:`SQLITE_MIN`, or lacks the JSON functions schema 7's migration
    calls (built in from SQLite 3.38; before, a build option every common
    build turns on): a start refused before any database is opened."""
    need = ".".join(map(str, SQLITE_MIN))
    if sqlite3.sqlite_version_info < SQLITE_MIN:
        raise SQLiteTooOld(
            f"SQLite {sqlite3.sqlite_version} is older than {need}, which wardd's database"
            f" (schema {SCHEMA_VERSION}) needs; run wardd on a Python linked with SQLite {need}"
            " or newer"
        )
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("SELECT json_group_object('a', 1)").fetchone()
    except sqlite3.Error as exc:
        raise SQLiteTooOld(
            f"SQLite {sqlite3.sqlite_version} was built without its JSON functions ({exc}),"
            f" which wardd's database (schema {SCHEMA_VERSION}) needs; run wardd on a Python"
            f" linked with SQLite {need} or newer built with them (every SQLite from 3.38 is)"
        ) from None
    finally:
        probe.close()


def migrate(conn: sqlite3.Connection) -> tuple[int, int]:
    """Bring the database to :data:`SCHEMA_VERSION`; returns (from, to).

    Runs under the owner lock, before recovery (contract §3.6). Each step runs in
    its own transaction together with the ``user_version`` bump."""
    check_sqlite()
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
            if target == 6:
                _check_chained(conn)
            _run_script(conn, target)
            conn.execute(f"PRAGMA user_version = {target}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        current = target
    ensure_incremental_vacuum(conn)
    return start, current


def ensure_incremental_vacuum(conn: sqlite3.Connection) -> bool:
    """contract §3.9: pruned space goes back to the file system, which needs
    ``auto_vacuum = INCREMENTAL``. A database that has tables can only change
    it by a VACUUM (outside any transaction; it rewrites the file, through
    the WAL, atomically: a crash leaves the old file whole and the next start
    does it again). Returns True if it vacuumed. Under the owner lock, before
    any other connection is open."""
    (mode,) = conn.execute("PRAGMA auto_vacuum").fetchone()
    if mode == 2:
        return False
    conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
    conn.execute("VACUUM")
    # the VACUUM wrote the whole database into the WAL: give that back too
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return True


def _check_chained(conn: sqlite3.Connection) -> None:
    """Before v6 drops events(op_id, seq): every record of an op is on the
    chain from the op's last record (the one applier has always linked
    them; a database where that does not hold is not one wardd wrote)."""
    (loose,) = conn.execute(
        "WITH RECURSIVE chain(seq) AS (SELECT last_seq FROM operations WHERE last_seq IS NOT NULL"
        " UNION ALL SELECT e.follows FROM events e JOIN chain c ON e.seq = c.seq"
        " WHERE e.follows IS NOT NULL)"
        " SELECT (SELECT count(*) FROM events WHERE op_id IS NOT NULL)"
        " - (SELECT count(*) FROM chain c JOIN events e ON e.seq = c.seq)"
    ).fetchone()
    if loose:
        raise sqlite3.DatabaseError(
            f"{loose} event records are not linked to their operation's previous record"
        )


def _run_script(conn: sqlite3.Connection, version: int) -> None:
    script = _SCRIPTS[version]
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            conn.execute(buf)
            buf = ""
