"""The store's column vocabulary (daemon/store/schema.py ``COLUMNS``): it is
the live schema's, every loaded record reads its columns by name and says
which it leaves, records round-trip through the applier and the loaders,
and the applier refuses a field it does not know."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import attrs
import pytest

from tests.unit._store import RELEASED, Store, migrated, released
from wardd.daemon.core import changes as ch
from wardd.daemon.core.records import (
    Attempt,
    Grant,
    Neuron,
    Op,
    Outcome,
    Prog,
    Reservation,
    Tombstone,
)
from wardd.daemon.store import load, marks
from wardd.daemon.store.apply import apply
from wardd.daemon.store.attempt_reads import AttemptReads, Candidate, ClaimedCall
from wardd.daemon.store.reads import ATTEMPT_WIRE, LISTED_ATTEMPT_WIRE, PAGE_HEADROOM, Reads
from wardd.daemon.store.schema import COLUMNS
from wardd.daemon.store.writer import Tx, Writer
from wardd.protocol import AttemptState, Internal, OpState, ProgState


def live_columns(conn: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    tables = [
        name
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
            " AND name NOT LIKE 'sqlite_%'"
            " ORDER BY rowid"
        )
    ]
    return {t: tuple(r[1] for r in conn.execute(f"PRAGMA table_info({t})")) for t in tables}


@pytest.fixture
def conn(store: Store) -> sqlite3.Connection:
    return store.conn


class TestTheVocabularyIsTheSchemas:
    def test_every_table_and_column_of_a_new_database_is_named_in_order(
        self, conn: sqlite3.Connection
    ) -> None:
        """A migration that adds a table or a column fails here until
        ``COLUMNS`` names it (and then the loaders must place it: below)."""
        assert live_columns(conn) == dict(COLUMNS)

    @pytest.mark.parametrize("version", RELEASED, ids=[f"schema-v{v}" for v in RELEASED])
    def test_a_database_of_each_released_version_migrates_to_the_same_columns(
        self, tmp_path: Path, version: int
    ) -> None:
        c = migrated(released(tmp_path, version))
        try:
            assert live_columns(c) == dict(COLUMNS)
        finally:
            c.close()

    @pytest.mark.parametrize("cols", load.LOADED, ids=[c.table for c in load.LOADED])
    def test_each_loader_reads_or_leaves_every_column_of_its_table(
        self, cols: load.Columns
    ) -> None:
        """No column is read twice, and none is neither read nor left on purpose."""
        assert len(set(cols.names)) == len(cols.names)
        assert not set(cols.names) & set(cols.unread)
        assert sorted(cols.names + cols.unread) == sorted(COLUMNS[cols.table])
        assert cols.at == {name: i for i, name in enumerate(cols.names)}

    def test_the_attempt_wire_columns_are_columns(self) -> None:
        assert set(ATTEMPT_WIRE) <= set(COLUMNS["attempts"])
        joined = {*COLUMNS["attempts"], "neuron", "op", "prog", "act"}
        assert set(LISTED_ATTEMPT_WIRE) <= joined

    def test_a_loader_that_forgets_a_column_does_not_import(self) -> None:
        with pytest.raises(AssertionError, match="progs"):
            load.Columns("progs", "p", ("id", "neuron_id"))


# -- records round-trip: changes applied, then loaded by name ---------------------

NEURON = "n" * 64
PLACEMENT = {"executor": {"worker": "w0", "boot": "b0"}, "acts": ["echo"]}


def write_records(conn: sqlite3.Connection) -> None:
    """One neuron, prog, op (two attempts: one with its claim and outcome),
    and a reservation, with every loaded column away from its default."""
    changes: tuple[ch.Change, ...] = (
        ch.NewNeuron(1, NEURON),
        ch.SetNeuron(
            1,
            {
                "epoch": 3,
                "policy_version": 2,
                "placement_generation": 5,
                "placement": PLACEMENT,
                "placement_digest": "dg",
            },
        ),
        ch.NewProg(7, 1, "prog-a", 100),
        ch.SetProg(
            7,
            {"steps_used": 4, "grant_acts": ["echo"], "grant_enabled": True},
            bump_version=True,
        ),
        ch.SetProg(7, {"reservation_seq": 2}, reserved_delta=6),
        ch.NewReservation(7, "res-1", 6, 1),
        ch.NewOp(11, 1, "op-1", 7, "echo", b"\x01\x02"),
        ch.NewAttempt(
            21,
            11,
            1,
            "guarded",
            3,
            2,
            5,
            PLACEMENT,
            "dg",
            "w0",
            "b0",
            AttemptState.RUNNING,
            None,
        ),  # fmt: skip
        ch.NewClaim(21, 11, 1, 5, "dg", "w0", "b0", {"pid": 42}),
        ch.NewOutcome(21, 11, 1, AttemptState.FAILED, {"why": "x"}, "boom", "adapter"),
        ch.SetAttempt(11, 1, state=AttemptState.FAILED, evidence={"seen": True}),
        ch.NewAttempt(
            22,
            11,
            2,
            "manual",
            3,
            2,
            None,
            None,
            None,
            None,
            "b1",
            AttemptState.UNKNOWN,
            None,
        ),  # fmt: skip
        ch.AppendEvent("moved", 1, op_id=11, attempt=2, data={"k": 1}),
        ch.SetOp(11, {"attempts": 2, "state": OpState.UNKNOWN, "result_epoch": 3}),
    )
    conn.execute("BEGIN")
    apply(Tx(conn), ch.Decision(changes))
    conn.execute("COMMIT")


class TestRecordsRoundTrip:
    def test_the_op_view_loads_what_was_applied(self, conn: sqlite3.Connection) -> None:
        write_records(conn)
        view = load.op_view(conn, NEURON, "op-1", next_attempt=True)
        assert view.neuron == Neuron(1, NEURON, 3, 2, 5, PLACEMENT, "dg")
        assert view.prog == Prog(
            id=7,
            neuron_id=1,
            prog="prog-a",
            state=ProgState.ACTIVE,
            state_version=2,
            step_limit=100,
            steps_used=4,
            steps_reserved=6,
            exhausted=False,
            grant=Grant(frozenset({"echo"}), True),
            reservation_seq=2,
        )
        (seq,) = conn.execute("SELECT max(seq) FROM events").fetchone()
        assert view.op == Op(
            id=11,
            neuron_id=1,
            op="op-1",
            prog_id=7,
            act="echo",
            args=b"\x01\x02",
            state=OpState.UNKNOWN,
            attempts=2,
            cancelled=False,
            consumed=False,
            result_epoch=3,
            last_seq=seq,
        )
        assert view.attempts == (
            Attempt(
                21, 11, 1, "guarded", 3, 2, 5, "dg", "w0", "b0", AttemptState.FAILED,
                None, {"seen": True}, ever_unknown=False,
            ),
            Attempt(
                22, 11, 2, "manual", 3, 2, None, None, None, "b1", AttemptState.UNKNOWN,
                None, None, ever_unknown=True,
            ),
        )  # fmt: skip
        assert view.outcomes == {
            1: Outcome(21, AttemptState.FAILED, {"why": "x"}, "boom", "adapter")
        }
        assert view.next_attempt_id == 23
        assert load.op_view_by_id(conn, 11) == attrs.evolve(view, next_attempt_id=0)

    def test_an_op_with_its_latest_attempt_and_a_reservation_load_by_name(
        self, conn: sqlite3.Connection
    ) -> None:
        write_records(conn)
        view = load.op_view(conn, NEURON, "op-1")
        ((op, latest),) = load.open_ops_of_prog(conn, 7)
        assert (op, latest) == (view.op, view.attempts[1])
        pv = load.prog_view(conn, NEURON, "prog-a", reservation="res-1", open_counts=True)
        assert pv.reservation == Reservation(1, 7, "res-1", 6, "open", None, 1)
        assert (pv.open_ops, pv.open_attempts) == (1, 1)
        assert load.open_reservations(conn, 7) == ((1, 6),)
        assert load.op_attempts(conn, 11).attempts == view.attempts

    def test_an_attempt_left_by_an_earlier_boot_loads_with_its_neuron_and_claim(
        self, conn: sqlite3.Connection
    ) -> None:
        write_records(conn)
        conn.execute("BEGIN")
        # a running attempt is found through its op, whose latest it is (schema 6)
        running = (
            ch.SetAttempt(11, 1, state=AttemptState.RUNNING),
            ch.SetOp(11, {"attempts": 1, "state": OpState.RUNNING}),
        )
        apply(Tx(conn), ch.Decision(running))
        conn.execute("COMMIT")
        (o,) = marks.open_attempts(conn, "b-now")
        assert (o.neuron, o.op_id, o.id, o.attempt, o.state, o.claimed) == (
            NEURON,
            11,
            21,
            1,
            AttemptState.RUNNING,
            True,
        )
        assert (o.op, o.act, o.op_attempts, o.op_state, o.cancelled) == (
            "op-1",
            "echo",
            1,
            OpState.RUNNING,
            False,
        )
        (last_seq,) = conn.execute("SELECT last_seq FROM operations WHERE id = 11").fetchone()
        assert o.last_seq == last_seq

    def test_a_missing_neuron_or_op_loads_as_none(self, conn: sqlite3.Connection) -> None:
        write_records(conn)
        assert load.op_view(conn, "m" * 64, "op-1").neuron is None
        view = load.op_view(conn, NEURON, "op-2")
        assert (view.neuron is not None, view.op, view.prog, view.tombstone) == (
            True,
            None,
            None,
            None,
        )

    def test_a_tombstone_loads_by_name(self, conn: sqlite3.Connection) -> None:
        write_records(conn)
        # a tombstone only for an op that ended (the schema's trigger): end it first
        conn.execute("BEGIN")
        apply(
            Tx(conn),
            ch.Decision(
                (
                    ch.SetAttempt(11, 2, state=AttemptState.FAILED),
                    ch.AppendEvent("ended", 1, op_id=11, attempt=2),
                    ch.SetOp(11, {"cancelled": True, "state": OpState.CANCELLED}),
                )
            ),
        )
        conn.execute(
            "INSERT INTO tombstones(id, neuron_id, op, prog_id, act, args_digest, state,"
            " ended_at, pruned_at) VALUES (11, 1, 'op-1', 7, 'echo', x'ab', 'cancelled', 1, 2)"
        )
        conn.execute("DELETE FROM attempts")  # with their claims and outcomes (schema 6)
        conn.execute("DELETE FROM events WHERE op_id = 11")
        conn.execute("DELETE FROM operations")
        conn.execute("COMMIT")
        view = load.op_view(conn, NEURON, "op-1")
        assert view.op is None
        assert view.tombstone == Tombstone("op-1", 7, "echo", b"\xab", OpState.CANCELLED)
        assert view.prog is not None and view.prog.id == 7


# -- the applier refuses what it does not know --------------------------------------


class TestApplyRefusesAnUnknownField:
    @pytest.mark.parametrize(
        ("change", "kind"),
        [
            (ch.SetOp(11, {"attempts": 2, "colour": "red"}), "SetOp"),
            (ch.SetNeuron(1, {"epoch": 9, "colour": "red"}), "SetNeuron"),
            (ch.SetProg(7, {"steps_used": 9, "colour": "red"}), "SetProg"),
        ],
        ids=["op", "neuron", "prog"],
    )
    def test_a_set_change_naming_no_column_is_internal_and_writes_nothing(
        self, store: Store, change: ch.Change, kind: str
    ) -> None:
        """The whole unit is undone (the writer rolls back a refusal), and the
        error names the change and the field."""
        c = store.conn
        write_records(c)
        before = [c.execute(f"SELECT * FROM {t}").fetchall() for t in COLUMNS]
        w = Writer(c, on_fatal=lambda why: None)
        w.start()
        try:
            with pytest.raises(Internal, match=f"'colour' of a {kind}"):
                w.call(lambda tx: apply(tx, ch.Decision((ch.SetOp(11, {"attempts": 3}), change))))
        finally:
            w.stop()
        assert [c.execute(f"SELECT * FROM {t}").fetchall() for t in COLUMNS] == before

    def test_consumed_is_known_and_stored_as_the_op_state(self, conn: sqlite3.Connection) -> None:
        write_records(conn)
        conn.execute("BEGIN")
        apply(Tx(conn), ch.Decision((ch.SetOp(11, {"consumed": True, "state": OpState.CONSUMED}),)))
        conn.execute("COMMIT")
        op = load.op_view(conn, NEURON, "op-1").op
        assert op is not None and (op.consumed, op.state) == (True, OpState.CONSUMED)


# -- the reads' wire forms: one renderer each, keys in the contract's order -----------


def reads_of(store: Store, max_frame: int = 1 << 20) -> Reads:
    write_records(store.conn)
    return Reads(store.reader(), max_frame)


class TestWireForms:
    def test_an_attempt_shows_the_same_columns_in_get_operation_and_list_attempts(
        self, store: Store
    ) -> None:
        reads = reads_of(store)
        first, second = reads.get_operation(NEURON, "op-1")["attempts"]
        assert list(first) == [*ATTEMPT_WIRE, "claimed", "evidence", "outcome"]
        assert first["outcome"] == {
            "status": "failed",
            "source": "adapter",
            "value": {"why": "x"},
            "error": "boom",
        }
        assert list(second) == [*ATTEMPT_WIRE, "claimed"]
        (listed,) = reads.list_attempts("unknown", None, 10)["attempts"]
        assert list(listed) == [*LISTED_ATTEMPT_WIRE, "claimed"]
        assert {k: listed[k] for k in ("attempt", "kind", "state", "boot", "claimed")} == {
            k: second[k] for k in ("attempt", "kind", "state", "boot", "claimed")
        }
        assert (listed["neuron"], listed["op"], listed["prog"], listed["act"]) == (
            NEURON,
            "op-1",
            "prog-a",
            "echo",
        )

    def test_a_grant_reads_the_same_in_get_neuron_and_get_prog(self, store: Store) -> None:
        reads = reads_of(store)
        grant = {"acts": ["echo"], "enabled": True}
        assert reads.get_neuron(NEURON)["grants"] == {"prog-a": grant}
        assert reads.get_prog(NEURON, "prog-a")["grant"] == grant

    def test_a_page_ends_early_at_the_frame_bound_and_names_the_next(self, store: Store) -> None:
        """The frame bound leaves room for one record a page (the first is
        always sent); paging on from ``next`` reads every record once."""
        c = store.conn
        write_records(c)
        c.execute("BEGIN")
        more = [ch.AppendEvent("noted", 1, op_id=11, data={"i": i}) for i in range(5)]
        apply(Tx(c), ch.Decision(tuple(more)))
        c.execute("COMMIT")
        reads = Reads(store.reader(), PAGE_HEADROOM + 60)
        seen: list[int] = []
        after = None
        while True:
            page = reads.history(NEURON, "op-1", after, 100)
            assert len(page["records"]) == 1
            seen += [r["seq"] for r in page["records"]]
            if "next" not in page:
                break
            after = page["next"]
            assert after == seen[-1]
        assert seen == list(range(1, 7))
        wide = Reads(store.reader(), 1 << 20)
        page = wide.history(NEURON, "op-1", None, 2)
        assert ([r["seq"] for r in page["records"]], page["next"]) == ([1, 2], 2)
        assert "next" not in wide.history(NEURON, "op-1", 2, 4)

    def test_recovery_reads_name_their_columns(self, store: Store) -> None:
        reads = AttemptReads(reads_of(store).conn)
        assert reads.receipt_candidates(["echo"], ("unknown",)) == []  # manual: not guarded
        c = store.conn
        c.execute("BEGIN")
        apply(Tx(c), ch.Decision((ch.SetAttempt(11, 1, state=AttemptState.UNKNOWN),)))
        c.execute("COMMIT")
        assert reads.receipt_candidates(["echo"], ("unknown",)) == [
            Candidate(21, NEURON, "op-1", 1, "echo", True, {"pid": 42})
        ]
        assert reads.claimed_calls_of_earlier_boots("b-now") == [
            ClaimedCall(21, NEURON, "op-1", 1, "b0", "echo")
        ]
        assert reads.claimed_calls_of_earlier_boots("b0") == []
