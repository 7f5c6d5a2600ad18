"""The log lines' format and the journald priority prefix, on real descriptors."""

from __future__ import annotations

import json
import os

import structlog

from wardd.daemon.observe import logs
from wardd.daemon.observe.logs import PRIORITY, journald_stream


def _stream_id(fd: int) -> str:
    st = os.fstat(fd)
    return f"{st.st_dev}:{st.st_ino}"


class TestJournaldStream:
    def test_only_the_stream_journal_stream_names_is_journald(self) -> None:
        """JOURNAL_STREAM must name the descriptor's own device and inode."""
        r, w = os.pipe()
        r2, w2 = os.pipe()
        try:
            assert journald_stream({"JOURNAL_STREAM": _stream_id(w)}, fd=w)
            assert not journald_stream({"JOURNAL_STREAM": _stream_id(w2)}, fd=w)
            for bad in ("", "1", "a:b", ":", "1:2:3"):
                assert not journald_stream({"JOURNAL_STREAM": bad}, fd=w), bad
            assert not journald_stream({}, fd=w)
        finally:
            for fd in (r, w, r2, w2):
                os.close(fd)


class TestRenderers:
    def test_every_line_of_a_multi_line_entry_gets_the_prefix(self) -> None:
        """journald reads each line as an entry: a text traceback keeps its priority."""
        render = logs._prefixed(lambda logger, method, ed: "first\nsecond")
        out = render(None, "error", {"level": "error"})
        assert out.splitlines() == ["<3>first", "<3>second"]

    def test_the_direct_line_follows_the_configured_format(self) -> None:
        """A line written from a signal handler is rendered like structlog's own."""
        r, w = os.pipe()
        saved = os.dup(2)
        try:
            os.dup2(w, 2)  # the daemon's stderr: journald's stream
            logs.configure_logging("info", "json", {"JOURNAL_STREAM": _stream_id(w)})
            line = logs.render_direct("warning", {"event": "signal", "action": "exit"})
            logs.configure_logging("info", "json", {})
            plain = logs.render_direct("warning", {"event": "signal"})
        finally:
            structlog.reset_defaults()
            os.dup2(saved, 2)
            os.close(saved)
            os.close(r)
            os.close(w)
        assert line.startswith(f"<{PRIORITY['warning']}>{{")
        assert json.loads(line[3:]) == {"event": "signal", "action": "exit", "level": "warning"}
        assert json.loads(plain)["level"] == "warning"

    def test_lines_written_at_once_read_as_structlogs_own(self, tmp_path) -> None:
        """`log_lines` (the recovery's marks): the fields, order and format of a
        line through structlog, and nothing below the configured level."""
        out = tmp_path / "stderr"
        saved = os.dup(2)
        fd = os.open(out, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.dup2(fd, 2)
            logs.configure_logging("info", "json", {})
            log = structlog.get_logger("test")
            log.warning("marked_unknown", op="a", attempt=1)
            marks = [{"op": f"op-{i}"} for i in range(3)]
            logs.log_lines(log, "warning", "marked_unknown", marks)
            logs.configure_logging("error", "json", {})
            logs.log_lines(structlog.get_logger("x"), "warning", "dropped", [{"op": "no"}])
        finally:
            structlog.reset_defaults()
            os.dup2(saved, 2)
            os.close(saved)
            os.close(fd)
        first, *rest = [json.loads(x) for x in out.read_text().splitlines()]
        assert [list(x) for x in rest] == [["op", "event", "level", "timestamp"]] * 3
        assert list(first) == ["op", "attempt", "event", "level", "timestamp"]
        assert [x["op"] for x in rest] == ["op-0", "op-1", "op-2"]
        assert {x["level"] for x in rest} == {"warning"}
        assert len(rest[0]["timestamp"]) == len(first["timestamp"])
