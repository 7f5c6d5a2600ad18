"""Schema 6 (smaller dispatch commits): an op's event records are
found along their chain (``follows``, back from the op's ``last_seq``), and
the index on events(op_id, seq) is gone. Every earlier fixture migrates with
its records whole; the reads and the pruning that used the index still reach
the records by their primary key, never by a scan of the table."""

from __future__ import annotations

import re
import sqlite3

import pytest

from tests.unit._store import DATA, migrated, query_plan, released
from wardd.daemon.core import changes as ch
from wardd.daemon.core import ops
from wardd.daemon.store import load, marks, schema
from wardd.daemon.store.apply import apply
from wardd.daemon.store.prune import prune_ops
from wardd.daemon.store.reads import Reads
from wardd.daemon.store.schema import (
    _SCRIPTS,
    OP_RECORDS,
    SCHEMA_VERSION,
    SQLITE_MIN,
    attempts_in,
    migrate,
)
from wardd.daemon.store.writer import Tx, connect
from wardd.protocol import AttemptState

VERSIONS = [1, 2, 3, 4, 5, 6]


def _records_by_op(conn: sqlite3.Connection) -> dict[str, list[tuple[object, ...]]]:
    """Every op's records, read the old way (by op_id), in seq order."""
    out: dict[str, list[tuple[object, ...]]] = {}
    for op, *rec in conn.execute(
        "SELECT o.op, e.seq, e.at, e.kind, e.attempt, e.follows, e.data FROM events e"
        " JOIN operations o ON o.id = e.op_id ORDER BY e.seq"
    ):
        out.setdefault(op, []).append(tuple(rec))
    return out


class TestMigration:
    @pytest.mark.parametrize("version", VERSIONS)
    def test_every_fixture_migrates_with_its_records_whole(self, tmp_path, version):
        """Each earlier fixture reaches schema 6; every op's records, walked along
        their chain, are exactly the records it held, and history pages them."""
        path = released(tmp_path, version)
        src = sqlite3.connect(DATA / f"schema-v{version}.db")
        before = _records_by_op(src)
        neuron = src.execute("SELECT neuron FROM neurons ORDER BY id LIMIT 1").fetchone()[0]
        counts = {
            t: src.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("operations", "attempts", "claims", "outcomes", "events")
        }
        src.close()
        conn = connect(path)
        assert migrate(conn) == (version, SCHEMA_VERSION) and SCHEMA_VERSION >= 6
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        indexes = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "events_op" not in indexes
        for t, n in counts.items():
            assert conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] == n, t
        reads = Reads(conn, 1 << 20)
        for op, records in before.items():
            page = reads.history(neuron, op, None, 100)
            assert [r["seq"] for r in page["records"]] == [r[0] for r in records], op
            assert [r["kind"] for r in page["records"]] == [r[2] for r in records], op
            # a page after the first record: the walk stops there
            rest = reads.history(neuron, op, records[0][0], 100)["records"]
            assert [r["seq"] for r in rest] == [r[0] for r in records[1:]], op
        conn.close()

    def test_a_record_off_its_ops_chain_is_refused(self, tmp_path):
        """A record of an op that does not follow the op's previous one (never
        written by wardd) would be lost to history and pruning: the migration
        refuses the database, changing nothing."""
        path = released(tmp_path, 5)
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute(
            "INSERT INTO events(at, kind, neuron_id, op_id, data)"
            " SELECT '2030-01-01T00:00:00.000Z', 'stray', neuron_id, id, NULL"
            " FROM operations LIMIT 1"
        )
        with pytest.raises(sqlite3.DatabaseError, match="not linked"):
            migrate(conn)
        assert conn.execute("PRAGMA user_version").fetchone() == (5,)
        conn.close()


