"""Another process appends to a ``file.append`` ledger mid-call: the receipt
never reads our record as absent (contract §6).

A real daemon, a real ledger file, a real foreign process appending a
partial line (no newline) between the call's torn-line check and its write,
and a real SIGKILL after the write and before the outcome commits. The
call is stopped at those two points by the adapter's test hook
(``WARDD_TEST_FILE_APPEND_HOLD``, adapters/_file_append.py): a FIFO per
point, which the call opens for reading and the test for writing, so each
step waits on the other's real event, never on a delay.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.daemon.harness import Actor, Background, Env, Hold, code_of, key
from wardd.adapters._file_append import HOLD_ENV


def append_partial_line(path: Path, data: bytes) -> None:
    """Another process appends ``data``, with no newline."""
    subprocess.run(
        ["/bin/sh", "-c", 'printf %s "$1" >> "$2"', "sh", data.decode(), str(path)], check=True
    )


class TestForeignPartialLine:
    def test_a_record_glued_to_a_foreign_partial_line_is_executed_and_never_runs_again(
        self, make_daemon
    ):
        """The ledger holds complete lines; our call's torn-line check sees a
        newline; another process then appends ``ab`` with no newline; our
        record lands glued to it (``ab<key>\\t…\\n``); SIGKILL before the
        outcome commits. At the restart the receipt finds the key inside the
        line: the attempt is succeeded by receipt (never not_executed), and no
        second attempt runs, so the ledger holds our record once."""
        env = Env()
        hold = Hold(env.root, HOLD_ENV, ("checked", "written"))
        d = make_daemon(env, start=False)
        d.start(hold.env)
        a = Actor(d, acts=("ledger",))
        a.submit("first", "ledger", b"1")
        assert a.invoke("first")["status"] == "succeeded"  # complete lines, one of ours
        a.submit("victim", "ledger", b"x")
        record = f"{key(a, 'victim')}\t78\n".encode()
        hold.arm()
        try:
            call = Background(a.invoke, "victim", 1, d.connect())
            checked = hold.reached("checked")  # claimed; the last byte was a newline
            append_partial_line(env.ledger, b"ab")
            hold.let_go(checked)
            hold.reached("written")  # our record is durable, its outcome not yet sent
            d.kill()
        finally:
            hold.disarm()
        call.error_of()  # the daemon died under the call
        first = f"{key(a, 'first')}\t31\n".encode()
        assert env.ledger.read_bytes() == first + b"ab" + record

        d.start()
        a.client = d.connect()
        att = a.op("victim")["attempts"][0]
        assert att["state"] != "not_executed"
        assert (att["state"], att["outcome"]["source"]) == ("succeeded", "receipt")
        a.bind(0)
        assert code_of(a.invoke, "victim", 2).code == "already_succeeded"
        assert env.ledger.read_bytes() == first + b"ab" + record  # one effect

    def test_without_a_foreign_append_the_hook_changes_nothing(self, make_daemon):
        """A call held at both points and let go writes its one line and succeeds."""
        env = Env()
        hold = Hold(env.root, HOLD_ENV, ("checked", "written"))
        d = make_daemon(env, start=False)
        d.start(hold.env)
        a = Actor(d, acts=("ledger",))
        a.submit("op", "ledger", b"x")
        hold.arm()
        try:
            call = Background(a.invoke, "op", 1, d.connect())
            hold.let_go(hold.reached("checked"))
            hold.let_go(hold.reached("written"))
        finally:
            hold.disarm()
        assert call.result()["status"] == "succeeded"
        assert env.ledger_lines() == [f"{key(a, 'op')}\t78"]
