"""Log lines an operator can grep, read from a real daemon's stderr."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from tests._poll import wait_for
from tests.daemon.crashes import crash_with_a_blocked_call_and_a_landed_write
from tests.daemon.harness import Actor, Daemon, Env
from tests.doc_tables import documented_fields
from wardd.daemon.observe.logs import PRIORITY


def events(d: Daemon, name: str) -> list[dict[str, Any]]:
    return d.logged(name)


class TestOutcomeLines:
    def test_every_outcome_line_names_its_neuron_op_and_attempt(self, daemon):
        """An outcome line carries neuron, op, attempt, worker and status."""
        a = Actor(daemon)
        a.submit("op-1", "echo", b"x")
        a.invoke("op-1")
        daemon.terminate()
        (line,) = events(daemon, "outcome")
        assert (line["neuron"], line["op"], line["attempt"]) == (a.id, "op-1", 1)
        assert (line["level"], line["status"], line["worker"]) == ("info", "succeeded", "w0")

    def test_an_unknown_outcome_is_a_warning_with_the_error_text(self, daemon):
        """An unknown outcome is logged at warning with the adapter's error text."""
        a = Actor(daemon, acts=("boom",))
        a.submit("op-b", "boom")
        r = a.invoke("op-b")
        assert r["status"] == "unknown"
        daemon.terminate()
        (line,) = events(daemon, "outcome")
        assert (line["level"], line["status"], line["neuron"]) == ("warning", "unknown", a.id)
        assert line["error"] == r["error"] and "exit status 7" in line["error"]


class TestMarkedUnknownLines:
    def test_marked_unknown_names_each_attempt(self, daemon):
        """After a crash, one marked_unknown line per attempt: neuron, op, attempt, claimed."""
        a = Actor(daemon)
        for op in ("p-1", "p-2"):
            a.submit(op, "echo", b"x")
            a.prepare(op)
        old_boot = daemon.boot
        daemon.kill()
        daemon.start()
        marks = events(daemon, "marked_unknown")
        assert sorted((m["neuron"], m["op"], m["attempt"], m["claimed"]) for m in marks) == [
            (a.id, "p-1", 1, False),
            (a.id, "p-2", 1, False),
        ]
        assert {m["level"] for m in marks} == {"warning"}
        assert {m["boot"] for m in marks} == {old_boot}


def _journal_env(d: Daemon) -> dict[str, str]:
    """JOURNAL_STREAM naming the file the daemon's next start writes its stderr
    to (the harness opens ``daemon-<n>.log`` for writing, which keeps the inode)."""
    log = d.env.root / f"daemon-{len(d.logs)}.log"
    log.touch()
    st = os.stat(log)
    return {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}


def _prefixed_lines(d: Daemon) -> list[tuple[int, dict[str, Any]]]:
    """(priority, JSON object) of every line the last start wrote."""
    out = []
    for line in d.logs[-1].read_text().splitlines():
        m = re.fullmatch(r"<(\d)>(\{.*\})", line)
        assert m, f"a line without its priority prefix: {line!r}"
        out.append((int(m.group(1)), json.loads(m.group(2))))
    return out


class TestJournald:
    def test_each_line_carries_its_priority_and_filters_like_journalctl_p(self, make_daemon):
        """Under journald every line starts with the <N> of its level, so that
        keeping N <= 4 (journalctl -p warning) keeps exactly the warnings and
        worse; the fields of each line are the ones docs/operations.md lists."""
        env = Env(log_level="debug")
        d = make_daemon(env)
        a = Actor(d, acts=("echo", "boom", "gated", "ledger"))
        crash_with_a_blocked_call_and_a_landed_write(d, a, _journal_env(d))
        a.bind(0)  # this boot's descriptor
        a.submit("e1")
        a.invoke("e1")
        a.submit("b1", "boom")
        assert a.invoke("b1")["status"] == "unknown"
        wait_for(lambda: a.read("status")["receipts_pending"] == 0, what="receipts")
        assert d.terminate() == 0

        lines = _prefixed_lines(d)
        for n, obj in lines:
            assert n == PRIORITY[obj["level"]], obj
        by_event = {obj["event"]: n for n, obj in lines}
        for event in (
            "starting",
            "ready",
            "claimed",
            "outcome",
            "signal",
            "stopping",
            "stopped",
            "marked_unknown",
            "orphan_killed",
            "receipt",
        ):
            assert event in by_event, event  # fmt: skip
        warned = [obj for n, obj in lines if n <= PRIORITY["warning"]]
        assert warned == [obj for _, obj in lines if obj["level"] in ("warning", "error")]
        assert {o["event"] for o in warned} == {"marked_unknown", "orphan_killed", "outcome"}
        assert [o["op"] for o in warned if o["event"] == "outcome"] == ["b1"]

        # the lines the docs left out before: now named there
        fields = documented_fields()
        for _, obj in lines:
            extra = set(obj) - {"event", "level", "timestamp"} - fields[obj["event"]]
            assert extra == set(), (obj["event"], extra)
        marks = {o["op"]: o for _, o in lines if o["event"] == "marked_unknown"}
        assert marks["g1"]["orphan_killed"] is True and "orphan_killed" not in marks["l1"]
        (receipt,) = [o for _, o in lines if o["event"] == "receipt"]
        assert receipt["applicable"] is True and receipt["resolved"] is True
        (sig,) = [o for _, o in lines if o["event"] == "signal"]
        assert (sig["signal"], sig["action"]) == ("SIGTERM", "stop")

    def test_without_journald_no_line_is_prefixed(self, daemon):
        """A JOURNAL_STREAM that names another file leaves the lines plain JSON."""
        d = daemon
        d.terminate()
        d.start({"JOURNAL_STREAM": "1:1"})
        d.terminate()
        text = d.logs[-1].read_text().splitlines()
        assert text and all(line.startswith("{") for line in text)


class TestTextFormat:
    def test_text_lines_carry_the_same_fields(self, make_daemon):
        """log_format = "text": readable lines, not JSON, with the event and its fields."""
        d = make_daemon(Env(log_format="text"))
        a = Actor(d)
        a.submit("op-t", "echo", b"x")
        a.invoke("op-t")
        d.terminate()
        lines = d.logs[-1].read_text().splitlines()
        assert not any(line.startswith("{") for line in lines)
        (outcome,) = [line for line in lines if " outcome " in f" {line} "]
        for field in ("op=op-t", "attempt=1", "status=succeeded", f"neuron={a.id}", "[info"):
            assert field in outcome, (field, outcome)