class TestPlans:
    """The reads that used events(op_id, seq) reach records by their key."""

    @pytest.fixture
    def conn(self, tmp_path):
        c = migrated(released(tmp_path, 5))
        yield c
        c.close()

    def test_history_walks_the_chain_by_primary_key(self, conn):
        plan = query_plan(
            conn,
            OP_RECORDS + " SELECT e.* FROM chain c JOIN events e ON e.seq = c.seq"
            " WHERE e.seq > ? ORDER BY e.seq LIMIT ?",
            (9, 0, 0, 10),
        )
        assert "SCAN e" not in plan and "SCAN events" not in plan, plan
        assert "INTEGER PRIMARY KEY" in plan, plan

    def test_pruning_deletes_records_by_primary_key(self, conn, tmp_path):
        """prune_ops deletes an op's records along its chain: each one by seq."""
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        (op_id,) = conn.execute("SELECT id FROM operations WHERE op = 'done'").fetchone()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE operations SET state = 'consumed' WHERE id = ?", (op_id,))
        conn.execute(
            "INSERT INTO events(seq, at, kind, neuron_id, op_id, follows) SELECT"
            " (SELECT max(seq) FROM events) + 1, '2030-01-01T00:00:00.000Z', 'consumed',"
            " neuron_id, id, last_seq FROM operations WHERE id = ?",
            (op_id,),
        )
        conn.execute(
            "UPDATE operations SET last_seq = (SELECT max(seq) FROM events) WHERE id = ?", (op_id,)
        )
        assert prune_ops(conn, [op_id], 1) == 1
        conn.execute("COMMIT")
        conn.set_trace_callback(None)
        assert (
            conn.execute("SELECT count(*) FROM events WHERE op_id = ?", (op_id,)).fetchone()[0] == 0
        )
        delete = next(s for s in statements if s.startswith("DELETE FROM events"))
        plan = query_plan(conn, delete, ())
        assert "SCAN events" not in plan and "SCAN e " not in plan + " ", plan


class TestOpenAttempts:
    """Schema 6 keeps no index of every attempt's state: an open attempt
    (prepared, running, unknown) is found through its own partial index or,
    running, through its op, whose latest attempt it is."""

    @pytest.mark.parametrize("version", VERSIONS)
    def test_each_open_state_finds_exactly_its_attempts(self, tmp_path, version):
        """attempts_in(state) finds what a scan of every attempt finds."""
        conn = migrated(released(tmp_path, version))
        for state in ("unknown", "prepared", "running"):
            got = {
                i
                for (i,) in conn.execute(
                    f"SELECT a.id FROM attempts a WHERE {attempts_in((state,))}"
                )
            }
            want = {
                i
                for (i,) in conn.execute(
                    "SELECT id FROM attempts NOT INDEXED WHERE state = ?", (state,)
                )
            }
            assert got == want, state
        assert got, "every fixture was left with an attempt running"
        conn.close()

    def test_a_running_attempt_of_a_cancelled_op_is_found(self, tmp_path):
        """An op cancelled while its attempt runs is no longer running, but its
        attempt is: list_attempts and recovery still find it."""
        conn = migrated(released(tmp_path, 5))
        neuron = (DATA / "schema-v5.neuron").read_text().strip()
        conn.execute("BEGIN IMMEDIATE")
        view = load.op_view(conn, neuron, "running")
        apply(Tx(conn), ops.cancel(view), view.op)
        conn.execute("COMMIT")
        (attempt_id,) = conn.execute(
            "SELECT a.id FROM attempts a JOIN operations o ON o.id = a.op_id"
            " WHERE o.op = 'running' AND o.state = 'cancelled' AND a.state = 'running'"
        ).fetchone()
        listed = Reads(conn, 1 << 20).list_attempts("running", None, 10)["attempts"]
        assert [(x["op"], x["state"]) for x in listed] == [("running", "running")]
        left = [(o.op, o.id) for o in marks.open_attempts(conn, "b-now")]
        assert ("running", attempt_id) in left
        conn.close()

    def test_no_read_by_state_scans_attempts_or_operations(self, tmp_path):
        """Each read that asks for attempts by state searches, never scans, the
        attempts and operations tables (a partial index holds only its rows)."""
        conn = migrated(released(tmp_path, 5))
        for states in (
            ("unknown",),
            ("prepared",),
            ("running",),
            ("unknown", "prepared", "running"),
        ):
            plan = query_plan(conn, f"SELECT a.* FROM attempts a WHERE {attempts_in(states)}", ())
            for step in plan.split(" | "):
                assert (
                    not step.startswith(("SCAN a", "SCAN attempts", "SCAN ro", "SCAN operations"))
                    or "USING INDEX attempts_" in step
                    or "operations_cancelled_open" in step
                ), plan
        conn.close()


