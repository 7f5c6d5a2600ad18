"""In-process tests of the daemon's core pieces: tokens, the ward guard, the writer."""

from __future__ import annotations

import concurrent.futures
import copy
import pickle
import sqlite3
import subprocess
import sys
import threading
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import wardd.daemon
from tests.unit._refs import attempt_ref
from wardd.daemon import cli, config
from wardd.daemon.core.records import AttemptRef
from wardd.daemon.dispatch.guard import GuardTable
from wardd.daemon.dispatch.tokens import DeadHandle, DispatchToken, TokenRegistry
from wardd.daemon.life import app
from wardd.daemon.store.writer import Writer, connect
from wardd.protocol import BadRequest, Internal, TokenInvalid, TokenVoid

REF = attempt_ref(1)


class TestPublicApi:
    def test_the_public_surface_is_pinned(self):
        """`wardd.daemon.__all__` is exactly the public names, each the object its
        module defines: changing the surface is a deliberate edit here."""
        assert sorted(wardd.daemon.__all__) == [
            "Config", "ConfigError", "Daemon", "VERSION",
            "load_config", "main", "parse_config",
        ]  # fmt: skip
        home = {"Daemon": app, "VERSION": app, "main": cli}
        for name in wardd.daemon.__all__:
            assert getattr(wardd.daemon, name) is getattr(home.get(name, config), name), name
        assert set(wardd.daemon.__all__) <= set(dir(wardd.daemon))
        with pytest.raises(AttributeError):
            wardd.daemon.Writer  # noqa: B018 - internal, never re-exported

    def test_importing_the_package_loads_none_of_the_daemon(self):
        """`import wardd.daemon` loads neither the daemon nor trio, so the `wardd`
        command can take its signals over before that (names load on first use)."""
        code = (
            "import sys, wardd.daemon; "
            "print(sorted(m for m in ('trio', 'wardd.daemon.life.app', 'wardd.daemon.config')"
            " if m in sys.modules))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        assert out.strip() == "[]"


def take(reg: TokenRegistry, handle: bytes, conn_id: int) -> AttemptRef:
    """What ``execute`` does with a handle: lookup, then consume (a dead one is refused)."""
    token = reg.lookup(handle, conn_id)
    if isinstance(token, DeadHandle):
        raise TokenInvalid("the token was already used")
    return reg.consume(handle, token)


class TestTokens:
    def test_a_token_cannot_be_copied_or_pickled(self):
        """contract §2: copy, deepcopy and pickle raise."""
        t = DispatchToken(1, REF, 0.0)
        for fn in (copy.copy, copy.deepcopy, pickle.dumps):
            with pytest.raises(TypeError):
                fn(t)

    def test_a_token_is_consumed_once(self):
        t = DispatchToken(1, REF, 0.0)
        assert t.consume() is REF
        with pytest.raises(TokenInvalid):
            t.consume()

    def test_repr_shows_no_handle(self):
        reg = TokenRegistry()
        handle, token = reg.issue(1, REF, 0.0)
        assert handle.hex() not in repr(token) and str(handle) not in repr(token)

    def test_foreign_connection_is_invalid_and_does_not_consume(self):
        reg = TokenRegistry()
        handle, _ = reg.issue(1, REF, 0.0)
        with pytest.raises(TokenInvalid):
            take(reg, handle, 2)
        assert take(reg, handle, 1) is REF
        with pytest.raises(TokenInvalid):
            take(reg, handle, 1)

    def test_expired_token_is_void_with_its_reason(self):
        reg = TokenRegistry()
        handle, _ = reg.issue(1, REF, 0.0)
        assert reg.expire(handle).ref is REF
        assert reg.expire(handle) is None
        with pytest.raises(TokenVoid) as ei:
            take(reg, handle, 1)
        assert ei.value.data == {"reason": "token_expired"}
        assert reg.drop_connection(1) == []  # already void: nothing more to drop

    def test_dropping_a_connection_returns_its_live_tokens(self):
        reg = TokenRegistry()
        h1, _ = reg.issue(1, REF, 0.0)
        reg.issue(2, REF, 0.0)
        assert reg.drop_connection(1) == [REF]
        with pytest.raises(TokenInvalid):
            take(reg, h1, 1)
        assert len(reg) == 1

    def test_dead_tokens_leave_nothing_behind(self):
        """Used, expired and dropped tokens hold no memory; a dead handle is
        still recognised on its own connection, and only there."""
        reg = TokenRegistry()
        used, _ = reg.issue(1, REF, 0.0)
        take(reg, used, 1)
        ref2 = attrs.evolve(REF, attempt_id=2)
        expired, _ = reg.issue(1, ref2, 0.0)
        assert reg.expire(expired) is not None
        assert reg.held() == 1  # until its void is durable
        reg.void_written(expired)
        reg.issue(2, attrs.evolve(REF, attempt_id=3), 0.0)
        assert reg.drop_connection(2)
        assert reg.held() == 0 and len(reg) == 0 and not reg._by_conn
        assert reg.lookup(used, 1) == DeadHandle(1)
        assert reg.lookup(expired, 1) == DeadHandle(2)
        with pytest.raises(TokenInvalid):
            reg.lookup(used, 2)
        forged = bytes(32)
        with pytest.raises(TokenInvalid):
            reg.lookup(forged, 1)

    def test_handles_are_unlinkable_to_their_attempts(self):
        """Two handles of consecutive attempts share no visible structure."""
        reg = TokenRegistry()
        h1, _ = reg.issue(1, REF, 0.0)
        h2, _ = reg.issue(1, attrs.evolve(REF, attempt_id=2), 0.0)
        assert len(h1) == len(h2) == 32
        assert h1[:8] != h2[:8] and (1).to_bytes(8, "big") not in (h1, h2)


class TestGuard:
    async def test_exclusive_waits_for_shared_and_blocks_new_shared(self):
        """contract §3.1: an exclusive holder waits for the shared ones, keeps new
        shared holders of its neuron out meanwhile, and never delays other neurons."""
        g = GuardTable()
        with g.cond:
            assert g.try_shared_locked("n")
        got = trio.Event()

        async def exclusive():
            await g.acquire_exclusive_async("n")
            got.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(exclusive)
            await trio.testing.wait_all_tasks_blocked()
            # the exclusive holder is now waiting: a new shared holder is kept out
            with g.cond:
                assert not g.try_shared_locked("n")
                assert g.try_shared_locked("other")  # other neurons never wait
            assert not got.is_set()
            g.release_shared("n")
            with trio.fail_after(10):
                await got.wait()
        with g.cond:
            assert not g.try_shared_locked("n")  # held exclusively
        g.release_exclusive("n")
        with g.cond:
            assert g.try_shared_locked("n")

    async def test_a_cancelled_exclusive_wait_lets_shared_holders_in_again(self):
        """An exclusive wait given up (cancelled) stops keeping shared holders out."""
        g = GuardTable()
        with g.cond:
            assert g.try_shared_locked("n")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(g.acquire_exclusive_async, "n")
            await trio.testing.wait_all_tasks_blocked()
            with g.cond:
                assert not g.try_shared_locked("n")  # the waiter keeps them out
            nursery.cancel_scope.cancel()
        with g.cond:
            assert g.try_shared_locked("n")


def _db(tmp_path):
    conn = connect(tmp_path / "t.db")
    conn.execute("CREATE TABLE t(x INTEGER)")
    return conn


def _db_failing_at_commit(tmp_path):
    """A unit inserting into c passes, and its COMMIT fails (a deferred
    foreign-key violation), like a full disk at commit time."""
    conn = _db(tmp_path)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("CREATE TABLE p(id INTEGER PRIMARY KEY)")
    conn.execute("CREATE TABLE c(pid INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED)")
    return conn


@attrs.frozen
class _HeldUnit:
    """A writer unit that says it runs (``running``), waits for ``go``, then
    executes ``sql``: the batch it is in stays in the writer's hand until the
    test lets it go."""

    sql: str
    running: threading.Event = attrs.field(factory=threading.Event)
    go: threading.Event = attrs.field(factory=threading.Event)

    def __call__(self, tx: Any) -> None:
        self.running.set()
        self.go.wait(10)
        tx.conn.execute(self.sql)


class TestWriter:
    def test_refused_unit_changes_nothing_and_others_commit(self, tmp_path):
        w = Writer(_db(tmp_path), on_fatal=lambda why: None)
        w.start()
        try:

            def ok(tx):
                tx.conn.execute("INSERT INTO t VALUES (1)")
                return "ok"

            def refuse(tx):
                tx.conn.execute("INSERT INTO t VALUES (2)")
                raise BadRequest("no")

            def keep_and_refuse(tx):
                tx.conn.execute("INSERT INTO t VALUES (3)")
                return TokenVoid("kept", {"reason": "revoked"})

            futs = [w.submit(ok), w.submit(refuse), w.submit(keep_and_refuse)]
            assert futs[0].result(10) == "ok"
            with pytest.raises(BadRequest):
                futs[1].result(10)
            assert isinstance(futs[2].result(10), TokenVoid)
            with pytest.raises(TokenVoid):
                w.call(keep_and_refuse)
        finally:
            w.stop()
        rows = sqlite3.connect(tmp_path / "t.db").execute("SELECT x FROM t ORDER BY x").fetchall()
        assert rows == [(1,), (3,), (3,)]

    def test_a_unit_alone_in_its_batch_is_undone_whole_or_kept_whole(self, tmp_path):
        """A unit that is its batch's only one (no savepoint) changes nothing
        when it raises, keeps its writes when it returns a refusal, and the
        writer goes on after either."""
        w = Writer(_db(tmp_path), on_fatal=lambda why: None)
        w.start()
        try:

            def refuse(tx):
                tx.conn.execute("INSERT INTO t VALUES (1)")
                raise BadRequest("no")

            def crash(tx):
                tx.conn.execute("INSERT INTO t VALUES (2)")
                raise RuntimeError("a bug")

            def keep_and_refuse(tx):
                tx.conn.execute("INSERT INTO t VALUES (3)")
                return TokenVoid("kept", {"reason": "revoked"})

            def ok(tx):
                tx.conn.execute("INSERT INTO t VALUES (4)")
                return "ok"

            # w.call waits for each, so every batch holds one unit
            with pytest.raises(BadRequest):
                w.call(refuse)
            with pytest.raises(Internal):
                w.call(crash)
            with pytest.raises(TokenVoid):
                w.call(keep_and_refuse)
            assert w.call(ok) == "ok"
            assert w.stats.max_batch == 1
        finally:
            w.stop()
        rows = sqlite3.connect(tmp_path / "t.db").execute("SELECT x FROM t ORDER BY x").fetchall()
        assert rows == [(3,), (4,)]

    def test_units_queued_together_share_one_commit(self, tmp_path):
        w = Writer(_db(tmp_path), on_fatal=lambda why: None)
        gate = threading.Event()

        def blocker(tx):
            gate.wait(10)

        w.start()
        try:
            first = w.submit(blocker)
            futs = [
                w.submit(lambda tx: tx.conn.execute("INSERT INTO t VALUES (1)")) for _ in range(50)
            ]
            gate.set()
            first.result(10)
            for f in futs:
                f.result(10)
            assert w.stats.units == 51 and w.stats.batches <= 2  # 51 units, at most 2 fsyncs
        finally:
            w.stop()

    def test_failed_commit_of_a_critical_unit_fail_stops(self, tmp_path):
        """contract §3.2.3: an outcome whose COMMIT fails is never reported, and the
        writer refuses every later write."""
        conn = _db_failing_at_commit(tmp_path)
        fatal: list[str] = []
        told = threading.Event()
        futs: list[concurrent.futures.Future[object]] = []

        def on_fatal(why: str) -> None:
            # the batch's caller is answered before the daemon hears of the
            # stop: its "may have run" leaves before the connections close
            fatal.append(why if futs[0].done() else "told before the caller was answered")
            told.set()

        w = Writer(conn, on_fatal=on_fatal)
        w.start()
        try:
            # a deferred foreign-key violation passes the unit and fails at COMMIT
            gate = threading.Event()
            w.submit(lambda tx: gate.wait(10))  # holds the writer until futs is filled
            futs.append(
                w.submit(lambda tx: tx.conn.execute("INSERT INTO c VALUES (42)"), critical=True)
            )
            gate.set()
            with pytest.raises(Internal) as ei:
                futs[0].result(10)
            assert ei.value.data == {"reason": "commit_failed"}
            assert told.wait(10)
            assert len(fatal) == 1 and fatal[0].startswith("an outcome could not be stored")
            with pytest.raises(Internal) as later:
                w.call(lambda tx: tx.conn.execute("INSERT INTO t VALUES (1)"))
            assert later.value.data == {"reason": "fail_stop"}
        finally:
            w.stop()
        assert sqlite3.connect(tmp_path / "t.db").execute("SELECT count(*) FROM c").fetchone() == (
            0,
        )

    def test_units_queued_behind_a_fail_stop_are_answered_before_the_daemon_hears(self, tmp_path):
        """A later batch's outcome, queued while the failing batch ran, is
        refused (fail_stop: may have run) before on_fatal: its answer leaves
        before the stop that closes the connections."""
        conn = _db_failing_at_commit(tmp_path)
        seen: list[bool] = []
        told = threading.Event()
        later: list[concurrent.futures.Future[object]] = []

        def on_fatal(why: str) -> None:
            seen.append(later[0].done())
            told.set()

        w = Writer(conn, on_fatal=on_fatal)
        w.start()
        try:
            failing = _HeldUnit("INSERT INTO c VALUES (42)")  # fails at COMMIT
            first = w.submit(failing, critical=True)
            assert failing.running.wait(10)  # its batch is running: the next unit waits
            later.append(w.submit(lambda tx: tx.conn.execute("INSERT INTO t VALUES (1)")))
            failing.go.set()
            with pytest.raises(Internal):
                first.result(10)
            with pytest.raises(Internal) as refused:
                later[0].result(10)
            assert refused.value.data == {"reason": "fail_stop"}
            assert told.wait(10) and seen == [True]
            assert w.backlog == 0
        finally:
            w.stop()

    def test_a_fail_stop_from_another_thread_waits_for_the_batch_in_hand(self, tmp_path):
        """fail_stop from a worker while the writer commits a batch: the batch
        is answered (committed: it came before the stop) before on_fatal."""
        seen: list[bool] = []
        told = threading.Event()
        held: list[concurrent.futures.Future[object]] = []

        def on_fatal(why: str) -> None:
            seen.append(all(f.done() for f in held))
            told.set()

        w = Writer(_db(tmp_path), on_fatal=on_fatal)
        w.start()
        try:
            slow = _HeldUnit("INSERT INTO t VALUES (1)")
            held.append(w.submit(slow))
            assert slow.running.wait(10)
            w.fail_stop("a void could not be written")
            # a unit after the mark is refused in turn, never ahead of the
            # batch in hand (the stop's barrier must not overtake an answer)
            held.append(w.submit(lambda tx: tx.conn.execute("INSERT INTO t VALUES (2)")))
            assert not told.is_set() and not held[1].done()
            slow.go.set()
            held[0].result(10)
            with pytest.raises(Internal) as after:
                held[1].result(10)
            assert after.value.data == {"reason": "fail_stop"}
            assert told.wait(10) and seen == [True]
            with pytest.raises(Internal):  # settled: refused at once from now on
                w.call(lambda tx: tx.conn.execute("INSERT INTO t VALUES (3)"))
            assert w.backlog == 0
        finally:
            w.stop()
        rows = sqlite3.connect(tmp_path / "t.db").execute("SELECT x FROM t").fetchall()
        assert rows == [(1,)]

    def test_failed_commit_of_an_ordinary_unit_keeps_the_writer(self, tmp_path):
        conn = _db_failing_at_commit(tmp_path)
        fatal: list[str] = []
        w = Writer(conn, on_fatal=fatal.append)
        w.start()
        try:
            with pytest.raises(Internal):
                w.call(lambda tx: tx.conn.execute("INSERT INTO c VALUES (42)"))
            assert fatal == []
            w.call(lambda tx: tx.conn.execute("INSERT INTO t VALUES (1)"))
        finally:
            w.stop()


async def test_trio_callers_are_answered_after_commit(tmp_path):
    w = Writer(_db(tmp_path), on_fatal=lambda why: None)
    w.start()
    try:
        async with trio.open_nursery() as n:
            results: list[object] = []

            async def one(i):
                results.append(
                    await w.run(
                        lambda tx: (tx.conn.execute("INSERT INTO t VALUES (?)", (i,)), i)[1]
                    )
                )

            for i in range(20):
                n.start_soon(one, i)
        assert sorted(results) == list(range(20))
    finally:
        w.stop()
    assert sqlite3.connect(tmp_path / "t.db").execute("SELECT count(*) FROM t").fetchone() == (20,)


def test_frame_bodies_can_be_taken_undecoded_in_order():
    """FrameDecoder.next_body hands out whole bodies for decoding elsewhere."""
    from wardd.protocol import NEED_DATA, FrameDecoder, decode_item, encode_frame

    d = FrameDecoder()
    data = encode_frame({"id": 1}) + encode_frame([2, 3])
    d.feed(data[:5])
    assert d.next_body() is NEED_DATA
    d.feed(data[5:])
    assert decode_item(d.next_body()) == {"id": 1}
    assert d.next_item() == [2, 3]
    assert d.next_body() is NEED_DATA
