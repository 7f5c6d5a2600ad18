"""A reconcile against a running ``check_receipts``, with real processes (contract §3.4).

Two histories that once let a receipt's ``executed`` be lost, so that the
op ran again:

- a ``check_receipts`` that is busy with a slow receipt had not yet started
  on the next attempt, which therefore did not count as pending: a
  reconcile of it was answered at once, and the receipt's ``executed`` that
  came next was discarded;
- a receipt whose answer contradicts an outcome recorded meanwhile was
  dropped without a trace.

A receipt is held by a fifo the test writes its answer to, and the writer
by a write transaction the test holds on the database file (a backup tool
or a ``sqlite3`` shell can do the same): no sleeps, every wait is on the
real event.
"""

from __future__ import annotations

import errno
import os
import shlex
import signal
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

from tests._poll import wait_for
from tests.daemon.harness import Actor, Background, Daemon, Env, run_wardctl
from wardd.protocol import WarddError

pytestmark = pytest.mark.timeout(120)


def logged(d: Daemon, event: str, **fields: Any) -> list[dict[str, Any]]:
    """The JSON log lines of the daemon's last run with this event and fields."""
    return d.logged(event, run=-1, **fields)


class HeldReceipt:
    """A ``cli`` act whose call ends ``unknown`` (exit 7) and whose receipt of
    the op ``held`` notes its start and answers what the test writes to a
    fifo; every other op's receipt answers ``executed`` at once."""

    def __init__(self, env: Env, held: str) -> None:
        self.fifo = env.root / "answer.fifo"
        self.started = env.root / "receipt-started"
        os.mkfifo(self.fifo)
        q = shlex.quote
        env.acts["fx"] = {
            "adapter": "cli",
            "argv": ["/bin/sh", "-c", "exit 7"],
            "receipt_argv": [
                "/bin/sh",
                "-c",
                f'case "$1" in */{held}/1) touch {q(str(self.started))}; '
                f'read answer < {q(str(self.fifo))}; echo "$answer";; '
                "*) echo executed;; esac",
                "receipt",
            ],
        }
        env.write_config()

    def answer(self, answer: str) -> None:
        """Write the held receipt's answer (waits, bounded, for it to open the fifo)."""
        fd: list[int] = []

        def opened() -> bool:
            try:
                fd.append(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as exc:
                if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
                return False
            return True

        wait_for(opened, what="the receipt to open its fifo")
        try:
            os.write(fd[0], f"{answer}\n".encode())
        finally:
            os.close(fd[0])

    def release(self) -> None:
        """Let a receipt still held go (the end of a test, pass or fail)."""
        try:
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return  # no receipt holds it
        try:
            os.write(fd, b"unknown\n")
        finally:
            os.close(fd)


@pytest.fixture
def held(make_daemon: Any) -> Iterator[Any]:
    """``held(*ops)``: a daemon with each op of act ``fx`` unknown; op1's receipt is held."""
    receipts: list[HeldReceipt] = []

    def make(*ops: str) -> tuple[Daemon, Actor, HeldReceipt]:
        env = Env()
        receipts.append(HeldReceipt(env, "op1"))
        d = make_daemon(env)
        a = Actor(d, acts=("fx",))
        for op in ops:
            a.submit(op, "fx")
            assert a.invoke(op)["status"] == "unknown"
        return d, a, receipts[-1]

    try:
        yield make
    finally:
        for receipt in receipts:
            receipt.release()


def reconcile(a: Actor, op: str, status: str, client: Any) -> Any:
    params = {"op": op, "attempt": 1, "outcome": {"status": status}}
    return a.call("reconcile", params, client=client)


class TestReconcileDuringCheckReceipts:
    def test_a_reconcile_of_an_attempt_queued_in_a_check_waits_for_its_receipt(
        self, held: Any
    ) -> None:
        """An attempt counts as pending from the moment check_receipts is asked
        for: a reconcile of op2 sent while op1's receipt still runs waits for
        op2's own receipt, whose executed then stands (the reconcile answers
        conflict) and nothing can run op2 again."""
        d, a, receipt = held("op1", "op2")
        checking = Background(a.call, "check_receipts", {}, d.connect())
        wait_for(receipt.started.exists, what="op1's receipt to start")
        assert a.read("status")["receipts_pending"] == 2  # op1 running, op2 queued behind it
        waiting = Background(reconcile, a, "op2", "not_executed", d.connect())
        wait_for(
            lambda: waiting.done.is_set() or logged(d, "reconcile_waiting", op="op2"),
            what="the reconcile to answer or wait",
        )
        assert not waiting.done.is_set(), f"answered before op2's receipt: {waiting.value!r}"
        assert a.op("op2")["attempts"][0]["state"] == "unknown"

        receipt.answer("unknown")  # op1's receipt ends; op2's runs next and finds the effect
        assert checking.result() == {"checked": 2, "resolved": 1}
        err = waiting.error_of()
        assert isinstance(err, WarddError) and err.code == "conflict"
        assert err.data == {"status": "succeeded", "source": "receipt"}
        op2 = a.op("op2")
        assert op2["state"] == "retained"
        assert op2["attempts"][0]["outcome"]["source"] == "receipt"
        assert "reconciled" not in [r["kind"] for r in a.history("op2")]
        op1 = a.op("op1")["attempts"][0]
        assert op1["state"] == "unknown" and op1["evidence"]["receipt_hint"] == "unknown"
        assert a.read("status")["receipts_pending"] == 0
        with pytest.raises(WarddError) as again:
            a.invoke("op2", attempt=2)
        assert again.value.code == "already_succeeded"

    def test_a_reconcile_waiting_for_a_queued_receipt_the_stop_cuts_records_nothing(
        self, held: Any
    ) -> None:
        """A reconcile waiting for op2's receipt, queued behind op1's, is
        refused (overloaded, receipt_pending) when SIGTERM cuts the check
        before op2's turn; op2 stays unknown, and the next start's check
        finds its effect."""
        d, a, receipt = held("op1", "op2")
        Background(a.call, "check_receipts", {}, d.connect())
        wait_for(receipt.started.exists, what="op1's receipt to start")
        waiting = Background(reconcile, a, "op2", "not_executed", d.connect())
        wait_for(lambda: logged(d, "reconcile_waiting", op="op2"), what="the reconcile to wait")
        d.proc.send_signal(signal.SIGTERM)
        err = waiting.error_of()
        assert isinstance(err, WarddError)
        assert (err.code, err.data.get("reason")) == ("overloaded", "receipt_pending")
        assert d.proc.wait(30) == 0
        receipt.release()
        receipt.started.unlink()

        d.start()
        a.client = d.connect()
        assert "reconciled" not in [r["kind"] for r in a.history("op2")]
        wait_for(lambda: a.state("op2") == "retained", what="the start's check of op2")
        assert a.op("op2")["attempts"][0]["outcome"]["source"] == "receipt"
        wait_for(receipt.started.exists, what="op1's receipt to run again")
        receipt.answer("unknown")
        wait_for(lambda: a.read("status")["receipts_pending"] == 0, what="the checks to end")


class TestReceiptConflict:
    def test_a_receipt_that_contradicts_a_reconcile_committed_first_is_kept_and_shown(
        self, held: Any
    ) -> None:
        """A reconcile that passed its wait before the check listed its attempt
        is committed first; the receipt's executed that comes after it is kept
        as evidence.receipt_conflict with a receipt record, logged at warning,
        and shown by wardctl op show. The reconciled outcome stays."""
        d, a, receipt = held("op1")
        # the writer waits for the write transaction the test holds
        lock = sqlite3.connect(d.env.database, timeout=30, isolation_level=None)
        try:
            lock.execute("BEGIN IMMEDIATE")
            recorded = Background(reconcile, a, "op1", "not_executed", d.connect())
            wait_for(
                lambda: a.read("status")["writer"]["backlog"] == 1,
                what="the reconcile to reach the writer",
            )
            # the check lists op1 while the reconcile's write is still queued
            checking = Background(a.call, "check_receipts", {}, d.connect())
            wait_for(receipt.started.exists, what="op1's receipt to start")
        finally:
            lock.close()
        assert recorded.result() == {"op": "op1", "attempt": 1, "status": "not_executed"}
        receipt.answer("executed")
        assert checking.result() == {"checked": 1, "resolved": 0}

        att = a.op("op1")["attempts"][0]
        assert att["state"] == "not_executed"
        assert att["outcome"] == {"status": "not_executed", "source": "reconcile"}
        conflict = att["evidence"]["receipt_conflict"]
        assert conflict["answer"] == "executed" and set(conflict) == {"answer", "at"}
        (record,) = [r for r in a.history("op1") if r["kind"] == "receipt"]
        assert record["data"] == {
            "answer": "executed",
            "applied": False,
            "conflict": {"status": "not_executed", "source": "reconcile"},
        }
        (line,) = logged(d, "receipt_conflict", op="op1")
        assert line["level"] == "warning" and line["answer"] == "executed"
        assert (line["status"], line["source"]) == ("not_executed", "reconcile")

        a.neuron.save(d.env.root / "neuron.key")
        shown = run_wardctl(d.env, "op", "show", "op1").stdout
        assert "receipt_conflict" in shown
        assert (
            "attempt 1: its receipt answered executed after not_executed was recorded "
            "(source reconcile)" in shown
        )