class TestDescriptors:
    def test_a_descriptor_is_kept_once_per_digest_and_for_ever(self, tmp_path):
        """A new attempt's binding names its descriptor by digest: the
        descriptor is stored once in `descriptors` (earlier attempts' copies
        too), never changed nor deleted; the attempt's own column is NULL."""
        conn = migrated(released(tmp_path, 5))
        old = dict(
            conn.execute(
                "SELECT digest, descriptor FROM attempts WHERE descriptor IS NOT NULL"
            ).fetchall()
        )
        assert old and dict(conn.execute("SELECT digest, descriptor FROM descriptors")) == old
        neuron = (DATA / "schema-v5.neuron").read_text().strip()
        conn.execute("BEGIN IMMEDIATE")
        view = load.op_view(conn, neuron, "done", next_attempt=True)
        n = view.neuron
        assert n is not None and view.op is not None
        attempt_id = view.next_attempt_id
        decision = ch.Decision(
            (
                ch.NewAttempt(
                    attempt_id,
                    view.op.id,
                    2,
                    "guarded",
                    n.epoch,
                    n.policy_version,
                    n.placement_generation,
                    {"v": 1, "new": True},
                    "d-new",
                    "w0",
                    "b-now",
                    AttemptState.PREPARED,
                    None,
                ),  # fmt: skip
                ch.SetOp(view.op.id, {"attempts": 2}),
            )
        )
        apply(Tx(conn), decision, view.op)
        conn.execute("COMMIT")
        row = conn.execute(
            "SELECT a.descriptor, d.descriptor FROM attempts a"
            " JOIN descriptors d ON d.digest = a.digest WHERE a.id = ?",
            (attempt_id,),
        ).fetchone()
        assert row[0] is None and row[1] is not None
        with pytest.raises(sqlite3.IntegrityError, match="kept for ever"):
            conn.execute("DELETE FROM descriptors")
        with pytest.raises(sqlite3.IntegrityError, match="kept for ever"):
            conn.execute("UPDATE descriptors SET descriptor = x'00'")
        conn.close()


# v6 as released: it copied the claims and outcomes with `UPDATE ... FROM`
# (SQLite 3.33), newer than the SQLite 3.31 that wardd accepts.
RELEASED_V6_COPIES = """
UPDATE attempts SET claim_generation = c.placement_generation, claim_digest = c.digest,
    claim_worker = c.worker, claim_boot = c.boot, claim_info = c.claim_info, claimed_at = c.at
    FROM claims c WHERE c.attempt_id = attempts.id;
UPDATE attempts SET outcome_status = oc.status, outcome_value = oc.value,
    outcome_error = oc.error, outcome_source = oc.source, outcome_at = oc.at
    FROM outcomes oc WHERE oc.attempt_id = attempts.id;
"""

# syntax SQLite added after 3.31 (SQLITE_MIN), with the version that added it
_NEWER_WORDS = {
    "RETURNING": "3.35",
    "MATERIALIZED": "3.35",
    "STRICT": "3.37",
    "IIF": "3.32",
    "UNIXEPOCH": "3.38",
    "SQLITE_SCHEMA": "3.33",
    "->": "3.38",
    "->>": "3.38",
}
_CONFLICT = {"OR", "ROLLBACK", "ABORT", "REPLACE", "FAIL", "IGNORE"}


