"""The foundation over the wire: a real daemon process on a real socket (contract §4, §6)."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import stat
import struct
import subprocess
import sys

import cbor2
import pytest

from tests.daemon.harness import NETWORK, Actor, Daemon, Env, reap, spawn_activated


def raw(path, timeout=10.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    return s


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


def req(rid, method, params=None) -> bytes:
    return frame(cbor2.dumps({"id": rid, "method": method, "params": params or {}}))


HELLO = req(0, "hello", {"protocol": 1, "client": "test"})


def read_frames(s, limit=8):
    """Frames until EOF (closed=True) or the socket timeout (closed=False)."""
    out, buf = [], b""
    try:
        while len(out) < limit:
            chunk = s.recv(65536)
            if not chunk:
                return out, True
            buf += chunk
            while len(buf) >= 4:
                (n,) = struct.unpack(">I", buf[:4])
                if len(buf) < 4 + n:
                    break
                out.append(cbor2.loads(buf[4 : 4 + n]))
                buf = buf[4 + n :]
    except TimeoutError:
        return out, False
    except ConnectionResetError:
        return out, True
    return out, False


@pytest.fixture(scope="module")
def wire_daemon():
    """One daemon for the tests that only read it or poke its wire: each opens
    its own connections and writes nothing (no op, no neuron), so none can see
    another's traces; the tests that stop, replace or re-mode it get their own."""
    d = Daemon(Env(), shared=True)  # module-scoped: the leftover guard spares it till the end
    try:
        d.start()
        yield d
    finally:
        d.cleanup()


class TestHelloAndStatus:
    def test_hello_then_status_round_trip(self, wire_daemon):
        """hello answers protocol, boot, network and max_frame; status the documented fields."""
        with wire_daemon.connect() as c:
            h = c.hello_result
            assert (h.protocol, h.network, h.max_frame) == (1, NETWORK, 1 << 20)
            assert re.fullmatch(r"[0-9a-f]{32}", h.boot)
            st = c.call("status")
        assert st["boot"] == h.boot and st["network"] == NETWORK and st["protocol"] == 1
        assert [w["id"] for w in st["workers"]] == ["w0", "w1"]
        assert all(w["busy_op"] is None for w in st["workers"])
        assert st["db"]["schema_version"] >= 1 and st["connections"] >= 1
        assert st["unknown_attempts"] == 0 and st["receipts_pending"] == 0

    def test_list_workers_digest_is_sha256_of_canonical_cbor(self, wire_daemon):
        import hashlib

        with wire_daemon.connect() as c:
            workers = c.call("list_workers")["workers"]
        for w in workers:
            d = w["descriptor"]
            assert w["digest"] == hashlib.sha256(cbor2.dumps(d, canonical=True)).hexdigest()
            assert d["executor"]["boot"] == wire_daemon.boot and d["proof"] == "none"
            assert d["limits"] == {"cpu": None, "time": None, "memory": None}

    def test_request_before_hello_is_refused_and_closed(self, wire_daemon):
        with raw(wire_daemon.env.socket) as s:
            s.sendall(req(1, "status"))
            frames, closed = read_frames(s)
        assert closed and frames[0]["error"]["code"] == "protocol_error"
        assert frames[0]["error"]["data"]["supported"] == [1]

    def test_pipelined_requests_answer_by_id(self, wire_daemon):
        with raw(wire_daemon.env.socket) as s:
            s.sendall(HELLO + req(7, "status") + req(8, "list_workers") + req(9, "nope"))
            frames, _ = read_frames(s, limit=4)
        by_id = {f["id"]: f for f in frames}
        assert by_id[7]["result"]["boot"] == wire_daemon.boot
        assert by_id[8]["result"]["workers"]
        assert by_id[9]["error"]["code"] == "unknown_method"


class TestReplies:
    def test_replies_larger_than_the_socket_buffer_arrive_whole(self, daemon):
        """Pipelined replies that fill the socket (large ones, small ones between
        them) each arrive as one whole frame, one per request, none cut or mixed
        (a daemon of its own: it submits an op)."""
        actor = Actor(daemon)
        args = bytes(range(256)) * 240  # 60 KiB, 40 times: many socket buffers' worth
        actor.submit("big", args=args)
        get = {"neuron": actor.id, "op": "big"}
        requests = []
        for i in range(1, 81):
            requests.append(req(i, "get_operation", get) if i % 2 else req(i, "status"))
        with raw(daemon.env.socket, timeout=30) as s:
            s.sendall(HELLO + b"".join(requests))  # all sent before any reply is read
            frames, _ = read_frames(s, limit=81)
        assert sorted(f["id"] for f in frames) == list(range(81))
        for f in frames:
            if f["id"] % 2 and "result" in f:
                assert f["result"]["args"] == args
            elif f["id"] % 2:
                assert f["error"]["code"] == "overloaded"
            elif f["id"]:
                assert f["result"]["boot"] == daemon.boot


