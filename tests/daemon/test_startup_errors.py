"""Start-up refusals: one clear line, a documented exit status, nothing created."""

from __future__ import annotations

import json
import socket

import pytest

from tests._poll import wait_for
from tests.daemon.harness import Env, reap, spawn_activated

EX_DATAERR, EX_TEMPFAIL, EX_CONFIG = 65, 75, 78


def one_line(text: str) -> str:
    """The refusal: exactly one line on stderr, and no traceback."""
    lines = [x for x in text.splitlines() if x.strip()]
    assert "Traceback" not in text and len(lines) == 1, text
    assert lines[0].startswith("wardd: "), lines[0]
    return lines[0]


class TestUnusableDatabase:
    @pytest.mark.parametrize(
        "content",
        [b"not a database at all, just text\n" * 200, b"SQLite format 3\x00" + b"\xff" * 4096],
        ids=["text", "corrupt-header"],
    )
    def test_a_file_that_is_not_a_wardd_database_is_one_line_and_exit_65(
        self, make_daemon, content
    ):
        """A non-SQLite or corrupt database file refuses the start with exit 65 and one line."""
        env = Env()
        env.database.parent.mkdir(parents=True)
        env.database.write_bytes(content)
        d = make_daemon(env, start=False)
        assert d.spawn().wait(30) == EX_DATAERR
        line = one_line(d.log_text())
        assert str(env.database) in line and "not a usable wardd database" in line
        assert env.database.read_bytes() == content  # left as it was


class TestAnotherDaemonListens:
    def test_a_refused_daemon_creates_no_database(self, make_daemon, daemon):
        """A daemon refused because another listens on its socket exits 75 and creates nothing."""
        other = Env()
        other.top["socket"] = str(daemon.env.socket)
        other.write_config()
        second = make_daemon(other, start=False)
        assert second.spawn().wait(30) == EX_TEMPFAIL
        line = one_line(second.log_text())
        assert "another process is listening" in line and str(daemon.env.socket) in line
        assert not other.database.exists() and not other.database.parent.exists()
        with daemon.connect() as c:
            assert c.call("status")["boot"] == daemon.boot


class TestActivationDescriptors:
    @pytest.mark.parametrize("kind", ["unix-datagram", "tcp", "unix-not-listening"])
    def test_a_descriptor_of_the_wrong_kind_is_exit_78(self, tmp_path, kind):
        """A datagram, TCP or non-listening (Accept=yes) socket as fd 3 exits 78, one line."""
        env = Env()
        if kind == "unix-datagram":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(str(tmp_path / "dgram.sock"))
        elif kind == "tcp":
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sock.listen(1)
        else:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        log = tmp_path / "daemon.log"
        with sock:
            proc = spawn_activated(env, sock, log)
        try:
            assert proc.wait(30) == EX_CONFIG
        finally:
            reap(proc)
        line = one_line(log.read_text())
        assert "socket activation" in line
        assert not env.database.exists()

    def test_activated_on_another_path_says_which_path_it_serves(self, tmp_path):
        """Activated on a socket other than the configured one, it logs the path it serves."""
        env = Env()
        path = tmp_path / "elsewhere.sock"
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(str(path))
        lsock.listen(8)
        log = tmp_path / "daemon.log"
        with lsock:
            proc = spawn_activated(env, lsock, log)
        try:

            def ready() -> list[dict[str, object]]:
                """The log's events once one says ready (the daemon still running)."""
                assert proc.poll() is None, log.read_text()
                text = log.read_text()
                events = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
                return events if any(e["event"] == "ready" for e in events) else []

            events = wait_for(ready, 30, "the daemon to log ready", seen=log.read_text)
            (said,) = [e for e in events if e["event"] == "activated_socket"]
            assert said["socket"] == str(path) and said["configured"] == str(env.socket)
            proc.terminate()
            assert proc.wait(30) == 0
        finally:
            reap(proc)


class TestSQLiteTooOld:
    def test_a_python_linked_with_an_older_sqlite_is_refused_before_the_database(
        self, make_daemon, tmp_path
    ):
        """Schema 7 needs SQLite 3.31 (a generated column): on an older one the
        start is one line naming both versions, exit 1, and no database made."""
        shim = tmp_path / "old-sqlite"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(
            "import sqlite3\n"
            "sqlite3.sqlite_version_info = (3, 30, 1)\n"
            "sqlite3.sqlite_version = '3.30.1'\n"
        )
        env = Env()
        d = make_daemon(env, start=False)
        assert d.spawn({"PYTHONPATH": str(shim)}).wait(30) == 1
        line = one_line(d.log_text())
        assert "SQLite 3.30.1 is older than 3.31.0" in line
        assert not env.database.exists()

    def test_a_sqlite_without_its_json_functions_is_refused_before_the_database(
        self, make_daemon, tmp_path
    ):
        """SQLite before 3.38 has its JSON functions only when built with them,
        and schema 7's migration calls one: on a build without them the start
        is one line saying so, exit 1 (not "not a usable database", exit 65),
        and no database made. The shim denies the function (SQLite's own
        authorizer) on every connection, as such a build lacks it."""
        shim = tmp_path / "no-json"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(
            "import sqlite3\n"
            "_connect = sqlite3.connect\n"
            "def _deny(action, arg1, arg2, db, trigger):\n"
            "    if action == sqlite3.SQLITE_FUNCTION and arg2 == 'json_group_object':\n"
            "        return sqlite3.SQLITE_DENY\n"
            "    return sqlite3.SQLITE_OK\n"
            "def connect(*args, **kwargs):\n"
            "    conn = _connect(*args, **kwargs)\n"
            "    conn.set_authorizer(_deny)\n"
            "    return conn\n"
            "sqlite3.connect = connect\n"
        )
        env = Env()
        d = make_daemon(env, start=False)
        assert d.spawn({"PYTHONPATH": str(shim)}).wait(30) == 1
        line = one_line(d.log_text())
        assert "built without its JSON functions" in line and "json_group_object" in line
        assert not env.database.exists()