def _tokens(sql: str) -> list[str]:
    """The statement's words, operators and parentheses, upper-cased, without
    its string literals and comments."""
    sql = re.sub(r"--[^\n]*|'(?:[^']|'')*'", " ", sql)
    return [t.upper() for t in re.findall(r"->>|->|\w+|[()\[\];.,=]", sql)]


def newer_syntax(sql: str) -> list[str]:
    """What in ``sql`` needs an SQLite newer than 3.31: the words above, and
    an `UPDATE ... FROM` (a FROM at the depth of an UPDATE statement's own
    clauses, before its end; a trigger's `UPDATE OF`/`UPDATE ON` is no
    statement)."""
    toks = _tokens(sql)
    found = [f"{t} ({_NEWER_WORDS[t]})" for t in toks if t in _NEWER_WORDS]
    pairs = zip(toks, toks[1:], strict=False)
    found += ["DROP COLUMN (3.35)" for pair in pairs if pair == ("DROP", "COLUMN")]
    depth, update_at = 0, None
    for i, t in enumerate(toks):
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
        if update_at is not None and (depth < update_at or t in (";", "END")):
            update_at = None
        if t == "UPDATE":
            j = i + 1
            while j < len(toks) and toks[j] in _CONFLICT:
                j += 1
            name_end = j + 3 if toks[j + 1 : j + 2] == ["."] else j + 1
            if toks[name_end : name_end + 1] == ["SET"]:
                update_at = depth
        elif t == "FROM" and update_at == depth:
            found.append("UPDATE ... FROM (3.33)")
    return found


def _statements(script: str) -> list[str]:
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf)
            buf = ""
    return out


class TestTheOldestSQLite:
    def test_no_migration_uses_syntax_newer_than_the_oldest_sqlite_accepted(self):
        """Every statement of every version's script runs on SQLite 3.31
        (SQLITE_MIN): none uses `UPDATE ... FROM` or later syntax. The check
        is not blind: v6's copies as released are caught."""
        assert SQLITE_MIN == (3, 31, 0)
        for version, script in _SCRIPTS.items():
            for statement in _statements(script):
                assert newer_syntax(statement) == [], (version, statement)
        assert newer_syntax(RELEASED_V6_COPIES) == ["UPDATE ... FROM (3.33)"] * 2
        trigger = "CREATE TRIGGER t BEFORE UPDATE OF a ON x BEGIN DELETE FROM y; END;"
        assert newer_syntax(trigger) == []
        assert newer_syntax("UPDATE OR IGNORE main.x SET a = 1 FROM y;") != []
        assert newer_syntax("UPDATE x SET a = (SELECT b FROM y) WHERE id IN (SELECT 1);") == []

    @pytest.mark.skipif(
        sqlite3.sqlite_version_info < (3, 33, 0), reason="the released form needs SQLite 3.33"
    )
    @pytest.mark.parametrize("version", [1, 2, 3, 4, 5])
    def test_the_rewritten_copies_leave_the_rows_the_released_ones_left(
        self, tmp_path, monkeypatch, version
    ):
        """Each fixture migrated with v6 as released (on an SQLite that has
        `UPDATE ... FROM`) and as it is now: every table and view the same."""
        v6 = schema._SCRIPTS[6]
        start = v6.index("UPDATE attempts SET (claim_generation")
        end = v6.index("DROP TRIGGER claims_no_delete;")
        old = v6[:start] + RELEASED_V6_COPIES.lstrip("\n") + v6[end:]
        dumps = []
        for name, script in (("now", v6), ("released", old)):
            path = released(tmp_path, version, f"{name}.db")
            monkeypatch.setitem(schema._SCRIPTS, 6, script)
            conn = connect(path)
            try:
                migrate(conn)
                dumps.append(list(conn.iterdump()))
            finally:
                conn.close()
        now, before = dumps
        assert now == before
        assert any("claim_boot" in line for line in now)