BAD_FRAMES = {
    "zero_length": struct.pack(">I", 0),
    "over_max_frame": struct.pack(">I", (1 << 20) + 1),
    "invalid_cbor": frame(b"\xff\xff"),
    "trailing_bytes": frame(cbor2.dumps({"id": 1}) + b"\x00"),
    "invalid_utf8": frame(b"\x62\xc3\x28"),
    "reserved_value": frame(b"\x1c"),
    "too_deep": frame(b"\x81" * 65 + b"\x00"),
    "duplicate_key": frame(b"\xa2\x61a\x01\x61a\x02"),
}


class TestBadInput:
    @pytest.mark.parametrize("name", sorted(BAD_FRAMES))
    def test_bad_frame_gets_bad_frame_and_close(self, wire_daemon, name):
        """contract §4: a bad frame gets an error frame (bad_frame, id null), then a close;
        the daemon lives on."""
        with raw(wire_daemon.env.socket) as s:
            s.sendall(HELLO + BAD_FRAMES[name])
            frames, closed = read_frames(s)
        assert frames[0]["result"]["protocol"] == 1
        err = frames[1]
        assert err["id"] is None and err["error"]["code"] == "bad_frame", err
        assert closed
        with wire_daemon.connect() as c:
            assert c.call("status")["boot"] == wire_daemon.boot

    def test_truncated_frame_then_eof_closes_only_that_connection(self, wire_daemon):
        with raw(wire_daemon.env.socket) as s:
            s.sendall(HELLO + struct.pack(">I", 100) + b"\xa1")
            s.shutdown(socket.SHUT_WR)
            frames, closed = read_frames(s)
        assert closed and len(frames) == 1
        with wire_daemon.connect() as c:
            assert c.call("status")["boot"] == wire_daemon.boot

    @pytest.mark.parametrize(
        "item,has_id",
        [
            ([1, 2, 3], False),
            ({"id": 1, "method": "status"}, True),
            ({"id": -1, "method": "status", "params": {}}, False),
            ({"id": True, "method": "status", "params": {}}, False),
            ({"id": 3, "method": 5, "params": {}}, True),
            ({"id": 4, "method": "status", "params": []}, True),
        ],
    )
    def test_invalid_request_gets_protocol_error_and_stays_open(self, wire_daemon, item, has_id):
        # the read ends at the third frame: the socket's timeout only bounds a
        # daemon that never sends it (2 s could cut a daemon slowed by a loaded machine)
        with raw(wire_daemon.env.socket) as s:
            s.sendall(HELLO + frame(cbor2.dumps(item)) + req(99, "status"))
            frames, closed = read_frames(s, limit=3)
        assert not closed
        err, ok = frames[1], frames[2]
        assert err["error"]["code"] == "protocol_error"
        assert err["id"] == (item["id"] if has_id else None)
        assert ok["id"] == 99 and "result" in ok

    def test_bad_params_are_bad_request_and_change_nothing(self, wire_daemon):
        with wire_daemon.connect() as c:
            for method, params in [
                ("get_neuron", {"neuron": "XYZ"}),
                ("list_attempts", {"state": "weird"}),
                ("list_attempts", {"state": "unknown", "limit": 0}),
                ("status", {"extra": 1}),
                ("execute", {"token": "not-bytes"}),
            ]:
                with pytest.raises(Exception) as ei:
                    c.call(method, params)
                assert getattr(ei.value, "code", None) == "bad_request", (method, ei.value)
            assert c.call("status")["operations"] == {}


