"""``status``'s counts (contract §3.9, §4) are the writer's, kept in memory
(daemon/store/counters.py): they must equal the rows counted afresh after
any mix of writes, prunes, a SIGKILL and the restart's recovery.

Every comparison is made when nothing else is written: after the reply of
the last write (the counts are added before any reply leaves) and once the
pruner has pruned every op that has ended (waited for on
``status.db.pruned_ops``, never a sleep).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests._poll import wait_for
from tests.daemon.harness import Actor, Background, Daemon, counts_left
from wardd.daemon.store.counters import count_afresh

FAST = {"retention_s": 1, "prune_interval_s": 1}


def shown(status: dict[str, Any]) -> tuple[Any, ...]:
    db = status["db"]
    return status["operations"], status["unknown_attempts"], db["pruned_ops"], db["last_pruned_at"]


def counted(path: Path) -> tuple[Any, ...]:
    """The figures counted from the database's rows, on a connection of our own."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ops, unknown, pruning = count_afresh(conn).wire()
    finally:
        conn.close()
    return ops, unknown, pruning["pruned_ops"], pruning["last_pruned_at"]


def settled(d: Daemon, a: Actor, pruned: int) -> tuple[Any, ...]:
    """Once ``pruned`` ops are pruned: status's figures, checked against a fresh count."""
    wait_for(lambda: a.client.call("status")["db"]["pruned_ops"] >= pruned, what="the prunes")
    figures = shown(a.client.call("status"))
    assert figures == counted(d.env.database)
    return figures


def finished(a: Actor, op: str, act: str = "echo") -> None:
    a.submit(op, act)
    assert a.invoke(op)["status"] == "succeeded"
    a.call("consume", {"op": op})


class TestStatusCounts:
    def test_counts_equal_a_fresh_count_after_writes_prunes_a_sigkill_and_a_restart(
        self, make_daemon
    ):
        """Invokes, a failed and an unknown outcome, a void, a manual take, a
        cancel, consumes and their prunes; then a SIGKILL with a call running and
        an attempt prepared; after the restart the recovery's marks, reconciles
        and more prunes: every time, status's counts equal the rows counted afresh."""
        d = make_daemon(**FAST)
        a = Actor(d, acts=("echo", "nofx", "boom", "gated"))
        finished(a, "done-1")
        finished(a, "done-2")
        a.submit("kept")
        assert a.invoke("kept")["status"] == "succeeded"
        a.submit("no-effect", "nofx")
        assert a.invoke("no-effect")["status"] == "failed"
        a.submit("in-doubt", "boom")
        assert a.invoke("in-doubt")["status"] == "unknown"
        a.submit("dropped")
        a.call("cancel", {"op": "dropped"})
        a.submit("voided")
        dropping = d.connect()
        a.prepare("voided", client=dropping)
        dropping.close()  # its token is dropped: the attempt is voided
        wait_for(lambda: a.op("voided")["attempts"][0]["state"] == "void", what="the void")
        a.submit("manual")
        a.call("manual_take", {"op": "manual", "expected_attempt": 1})
        ops, unknown, pruned, last = settled(d, a, 3)
        assert (unknown, pruned) == (2, 3) and last is not None
        assert ops == {"consumed": 2, "cancelled": 1, "retained": 1, "pending": 2, "unknown": 2}

        # a crash with a call running and an attempt prepared
        a.submit("blocked", "gated")
        a.submit("prepared")
        a.prepare("prepared")
        call = Background(a.invoke, "blocked", 1, d.connect())
        wait_for(d.env.started_marker("blocked").exists, what="the gated act to start")
        assert shown(a.client.call("status")) == counted(d.env.database)
        d.kill()
        call.done.wait(10)
        d.start()
        a.client = d.connect()
        ops, unknown, _, _ = settled(d, a, 3)
        assert unknown == 4 and ops["unknown"] == 4

        # the operator resolves what the crash left, and the daemon goes on
        for op in ("blocked", "prepared", "manual", "in-doubt"):
            a.call("reconcile", {"op": op, "attempt": 1, "outcome": {"status": "not_executed"}})
        a.bind()  # the new boot's worker
        finished(a, "done-3")
        a.call("consume", {"op": "kept"})
        ops, unknown, _, _ = settled(d, a, 5)
        assert unknown == 0 and "unknown" not in ops

    def test_moves_after_the_last_snapshot_are_read_back_after_a_sigkill(self, make_daemon):
        """Schema 7 persists the counts about once a second: the moves made
        after the last snapshot (new ops, ops the snapshot counted moving on)
        are read back at the next start from their records, so after a
        SIGKILL status still equals a fresh count."""
        d = make_daemon()
        a = Actor(d, acts=("echo",))
        db = d.env.database
        for op in ("kept", "left"):
            a.submit(op)
            assert a.invoke(op)["status"] == "succeeded"
        a.submit("waiting")

        def behind() -> bool:
            """The snapshot is older than the last record (no sleep: a query)."""
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
            try:
                (lag,) = conn.execute(
                    "SELECT (SELECT seq FROM counts) < (SELECT max(seq) FROM events)"
                ).fetchone()
            finally:
                conn.close()
            return bool(lag)

        a.call("consume", {"op": "kept"})
        a.call("cancel", {"op": "waiting"})
        finished(a, "after-1")
        n = 1
        while not behind():  # a write that happened to carry a snapshot: one more
            n += 1
            assert n < 50, "every write carried a snapshot"
            a.submit(f"after-{n}")
        before = shown(a.client.call("status"))
        assert before == counted(db)
        d.kill()
        d.start()
        a.client = d.connect()
        assert shown(a.client.call("status")) == before == counted(db)

    def test_the_suites_check_names_a_snapshot_a_counting_mistake_left(self, make_daemon, tmp_path):
        """Every daemon the test harness starts is checked at its cleanup:
        the counts the next start would read against the rows
        (``harness.counts_left``), the guard against a counting mistake
        persisted in the snapshot. It names one: a copy of a stopped
        daemon's database whose snapshot says one more retained op and one
        fewer pending op than the rows."""
        d = make_daemon()
        a = Actor(d, acts=("echo",))
        a.submit("kept")
        assert a.invoke("kept")["status"] == "succeeded"
        a.submit("waiting")
        d.terminate()  # a clean stop: nothing is caught up past the snapshot below
        assert counts_left(d.env.database) is None
        copy = tmp_path / "drifted.db"
        src = sqlite3.connect(d.env.database)
        dst = sqlite3.connect(copy)
        try:
            src.backup(dst)
            dst.execute(
                "UPDATE counts SET seq = (SELECT max(seq) FROM events),"
                ' ops = \'{"pending":0,"retained":2}\''
            )
            dst.commit()
        finally:
            src.close()
            dst.close()
        kept = ({"retained": 2}, 0, {"pruned_ops": 0, "last_pruned_at": None})
        rows = ({"pending": 1, "retained": 1}, 0, {"pruned_ops": 0, "last_pruned_at": None})
        assert counts_left(copy) == f"a start would read {kept}, the rows say {rows}"
