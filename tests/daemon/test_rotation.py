"""Rotated files and reconfigured acts never make a receipt guess (contract §3.4, §6).

Each test is an operator's history against a real daemon process. A
``file.append`` call is held after its claim is committed and before it
opens its file for writing, by a read lease the test holds on the file
(`harness.ReadLease`); then either a real SIGKILL lands before the write,
or the write is let through with the daemon's file size limit lowered to
its WAL's size, so that the outcome's commit fails and the daemon
fail-stops with the line written and no outcome. Then the file is renamed
or copy-truncated, or the act is given another adapter, and the daemon
restarts.
"""

from __future__ import annotations

import resource
import shlex
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests._poll import wait_for
from tests.daemon.harness import Actor, Background, Daemon, Env, ReadLease, code_of, key

DATA = Path(__file__).parent.parent / "data"


def line(actor: Actor, op: str, args: bytes) -> str:
    return f"{key(actor, op)}\t{args.hex()}"


def invoke_in_background(actor: Actor, op: str) -> None:
    """The daemon dies under the call (that is the history): its error is not read;
    the call ends when the daemon does, at the latest at the test's end."""
    Background(actor.invoke, op, 1, actor.daemon.connect())


def hold_after_claim(d: Daemon, actor: Actor, op: str) -> ReadLease:
    """Invoke ``op`` (a file.append act) and return once its claim is committed
    and its call waits to open the file."""
    lease = ReadLease(d.env.ledger)
    try:
        invoke_in_background(actor, op)
        wait_for(lease.breaking, what="the file.append call to wait for its file")
    except BaseException:
        lease.release()
        raise
    return lease


def kill_before_the_write(d: Daemon, actor: Actor, op: str) -> None:
    lease = hold_after_claim(d, actor, op)
    try:
        d.kill()
    finally:
        lease.release()


def fail_stop_after_the_write(d: Daemon, actor: Actor, op: str) -> None:
    """The line lands; the outcome's commit fails (EFBIG); the daemon exits 70."""
    lease = hold_after_claim(d, actor, op)
    try:
        assert d.proc is not None
        wal = Path(f"{d.env.database}-wal").stat().st_size
        resource.prlimit(d.proc.pid, resource.RLIMIT_FSIZE, (wal, resource.RLIM_INFINITY))
    finally:
        lease.release()
    assert d.proc.wait(30) == 70
    d.close_clients()


def restart(d: Daemon, actor: Actor) -> None:
    d.kill()
    d.start()
    actor.client = d.connect()
    actor.bind(0)


def seeded(make_daemon) -> tuple[Daemon, Actor]:
    """A daemon whose ledger already holds one line (the claim records a non-empty file)."""
    d = make_daemon()
    a = Actor(d, acts=("ledger",))
    a.submit("first", "ledger", b"1")
    assert a.invoke("first")["status"] == "succeeded"
    a.submit("op", "ledger", b"x")
    return d, a


def hint(actor: Actor, op: str) -> tuple[str, str]:
    ev = actor.op(op)["attempts"][0]["evidence"]
    return ev.get("receipt_hint"), ev.get("receipt_detail", "")


class TestRotation:
    def test_same_file_without_the_line_is_not_executed(self, make_daemon):
        """Killed between claim and write, the file untouched: the receipt says not_executed."""
        d, a = seeded(make_daemon)
        kill_before_the_write(d, a, "op")
        restart(d, a)
        att = a.op("op")["attempts"][0]
        assert (att["outcome"]["status"], att["outcome"]["source"]) == ("not_executed", "receipt")
        assert a.invoke("op", 2)["status"] == "succeeded"
        assert d.env.ledger_lines() == [line(a, "first", b"1"), f"{key(a, 'op', 2)}\t78"]

    def test_line_after_the_claims_offset_is_executed(self, make_daemon):
        """Written, then no outcome stored: the line after the offset resolves it executed."""
        d, a = seeded(make_daemon)
        fail_stop_after_the_write(d, a, "op")
        d.start()
        a.client = d.connect()
        info = a.op("op")
        assert info["state"] == "retained" and info["result"]["source"] == "receipt"
        assert d.env.ledger_lines() == [line(a, "first", b"1"), line(a, "op", b"x")]

    @pytest.mark.parametrize("written", [True, False], ids=["written", "not-written"])
    @pytest.mark.parametrize("create", [True, False], ids=["new-file", "no-file"])
    def test_rotation_by_rename_leaves_the_attempt_unknown_with_evidence(
        self, make_daemon, written, create
    ):
        """The file renamed away (and a new one created, or not): unknown, never not_executed."""
        d, a = seeded(make_daemon)
        old_boot = d.boot
        if written:
            fail_stop_after_the_write(d, a, "op")
        else:
            kill_before_the_write(d, a, "op")
        rotated = d.env.ledger.with_name("ledger.log.1")
        d.env.ledger.rename(rotated)
        if create:
            d.env.ledger.touch(mode=0o600)
        restart(d, a)
        att = a.op("op")["attempts"][0]
        assert att["state"] == "unknown" and a.state("op") == "unknown"
        assert {k: att["evidence"][k] for k in ("claimed", "boot")} == {
            "claimed": True,
            "boot": old_boot,
        }
        answer, detail = hint(a, "op")
        assert answer == "unknown"
        assert ("not the claim's file" if create else "renamed") in detail
        assert code_of(a.prepare, "op", 2).code == "attempt_unknown"
        # the operator checks the rotated file, and records what it holds
        found = line(a, "op", b"x") in d.env.ledger_lines(rotated)
        assert found is written
        outcome = {"status": "succeeded"} if found else {"status": "not_executed"}
        a.call("reconcile", {"op": "op", "attempt": 1, "outcome": outcome})
        assert a.state("op") == ("retained" if written else "pending")

    def test_copy_truncate_leaves_the_attempt_unknown_even_once_the_file_grew_again(
        self, make_daemon
    ):
        """Copied and truncated, then regrown past the claim's offset: still unknown."""
        d, a = seeded(make_daemon)
        fail_stop_after_the_write(d, a, "op")
        rotated = d.env.ledger.with_name("ledger.log.1")
        shutil.copyfile(d.env.ledger, rotated)
        with d.env.ledger.open("r+b") as f:
            f.truncate(0)
        restart(d, a)
        answer, detail = hint(a, "op")
        assert (answer, a.state("op")) == ("unknown", "unknown") and "truncated" in detail
        for i in range(4):
            a.submit(f"new{i}", "ledger", b"y" * 40)
            assert a.invoke(f"new{i}")["status"] == "succeeded"
        assert d.env.ledger.stat().st_size > rotated.stat().st_size
        assert a.call("check_receipts", {})["resolved"] == 0
        restart(d, a)
        answer, detail = hint(a, "op")
        assert (answer, a.state("op")) == ("unknown", "unknown") and "other bytes" in detail
        assert line(a, "op", b"x") in d.env.ledger_lines(rotated)