class TestSocketAndLock:
    def test_socket_is_0600(self, wire_daemon):
        assert stat.S_IMODE(os.stat(wire_daemon.env.socket).st_mode) == 0o600

    def test_second_daemon_on_same_database_is_refused(self, make_daemon, daemon):
        other = Env()
        other.top["database"] = str(daemon.env.database)
        other.write_config()
        second = make_daemon(other, start=False)
        proc = second.spawn()
        assert proc.wait(30) == 75
        text = second.log_text()
        assert f"{daemon.env.database}.lock" in text and f"pid {daemon.proc.pid}" in text
        with daemon.connect() as c:
            assert c.call("status")["boot"] == daemon.boot

    def test_second_daemon_via_symlinked_path_is_refused(self, make_daemon, daemon):
        other = Env()
        link = other.root / "link.db"
        link.symlink_to(daemon.env.database)
        other.top["database"] = str(link)
        other.write_config()
        second = make_daemon(other, start=False)
        assert second.spawn().wait(30) == 75

    def test_sigterm_stops_cleanly_and_leaves_a_whole_database(self, daemon):
        with daemon.connect() as c:
            c.call("status")
        assert daemon.terminate() == 0
        db = sqlite3.connect(daemon.env.database)
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute(
            "SELECT clean FROM boots WHERE boot_id = ?", (daemon.boot,)
        ).fetchone() == (1,)
        db.close()
        daemon.start()  # starts again on the same database
        with daemon.connect() as c:
            assert c.call("status")["boot"] == daemon.boot

    def test_stale_socket_file_is_replaced(self, make_daemon):
        env = Env()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(str(env.socket))
        s.close()  # a socket file with no listener
        d = make_daemon(env)
        with d.connect() as c:
            assert c.call("status")["boot"] == d.boot

    def test_a_regular_file_at_the_socket_path_is_never_replaced(self, make_daemon):
        env = Env()
        env.socket.write_text("precious")
        d = make_daemon(env, start=False)
        assert d.spawn().wait(30) == 78
        assert env.socket.read_text() == "precious"
        assert "not a socket" in d.log_text()

    def test_a_live_socket_is_never_replaced(self, make_daemon, daemon):
        other = Env()
        other.top["socket"] = str(daemon.env.socket)
        other.write_config()
        second = make_daemon(other, start=False)
        assert second.spawn().wait(30) == 75
        with daemon.connect() as c:
            assert c.call("status")["boot"] == daemon.boot

    @pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
    def test_other_uid_gets_forbidden_then_close(self, daemon):
        os.chmod(daemon.env.root.parent, 0o711)  # only SO_PEERCRED stands in the way
        os.chmod(daemon.env.root, 0o711)
        os.chmod(daemon.env.socket, 0o666)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                os.close(r)
                os.setgid(65534)
                os.setuid(65534)
                s = raw(daemon.env.socket)
                try:
                    s.sendall(HELLO)
                except OSError:
                    pass
                frames, closed = read_frames(s)
                msg = f"{frames[0]['error']['code'] if frames else 'none'}:{closed}"
                os.write(w, msg.encode())
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        with os.fdopen(r) as f:
            msg = f.read()
        os.waitpid(pid, 0)
        assert msg == "forbidden:True"


