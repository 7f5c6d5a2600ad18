"""Retention (contract §3.9): finished ops are pruned to tombstones, which keep
idempotency for ever; nothing in doubt is ever pruned; the space goes back.

Every daemon here runs with ``retention_s = 1`` and ``prune_interval_s = 1``
(or keeps everything, ``retention_s = 0``, to build a backlog first), and
every wait is on ``status.db.pruned_ops`` or another observable, never a sleep.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests._poll import wait_for
from tests.daemon.harness import NETWORK, Actor, Background, Env, code_of
from wardd.client import Client, Neuron, Session
from wardd.daemon.store.counters import Counters
from wardd.daemon.store.schema import SCHEMA_VERSION
from wardd.protocol import WarddError

FAST = {"retention_s": 1, "prune_interval_s": 1}
DATA = Path(__file__).parent.parent / "data"


def status(who: Actor | Client) -> dict:
    return (who.client if isinstance(who, Actor) else who).call("status", {})


def pruned_ops(who: Actor | Client) -> int:
    return int(status(who)["db"]["pruned_ops"])


def wait_pruned(who: Actor | Client, n: int, timeout: float = 30.0) -> None:
    wait_for(lambda: pruned_ops(who) >= n, timeout, f"{n} pruned ops")


def cycle(actor: Actor, op: str, act: str = "echo", args: bytes = b"a" * 64) -> None:
    """submit, invoke, consume: one finished op."""
    actor.submit(op, act=act, args=args)
    assert actor.invoke(op)["status"] == "succeeded"
    actor.call("consume", {"op": op})


def read_db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def check_whole_or_tombstone(path: Path) -> dict[str, int]:
    """The database is sound and every op is either whole or a tombstone;
    returns the number of ops and tombstones."""
    db = sqlite3.connect(path)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        q = lambda sql: db.execute(sql).fetchall()  # noqa: E731
        # a tombstone holds nothing else
        assert q("SELECT t.id FROM tombstones t JOIN operations o ON o.id = t.id") == []
        assert q("SELECT t.id FROM tombstones t JOIN events e ON e.op_id = t.id") == []
        assert q("SELECT t.id FROM tombstones t JOIN attempts a ON a.op_id = t.id") == []
        assert (
            q("SELECT attempt_id FROM claims WHERE attempt_id NOT IN (SELECT id FROM attempts)")
            == []
        )
        assert (
            q("SELECT attempt_id FROM outcomes WHERE attempt_id NOT IN (SELECT id FROM attempts)")
            == []
        )
        # a live op has its first record and every attempt it counts
        assert (
            q(
                "SELECT o.id FROM operations o WHERE NOT EXISTS"
                " (SELECT 1 FROM events e WHERE e.op_id = o.id AND e.kind = 'submitted')"
            )
            == []
        )
        assert (
            q(
                "SELECT o.id FROM operations o WHERE o.attempts !="
                " (SELECT count(*) FROM attempts a WHERE a.op_id = o.id)"
            )
            == []
        )
        # exact counts as a start seeds them (schema 7: the counts' snapshot
        # and the catch-up over the ops written after it)
        seeded = Counters()
        seeded.seed(db)
        counts = {s: n for s, n in seeded.figures.operations.items() if n}
        real: dict[str, int] = {}
        for (state,) in q("SELECT state FROM operations UNION ALL SELECT state FROM tombstones"):
            real[state] = real.get(state, 0) + 1
        assert counts == real
        (stats,) = q("SELECT pruned_ops FROM prune_stats")
        (tombs,) = q("SELECT count(*) FROM tombstones")
        assert stats == tombs
        (ops,) = q("SELECT count(*) FROM operations")
        return {"operations": ops[0], "tombstones": tombs[0]}
    finally:
        db.close()


class TestPruning:
    def test_finished_ops_are_pruned_to_tombstones_and_read_as_pruned(self, make_daemon):
        """A consumed and a cancelled op lose args, attempts, claims, outcomes and
        records; reads answer from the tombstone; status still counts them."""
        d = make_daemon(**FAST)
        a = Actor(d)
        st = status(a)["db"]
        assert (st["pruned_ops"], st["last_pruned_at"]) == (0, None)
        cycle(a, "done")
        a.submit("dropped")
        a.call("cancel", {"op": "dropped"})
        ended = a.history("done")[-1]["at"]  # the consumed record
        wait_pruned(a, 2)
        st = status(a)
        assert st["operations"] == {"consumed": 1, "cancelled": 1}
        assert st["db"]["last_pruned_at"] >= ended
        op = a.op("done")
        assert op == {
            "op": "done",
            "prog": "prog-a",
            "act": "echo",
            "state": "consumed",
            "pruned": True,
            "ended_at": ended,
            "pruned_at": op["pruned_at"],
        }
        assert op["pruned_at"] > ended and a.op("dropped")["state"] == "cancelled"
        assert a.read("history", {"neuron": a.id, "op": "done"}) == {"records": [], "pruned": True}
        listed = a.read("list_operations", {"neuron": a.id})["operations"]
        assert [(o["op"], o["state"], o["attempts"], o.get("pruned")) for o in listed] == [
            ("done", "consumed", 0, True),
            ("dropped", "cancelled", 0, True),
        ]
        by_state = a.read("list_operations", {"neuron": a.id, "state": "cancelled"})
        assert [o["op"] for o in by_state["operations"]] == ["dropped"]
        assert a.read("list_operations", {"neuron": a.id, "state": "unknown"})["operations"] == []
        db = read_db(d.env.database)
        for table in ("attempts", "claims", "outcomes"):
            assert db.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
        assert db.execute("SELECT count(*) FROM events WHERE op_id IS NOT NULL").fetchone() == (0,)
        db.close()

    def test_unknown_retained_running_and_pending_ops_are_never_pruned(self, make_daemon):
        """Only an op consumed or cancelled with no attempt in doubt is pruned; a
        cancelled op ends when its running attempt ends, or its unknown one is reconciled."""
        d = make_daemon(**FAST, workers=2)
        a = Actor(d, acts=("echo", "gated"))
        a.submit("retained")
        a.invoke("retained")
        a.submit("pending")
        a.submit("manual")
        a.call("manual_take", _take("manual", a))
        a.submit("manual-cancelled")
        a.call("manual_take", _take("manual-cancelled", a))
        a.call("cancel", {"op": "manual-cancelled"})
        a.submit("running", act="gated")
        running = Background(a.invoke, "running", 1, d.connect())
        wait_for(lambda: d.env.started_marker("running").exists(), what="the gated call")
        a.call("cancel", {"op": "running"})
        # the marker (another neuron, on the other worker): once it is pruned, a
        # look has passed every op that ended before it, oldest first
        b = Actor(d, worker=1)
        cycle(b, "marker")
        wait_pruned(a, 1)
        for op in ("retained", "pending", "manual", "manual-cancelled", "running"):
            assert "pruned" not in a.op(op), op
        assert pruned_ops(a) == 1 and b.op("marker")["pruned"] is True
        # the running call ends: its cancelled op has ended then, not at the cancel
        cancelled_at = a.history("running")[-1]["at"]
        d.env.open_gate("running")
        assert running.result()["status"] == "succeeded"
        wait_pruned(a, 2)
        tomb = a.op("running")
        assert tomb["pruned"] is True and tomb["ended_at"] > cancelled_at
        # an unknown attempt is never pruned, however long its op has been cancelled
        assert "pruned" not in a.op("manual-cancelled")
        a.call(
            "reconcile",
            {"op": "manual-cancelled", "attempt": 1, "outcome": {"status": "not_executed"}},
        )
        wait_pruned(a, 3)
        assert a.op("manual-cancelled")["state"] == "cancelled"
        for op in ("retained", "pending", "manual"):
            assert "pruned" not in a.op(op), op
        assert status(a)["unknown_attempts"] == 1

    def test_a_pruned_op_is_already_or_op_conflict_and_never_runs_again(self, make_daemon):
        """submit of a pruned op answers from its tombstone; every other write
        naming it is terminal; its act never runs a second time."""
        d = make_daemon(**FAST)
        a = Actor(d, acts=("echo", "ledger"))
        cycle(a, "once", act="ledger", args=b"pay 10")
        wait_pruned(a, 1)
        again = a.submit("once", act="ledger", args=b"pay 10")
        assert again == {"op": "once", "state": "consumed", "already": True, "pruned": True}
        assert code_of(a.submit, "once", "ledger", b"pay 11").code == "op_conflict"
        assert code_of(a.submit, "once", "echo", b"pay 10").code == "op_conflict"
        params = {
            "prepare": a.prepare_params("once"),
            "invoke": a.prepare_params("once"),
            "manual_take": _take("once", a),
            "cancel": {"op": "once"},
            "consume": {"op": "once"},
            "rebind": {"op": "once"},
            "reconcile": {"op": "once", "attempt": 1, "outcome": {"status": "failed"}},
            "abort": {"op": "once", "attempt": 1},
        }
        for method, p in params.items():
            err = code_of(a.call, method, p)
            assert (err.code, err.data) == ("terminal", {"state": "consumed", "pruned": True}), (
                method
            )
        # the bundled client reads the attempts it should expect: none are left
        with pytest.raises(WarddError) as err:
            Session(a.client, a.neuron).invoke("once")
        assert err.value.code == "terminal"
        # a management write still needs the grant first (contract §3.4 order)
        a.grant(["echo", "ledger"], enabled=False)
        assert code_of(a.call, "cancel", {"op": "once"}).code == "grant_disabled"
        assert code_of(a.call, "abort", {"op": "once", "attempt": 1}).code == "grant_disabled"
        assert code_of(a.call, "prepare", a.prepare_params("once")).code == "terminal"
        assert len(d.env.ledger_lines()) == 1
        assert status(a)["operations"] == {"consumed": 1}
        # a new op never takes the pruned op's place in the listing
        a.grant(["echo", "ledger"])
        a.submit("next")
        listed = a.read("list_operations", {"neuron": a.id, "limit": 1})
        assert [o["op"] for o in listed["operations"]] == ["once"]
        page2 = a.read("list_operations", {"neuron": a.id, "after": listed["next"]})
        assert [o["op"] for o in page2["operations"]] == ["next"]

    def test_the_database_file_shrinks_after_pruning(self, make_daemon):
        """The pruned ops' pages go back to the file system (incremental vacuum,
        checkpoint): the file ends far smaller than it was with them."""
        env = Env(retention_s=0, prune_interval_s=1)
        d = make_daemon(env)
        a = Actor(d)
        n = 120
        for i in range(n):
            cycle(a, f"big{i}", args=bytes([i % 256]) * 16384)
        assert pruned_ops(a) == 0  # retention_s = 0 keeps every finished op
        assert d.terminate() == 0
        full = env.database.stat().st_size
        assert full > n * 2 * 16384  # args and the echoed result
        env.top.update(FAST)
        env.write_config()
        d.start()
        a.client = d.connect()
        wait_pruned(a, n)
        wait_for(
            lambda: status(a)["db"]["size"] < full // 4,
            what=f"the database and its WAL to shrink below {full // 4} bytes (was {full})",
        )
        assert env.database.stat().st_size < full // 4

    def test_a_sigkill_during_pruning_leaves_every_op_whole_or_a_tombstone(self, make_daemon):
        """A real SIGKILL while batches are being pruned: the database passes
        integrity_check, every op is whole or a tombstone, the counts are exact,
        and the next start finishes the pruning."""
        env = Env(retention_s=0, prune_interval_s=1)
        d = make_daemon(env)
        a = Actor(d)
        n = 400
        for i in range(n):
            cycle(a, f"k{i}")
        assert pruned_ops(a) == 0  # retention_s = 0 keeps every finished op
        assert d.terminate() == 0
        env.top.update(FAST)
        env.write_config()
        mid = 0
        for _ in range(5):
            d.start()
            a.client = d.connect()
            before = pruned_ops(a)
            if before == n:
                break
            _until_pruned_more_than(a.client, before)
            d.kill()
            seen = check_whole_or_tombstone(env.database)
            assert seen["operations"] + seen["tombstones"] == n
            mid += 0 < seen["tombstones"] < n
        assert mid >= 1, "no kill landed while pruning was under way"
        if d.proc is None or d.proc.poll() is not None:
            d.start()
            a.client = d.connect()
        wait_pruned(a, n)
        assert status(a)["operations"] == {"consumed": n}
        assert d.terminate() == 0
        assert check_whole_or_tombstone(env.database) == {"operations": 0, "tombstones": n}


def _until_pruned_more_than(c: Client, before: int, timeout: float = 30.0) -> None:
    """Poll status back to back (no pause: the kill must land while batches
    are still being pruned) until a batch has committed."""
    wait_for(lambda: pruned_ops(c) > before, timeout, "a prune batch to commit", every=0)


def _on_fixture(make_daemon: Any, version: int, **config: Any) -> tuple[Env, Any]:
    """A daemon started on a copy of tests/data/schema-v<version>.db."""
    env = Env(**config)
    env.database.parent.mkdir(parents=True)
    shutil.copy(DATA / f"schema-v{version}.db", env.database)
    return env, make_daemon(env)


def _take(op: str, a: Actor) -> dict:
    return {"op": op, "expected_attempt": 1, "expected_epoch": a.root()["epoch"]}


class TestMigration:
    @pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 6])
    def test_an_earlier_database_gets_incremental_vacuum_and_stays_sound(
        self, make_daemon, version
    ):
        """Each fixture of an earlier schema migrates to this one, with
        auto_vacuum = INCREMENTAL (a VACUUM under the lock) and nothing lost."""
        src = sqlite3.connect(DATA / f"schema-v{version}.db")
        assert src.execute("PRAGMA auto_vacuum").fetchone() == ((2,) if version >= 5 else (0,))
        ops_before = src.execute("SELECT count(*) FROM operations").fetchone()
        events_before = src.execute("SELECT count(*) FROM events").fetchone()[0]
        src.close()
        env, d = _on_fixture(make_daemon, version)
        with d.connect() as c:
            assert c.call("status")["db"]["schema_version"] == SCHEMA_VERSION == 7
        assert d.terminate() == 0
        db = sqlite3.connect(env.database)
        assert db.execute("PRAGMA auto_vacuum").fetchone() == (2,)
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("SELECT count(*) FROM operations").fetchone() == ops_before
        # recovery appended its marks; nothing was removed
        assert db.execute("SELECT count(*) FROM events").fetchone()[0] > events_before
        db.close()

    def test_v5_database_is_served_whole_by_schema_6(self, make_daemon):
        """schema-v5.db (a retained op, three pruned ones, one attempt prepared
        and one running when it was killed): after the v6 migration the daemon
        answers for every op as before, its records along their chains, and
        dispatches and prunes new ops."""
        src = sqlite3.connect(DATA / "schema-v5.db")
        kinds = {
            op: [
                k
                for (k,) in src.execute(
                    "SELECT e.kind FROM events e JOIN operations o ON o.id = e.op_id"
                    " WHERE o.op = ? ORDER BY e.seq",
                    (op,),
                )
            ]
            for op in ("done", "prepared", "running")
        }
        src.close()
        _env, d = _on_fixture(make_daemon, 5, **FAST)
        neuron = Neuron.load(DATA / "schema-v5.key")
        c = d.connect()
        a = Actor(d, neuron=neuron, acts=("echo", "ledger", "gated"))

        def op(name: str) -> dict:
            return c.call("get_operation", {"neuron": neuron.id, "op": name})

        for name in ("pruned", "cancelled", "cancelled-ran"):
            assert op(name).get("pruned") is True, name
            assert a.history(name) == []
        done = op("done")
        assert (done["state"], done["result"]["value"]) == ("retained", b"v1")
        assert [r["kind"] for r in a.history("done")] == kinds["done"]
        for name in ("prepared", "running"):  # recovery appended its records to theirs
            got = [r["kind"] for r in a.history(name)]
            assert got[: len(kinds[name])] == kinds[name] and len(got) > len(kinds[name]), name
        assert op("running")["state"] == "unknown"
        assert a.call("consume", {"op": "done"})["result"]["value"] == b"v1"
        a.submit("after", args=b"new")
        assert a.invoke("after")["status"] == "succeeded"
        assert [r["kind"] for r in a.history("after")] == [
            "submitted",
            "prepared",
            "claimed",
            "outcome",
        ]
        a.call("consume", {"op": "after"})
        wait_pruned(c, 5)
        assert op("after").get("pruned") is True and op("done").get("pruned") is True
        assert (
            a.call("submit", {"prog": "prog-a", "op": "pruned", "act": "echo", "args": b"p1"})[
                "already"
            ]
            is True
        )

    def test_v4_ops_are_dated_from_their_records_and_pruned_after_migration(self, make_daemon):
        """schema-v4.db: an op ended with the record that ended it (a cancelled op
        whose attempt ran on, with that attempt's outcome); one with an unknown
        attempt has not ended and is never pruned."""
        src = sqlite3.connect(DATA / "schema-v4.db")
        last = dict(
            src.execute(
                "SELECT o.op, e.at FROM operations o JOIN events e ON e.seq = o.last_seq"
            ).fetchall()
        )
        kinds = [
            k
            for (k,) in src.execute(
                "SELECT e.kind FROM events e JOIN operations o ON o.id = e.op_id"
                " WHERE o.op = 'cancelled-ran' ORDER BY e.seq"
            )
        ]
        src.close()
        assert kinds[-2:] == ["cancelled", "outcome"]  # the fixture is what it says
        _env, d = _on_fixture(make_daemon, 4, **FAST)
        neuron = Neuron.load(DATA / "schema-v4.key")
        c = d.connect()

        def op(name: str) -> dict:
            return c.call("get_operation", {"neuron": neuron.id, "op": name})

        wait_pruned(c, 3)
        for name in ("consumed", "cancelled", "cancelled-ran"):
            tomb = op(name)
            assert (tomb.get("pruned"), tomb["ended_at"]) == (True, last[name]), name
        for name in ("cancelled-unknown", "done", "prepared", "running"):
            assert "pruned" not in op(name), name
        assert op("cancelled-unknown")["attempts"][0]["state"] == "unknown"
        submit = {"prog": "prog-a", "op": "consumed", "act": "echo", "args": b"c1"}
        assert c.call("submit", neuron.sign("submit", submit, NETWORK))["already"] is True
        assert pruned_ops(c) == 3


class TestConfig:
    @pytest.mark.parametrize(
        "text,why",
        [
            ("retention_s = -1\n", "between 0 and"),
            ('retention_s = "30d"\n', "must be an integer"),
            ("retention_s = 1.5\n", "must be an integer"),
            ("prune_interval_s = 0\n", "between 1 and"),
            ("prune_interval_s = true\n", "must be an integer"),
        ],
    )
    def test_check_config_refuses_a_bad_retention_key(self, tmp_path, text, why):
        """check-config names the file, the key and the reason in one line."""
        p = tmp_path / "bad.toml"
        p.write_text(text)
        out = subprocess.run(
            [sys.executable, "-m", "wardd.daemon.cli", "check-config", str(p)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        key = text.split(" ", 1)[0]
        line = out.stderr.strip()
        assert out.returncode == 78 and "\n" not in line
        assert f"{p}: {key}: " in line and why in line, line

    def test_defaults_keep_thirty_days_and_look_every_minute(self):
        """With neither key, finished ops are kept 30 days, looked at every 60 s."""
        from wardd.daemon.config import parse_config

        c = parse_config({}, "<t>")
        assert (c.retention_s, c.prune_interval_s) == (2592000, 60)
        c = parse_config({"retention_s": 0, "prune_interval_s": 1}, "<t>")
        assert (c.retention_s, c.prune_interval_s) == (0, 1)


class TestSchemaGuards:
    """The v5 triggers hold whatever the code does (a copy of schema-v4.db,
    migrated in process under no daemon)."""

    @pytest.fixture
    def db(self, tmp_path):
        from wardd.daemon.store.schema import migrate

        path = tmp_path / "wardd.db"
        shutil.copy(DATA / "schema-v4.db", path)
        conn = sqlite3.connect(path, isolation_level=None)
        migrate(conn)
        yield conn
        conn.close()

    def _id(self, db, op):
        return db.execute("SELECT id FROM operations WHERE op = ?", (op,)).fetchone()[0]

    def test_records_of_an_op_without_a_tombstone_cannot_be_deleted(self, db):
        """Event records, attempts, claims, outcomes and the op row of a live op stay."""
        op = self._id(db, "consumed")
        for sql in (
            "DELETE FROM events WHERE op_id = ?",
            "DELETE FROM outcomes WHERE attempt_id IN (SELECT id FROM attempts WHERE op_id = ?)",
            "DELETE FROM claims WHERE attempt_id IN (SELECT id FROM attempts WHERE op_id = ?)",
            "DELETE FROM attempts WHERE op_id = ?",
            "DELETE FROM operations WHERE id = ?",
        ):
            with pytest.raises(sqlite3.IntegrityError):
                db.execute(sql, (op,))
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute("DELETE FROM events WHERE op_id IS NULL")

    def test_an_op_with_an_unknown_attempt_gets_no_tombstone(self, db):
        """A cancelled op whose manual attempt is unknown has not ended: no
        tombstone, so none of its records can go; an ended op can be pruned once."""
        from wardd.daemon.store.prune import prune_op

        unknown = self._id(db, "cancelled-unknown")
        assert db.execute(
            "SELECT ended_at FROM operations WHERE id = ?", (unknown,)
        ).fetchone() == (None,)
        row = db.execute(
            "SELECT neuron_id, op, prog_id, act, state FROM operations WHERE id = ?", (unknown,)
        ).fetchone()
        with pytest.raises(sqlite3.IntegrityError, match="only an op that has ended"):
            db.execute(
                "INSERT INTO tombstones(id, neuron_id, op, prog_id, act, args_digest, state,"
                " ended_at, pruned_at) VALUES (?,?,?,?,?, x'00', ?, 0, 0)",
                (unknown, *row),
            )
        assert prune_op(db, unknown, 0) is False
        done = self._id(db, "consumed")
        assert prune_op(db, done, 0) is True
        with pytest.raises(sqlite3.IntegrityError, match="kept for ever"):
            db.execute("DELETE FROM tombstones")
        with pytest.raises(sqlite3.IntegrityError, match="never comes back"):
            db.execute(
                "INSERT INTO operations(neuron_id, op, prog_id, act, args, state)"
                " SELECT neuron_id, op, prog_id, act, x'', 'pending' FROM tombstones"
            )


class TestIdsAreNeverReused:
    """A pruned op's attempt ids and event seqs are never handed out again,
    so a stale token, an expiry or a call of a pruned attempt can never name
    another op's (found by an outside review)."""

    def test_a_stale_token_of_a_pruned_op_never_touches_the_next_op(self, make_daemon):
        """Prepare x, cancel it, let it be pruned, prepare y on the same
        connection: x's token is invalid, y's attempt is untouched and y's
        own token runs it once."""
        d = make_daemon(retention_s=1, prune_interval_s=1, token_ttl_s=60)
        a = Actor(d, acts=("ledger",))
        a.submit("x", "ledger", b"x")
        tx, _ = a.prepare("x")
        a.call("cancel", {"op": "x"})
        wait_pruned(a, 1)
        a.submit("y", "ledger", b"y")
        ty, _ = a.prepare("y")
        assert ty != tx
        err = code_of(a.execute, tx)
        assert err.code == "token_invalid"
        assert a.op("y")["attempts"][0]["state"] == "prepared"
        assert a.execute(ty)["status"] == "succeeded"
        assert [line.split("\t")[0] for line in d.env.ledger_lines()] == [f"{a.id}/y/1"]

    def test_an_expiry_of_a_pruned_ops_token_never_voids_the_next_op(self, make_daemon):
        """x's token expires after x was pruned and y prepared: y's attempt stays prepared."""
        d = make_daemon(retention_s=1, prune_interval_s=1, token_ttl_s=4)
        a = Actor(d, acts=("echo",))
        a.submit("x", "echo", b"x")
        a.prepare("x")
        a.call("cancel", {"op": "x"})
        wait_pruned(a, 1)
        a.submit("y", "echo", b"y")
        ty, _ = a.prepare("y", client=d.connect())
        wait_for(lambda: a.read("status")["tokens"] == 1, timeout=30, what="x's token to expire")
        assert a.op("y")["attempts"][0]["state"] == "prepared"
        assert [r["kind"] for r in a.history("y")] == ["submitted", "prepared"]

    def test_seqs_only_grow_across_a_prune(self, make_daemon):
        """Event seqs after a prune are above every seq the pruned op held."""
        d = make_daemon(retention_s=1, prune_interval_s=1)
        a = Actor(d, acts=("echo",))
        cycle(a, "x")
        top = max(r["seq"] for r in a.history("x"))
        wait_pruned(a, 1)
        a.submit("y", "echo", b"y")
        assert min(r["seq"] for r in a.history("y")) > top