class TestReconfiguration:
    def test_act_reconfigured_from_cli_to_file_append_stays_unknown(self, make_daemon):
        """A cli effect that happened is never read as not_executed by a file.append receipt."""
        env = Env()
        started = shlex.quote(str(env.started_marker("op")))
        gate = shlex.quote(str(env.gates / "op.1"))
        env.acts["notes"] = {
            "adapter": "cli",
            "argv": [
                "/bin/sh",
                "-c",
                f'echo "$WARDD_IDEMPOTENCY_KEY" >> {shlex.quote(str(env.cli_ledger))}; '
                f"touch {started}; i=0; while [ ! -e {gate} ] && [ $i -lt 600 ]; do "
                "sleep 0.05; i=$((i+1)); done",
            ],
        }
        env.write_config()
        d = make_daemon(env)
        a = Actor(d, acts=("notes",))
        a.submit("op", "notes")
        invoke_in_background(a, "op")
        wait_for(env.started_marker("op").exists, what="the cli act to run")
        d.kill()
        env.open_gate("op")
        env.acts["notes"] = {"adapter": "file.append", "path": str(env.ledger)}
        env.write_config()
        restart(d, a)
        assert a.state("op") == "unknown"
        answer, detail = hint(a, "op")
        assert answer == "unknown" and "claimed under adapter 'cli'" in detail
        assert code_of(a.prepare, "op", 2).code == "attempt_unknown"
        assert env.ledger_lines(env.cli_ledger) == [key(a, "op")]
        assert not env.ledger.exists()

    def test_act_reconfigured_from_file_append_to_cli_stays_unknown(self, make_daemon):
        """A cli receipt's answer about a file.append claim is a hint, even executed."""
        d, a = seeded(make_daemon)
        kill_before_the_write(d, a, "op")
        d.env.acts["ledger"] = {
            "adapter": "cli",
            "argv": ["/bin/true"],
            "receipt_argv": ["/bin/sh", "-c", "echo executed", "receipt"],
        }
        d.env.write_config()
        restart(d, a)
        wait_for(lambda: a.read("status")["receipts_pending"] == 0, what="the cli receipts")
        assert a.state("op") == "unknown"
        answer, detail = hint(a, "op")
        assert answer == "executed" and "claimed under adapter 'file.append'" in detail
        assert a.call("check_receipts", {})["resolved"] == 0
        assert a.state("op") == "unknown"

    def test_a_claim_of_an_older_wardd_without_its_record_stays_unknown(self, make_daemon):
        """A schema-v2 database's claimed attempt (no claim record), its act now file.append."""
        env = Env()
        env.database.parent.mkdir(parents=True)
        shutil.copy(DATA / "schema-v2.db", env.database)
        neuron = (DATA / "schema-v2.neuron").read_text().strip()
        env.acts["gated"] = {"adapter": "file.append", "path": str(env.ledger)}
        env.write_config()
        db = sqlite3.connect(env.database)
        (old_boot,) = db.execute("SELECT boot_id FROM boots").fetchone()
        db.close()
        d = make_daemon(env)
        with d.connect() as c:
            running = c.call("get_operation", {"neuron": neuron, "op": "running"})
            prepared = c.call("get_operation", {"neuron": neuron, "op": "prepared"})
        att = running["attempts"][0]
        assert running["state"] == "unknown" and att["claimed"] is True
        assert att["evidence"]["boot"] == old_boot
        assert att["evidence"]["receipt_hint"] == "unknown"
        assert "no record of its adapter" in att["evidence"]["receipt_detail"]
        # never claimed: the whole configured file, applied as before
        assert prepared["state"] == "pending"
        assert prepared["attempts"][0]["outcome"]["source"] == "receipt"