class TestCommandLine:
    def run(self, *args):
        return subprocess.run(
            [sys.executable, "-m", "wardd.daemon.cli", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    def test_version(self):
        from importlib.metadata import version

        out = self.run("--version")
        assert out.returncode == 0 and out.stdout.strip() == f"wardd {version('wardd')}"

    def test_help_names_the_commands(self):
        out = self.run("--help")
        assert out.returncode == 0
        for word in ("run", "check-config", "78", "75"):
            assert word in out.stdout

    @pytest.mark.parametrize(
        "text,key",
        [
            ('network = "local"\nbogus = 1\n', "bogus"),
            ("workers = 0\n", "workers"),
            ("max_frame = 10\n", "max_frame"),
            ('[acts."tool.run"]\nadapter = "nope"\n', 'acts."tool.run".adapter'),
            ('[acts."x"]\nadapter = "cli"\nargv = []\n', "acts.x.argv"),
            ("network = \n", ""),
        ],
    )
    def test_check_config_names_file_key_and_reason(self, tmp_path, text, key):
        p = tmp_path / "bad.toml"
        p.write_text(text)
        out = self.run("check-config", str(p))
        assert out.returncode == 78
        line = out.stderr.strip()
        assert "\n" not in line and str(p) in line and key in line, line

    def test_run_with_bad_config_exits_78_with_one_line(self, tmp_path):
        p = tmp_path / "bad.toml"
        p.write_text("token_ttl_s = -1\n")
        out = self.run("run", "--config", str(p))
        assert out.returncode == 78 and "token_ttl_s" in out.stderr

    def test_check_config_accepts_a_good_file(self, tmp_path):
        env = Env()
        out = self.run("check-config", str(env.config))
        assert out.returncode == 0, out.stderr


class TestSystemd:
    def test_socket_activation_serves_on_the_passed_socket(self, tmp_path):
        """sd_listen_fds(3): the listening socket arrives as fd 3."""
        env = Env()
        path = tmp_path / "act.sock"
        lsock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lsock.bind(str(path))
        lsock.listen(8)
        proc = spawn_activated(env, lsock, tmp_path / "act.log")
        lsock.close()
        try:
            with raw(path, timeout=30) as s:  # connections queue until the daemon accepts
                s.sendall(HELLO + req(1, "status"))
                frames, _ = read_frames(s, limit=2)
            assert frames[1]["result"]["network"] == NETWORK
            assert not env.socket.exists(), "an activated daemon binds no socket of its own"
            proc.terminate()
            assert proc.wait(30) == 0
        finally:
            reap(proc)

    def test_notify_sends_ready_watchdog_and_stopping(self, make_daemon):
        env = Env()
        d = make_daemon(env, start=False)
        path = env.root / "notify"
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(str(path))
        ns.settimeout(30)
        d.spawn({"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000"})
        seen: list[str] = []

        def until(line):
            while line not in seen:
                seen.extend(ns.recv(4096).decode().split("\n"))

        until("READY=1")
        until("WATCHDOG=1")
        d.proc.terminate()
        until("STOPPING=1")
        assert d.proc.wait(30) == 0
        ns.close()


class TestLimits:
    def test_connections_over_the_limit_are_overloaded(self, make_daemon):
        from tests._poll import wait_for

        d = make_daemon(Env(max_connections=2))
        c1 = d.connect()
        # the harness's own start-up connection may still be closing
        wait_for(lambda: c1.call("status")["connections"] == 1, what="one connection")
        c2 = d.connect()
        with raw(d.env.socket) as s:
            try:
                s.sendall(HELLO)
            except (BrokenPipeError, ConnectionResetError):
                pass  # refused at accept; what it sent first is still readable
            frames, closed = read_frames(s)
        assert frames[0]["error"]["code"] == "overloaded" and closed
        assert c1.call("status")["connections"] == 2
        c2.close()

    def test_a_sequential_client_is_never_overloaded(self, make_daemon):
        """A reply on its way while the next request arrives is not in flight."""
        d = make_daemon(Env(max_in_flight=1))
        with d.connect() as c:
            for _ in range(200):
                assert c.call("status")["boot"] == d.boot

    def test_requests_in_flight_over_the_limit_are_overloaded(self, make_daemon):
        from tests._poll import wait_for
        from tests.daemon.harness import Actor

        env = Env(max_in_flight=1)
        d = make_daemon(env)
        a = Actor(d, acts=("gated",))
        a.submit("g", "gated")
        params = a.neuron.sign("invoke", a.prepare_params("g"), NETWORK)
        with raw(d.env.socket) as s:
            s.sendall(HELLO + req(1, "invoke", params))
            wait_for(env.started_marker("g").exists, what="the gated act to start")
            s.sendall(req(2, "status"))
            frames, _ = read_frames(s, limit=2)
            assert frames[1]["id"] == 2 and frames[1]["error"]["code"] == "overloaded"
            env.open_gate("g")
            frames, _ = read_frames(s, limit=1)
            assert frames[0]["id"] == 1 and frames[0]["result"]["status"] == "succeeded"


class TestPaging:
    def test_history_and_list_operations_page_with_next(self, daemon):
        from tests.daemon.harness import Actor

        a = Actor(daemon, acts=("echo",))
        for i in range(7):
            a.submit(f"op-{i}")
        ops, after = [], None
        while True:
            p = {"neuron": a.id, "limit": 3, **({"after": after} if after else {})}
            page = a.read("list_operations", p)
            ops += [o["op"] for o in page["operations"]]
            if "next" not in page:
                break
            after = page["next"]
        assert ops == [f"op-{i}" for i in range(7)]
        a.invoke("op-0")
        first = a.read("history", {"neuron": a.id, "op": "op-0", "limit": 2})
        rest = a.read("history", {"neuron": a.id, "op": "op-0", "after": first["next"]})
        kinds = [r["kind"] for r in first["records"] + rest["records"]]
        assert kinds == ["submitted", "prepared", "claimed", "outcome"] and "next" not in rest

    def test_a_read_that_names_no_limit_gets_pages_of_100(self, daemon):
        """`limit` defaults to 100 (docs/protocol.md): the 101st op is on the next page."""
        from tests.daemon.harness import Actor

        a = Actor(daemon, acts=("echo",))
        for i in range(101):
            a.submit(f"op-{i:03}")
        first = a.read("list_operations", {"neuron": a.id})
        assert [o["op"] for o in first["operations"]] == [f"op-{i:03}" for i in range(100)]
        rest = a.read("list_operations", {"neuron": a.id, "after": first["next"]})
        assert [o["op"] for o in rest["operations"]] == ["op-100"] and "next" not in rest
