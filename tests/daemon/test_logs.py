"""Log lines an operator can grep, read from a real daemon's stderr."""

from __future__ import annotations

import json
from typing import Any

from tests.daemon.harness import Actor, Daemon


def events(d: Daemon, name: str) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in d.log_text().splitlines() if x.startswith("{")]
    return [e for e in lines if e["event"] == name]


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
